"""``sparkglass demo --keep-serving``: after the replay the page and REST stay up, a round still
answers, and Ctrl-C ends the demo as a finished replay (exit 0)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.timeout(600)  # a backstop: the waits below have their own deadlines


def test_the_page_stays_up_after_the_replay_until_ctrl_c(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PYSPARK_PYTHON": sys.executable,
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkglass", "demo", "--days", "1", "--feed-interval", "0.1",
         "--service-port", "0", "--workdir", str(tmp_path / "work"), "--keep-serving"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()

    def wait_for(pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(lines):
                if found := re.search(pattern, line):
                    return found
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in {timeout} s:\n{''.join(lines)}")

    try:
        url = wait_for(r"Data Sample page\S*: (http://\S+?)/?\s", 300).group(1)
        token = wait_for(r"service token: (\S+)", 30).group(1)
        wait_for(r"replay finished\S*: the pipeline and the page stay up", 300)
        base = url.split("/ui")[0].rstrip("/")
        headers = {"Authorization": f"Bearer {token}"}
        sample = f"{base}/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
        with httpx.Client(timeout=30) as c:
            apps = c.get(f"{base}/api/v1/namespaces/local/applications", headers=headers)
            assert apps.status_code == 200 and [a["name"] for a in apps.json()] == ["flights"]
            # A round after the replay: the queries idle, so it ends without rows, but it ends.
            deadline = time.monotonic() + 120
            while (body := c.get(sample, headers=headers).json())["status"] == "PENDING":
                assert time.monotonic() < deadline, body
                time.sleep(0.5)
            assert body["status"] in ("COMPLETE", "PARTIAL", "NO_DATA"), body
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0, "".join(lines)
        reader.join(timeout=10)
        assert any("done (replay finished)" in line for line in lines), "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

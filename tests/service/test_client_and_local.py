"""``start_local_service`` (what the demo calls) and ``ServiceClient`` (for ``sparkglass
sample --service``) against the fake driver, over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sparkglass.service.client import ServiceClient, ServiceError
from sparkglass.service.local import start_local_service

from .fake_driver import TOKEN, FakeDriver


def test_local_service_and_client(tmp_path: Path, fake_driver: FakeDriver) -> None:
    svc = start_local_service(
        {"flights": (fake_driver.url, TOKEN)},
        database_url=f"sqlite:///{tmp_path / 'local.db'}",
        poll_interval_seconds=0.05,
    )
    try:
        assert svc.page_url == f"{svc.url}/ui/#token={svc.token}"
        assert httpx.get(f"{svc.url}/ui/").status_code == 200
        assert httpx.get(f"{svc.url}/", follow_redirects=False).headers["location"] == "/ui/"
        with ServiceClient(svc.url, svc.token) as client:
            result = client.sample("flights", "parse", max_records=5, poll_seconds=0.1)
            assert result.status == "COMPLETE" and result.total_record_count == 5
            # Polling the same request again revalidates: a 304, the same result from memory.
            statuses: list[int] = []
            client._http.event_hooks["response"].append(lambda r: statuses.append(r.status_code))
            again = client.poll("flights", "parse", max_records=5)
            assert statuses == [304] and again == result
            off = client.sample("flights", "off", poll_seconds=0.1)
            assert off.status == "DISABLED"
            with pytest.raises(ServiceError, match=r"404.*vertices: flights") as err:
                client.poll("flights", "nope")
            assert err.value.status_code == 404
        with ServiceClient(svc.url, "wrong") as bad, pytest.raises(ServiceError) as err:
            bad.poll("flights", "parse")
        assert err.value.status_code == 401
    finally:
        svc.stop()


def test_sparkglass_serve_command(tmp_path: Path, fake_driver: FakeDriver) -> None:
    """``sparkglass serve --driver NAME=URL`` registers the driver and prints a working
    page URL with a fresh admin token; settings come from SPARKGLASS_* variables."""
    import os
    import re
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
        "SPARKGLASS_PORT": str(port),
        "SPARKGLASS_CONTROL_TOKEN": TOKEN,
    }
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkglass", "serve", "--driver", f"flights={fake_driver.url}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while not re.search(r"#token=(\S+)", log.read_text()):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        token = re.search(r"#token=(\S+)", text).group(1)  # type: ignore[union-attr]
        assert f"http://127.0.0.1:{port}/ui/#token=" in text
        with ServiceClient(f"http://127.0.0.1:{port}", token) as client:
            while True:
                try:
                    result = client.sample("flights", "parse", poll_seconds=0.1)
                    break
                except httpx.ConnectError:  # printed before uvicorn bound the port
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        assert result.status == "COMPLETE"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert token not in log.read_text().split("admin token", 1)[1].split("\n", 1)[1]


def test_two_workers_share_one_round_per_refresh_interval(
    tmp_path: Path, fake_driver: FakeDriver, settings_left_to_the_service: FakeDriver
) -> None:
    """``sparkglass serve --workers 2``: two processes answer, the page token works in
    both, and polls spread over both start one round per refresh interval, not one per
    worker (the rule lives in the store)."""
    import os
    import re
    import socket
    import subprocess
    import sys
    import threading
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{tmp_path / 'workers.db'}",
        "SPARKGLASS_PORT": str(port),
        "SPARKGLASS_CONTROL_TOKEN": TOKEN,
        "SPARKGLASS_REFRESH_INTERVAL_SECONDS": "2",
        "SPARKGLASS_POLL_INTERVAL_SECONDS": "0.05",
        "SPARKGLASS_ROUND_GRACE_SECONDS": "0",
    }
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparkglass",
                "serve",
                "--workers",
                "2",
                "--driver",
                f"flights={fake_driver.url}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 90
        # Both workers have started their application when each logged its startup.
        while len(re.findall(r"Application startup complete", log.read_text())) < 2:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        token = re.search(r"#token=(\S+)", text).group(1)  # type: ignore[union-attr]
        assert "2 worker processes" in text
        pids = set(re.findall(r"Started server process \[(\d+)\]", text))
        assert len(pids) == 2, text
        url = f"http://127.0.0.1:{port}/api/v1/namespaces/local/applications/flights"

        def cpu_ticks(pid: str) -> int:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime, clock ticks

        ticks = {pid: cpu_ticks(pid) for pid in pids}
        before = fake_driver.started.get("parse", 0)
        stop = time.monotonic() + 7.0
        answers: list[tuple[int, str | None]] = []

        def poller() -> None:
            # A new connection per poll: the kernel spreads them over both workers.
            while time.monotonic() < stop:
                r = httpx.get(
                    f"{url}/vertices/parse/data-sample",
                    headers={"Authorization": f"Bearer {token}"},
                )
                answers.append((r.status_code, r.json().get("roundId")))
                time.sleep(0.05)

        threads = [threading.Thread(target=poller) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {code for code, _ in answers} == {200}, answers[:5]
        # Both processes answered polls (each spent CPU time on them).
        spent = {pid: cpu_ticks(pid) - ticks[pid] for pid in pids}
        assert all(t > 5 for t in spent.values()), spent
        started = fake_driver.started.get("parse", 0) - before
        # 7 s of polling with a 2 s refresh interval: about 4 rounds (the first at once); one
        # per worker per interval would be about 8.
        assert 2 <= started <= 5, (started, len(answers))
        # Every round id answered is one the driver started (a PENDING answer while another
        # worker holds the claim names none); the round started last may still be pending
        # when the polls end, on a busy machine, so it may not have been seen yet.
        seen = {rid for _, rid in answers if rid is not None}
        assert started - 1 <= len(seen) <= started, (seen, started)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

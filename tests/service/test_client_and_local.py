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

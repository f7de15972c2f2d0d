"""The driver control endpoint running in a child Python process (no Spark: a do-nothing
round transport behind it), so that its memory and thread count are its own and can be read
from ``/proc``; raw-socket HTTP helpers and TLS certificates to attack it with."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TOKEN = "sec-control-token-3b9e1f"

# The endpoint process: settings as JSON in argv[1]; prints {"url", "pid"} once serving;
# exits when its stdin closes (the test's end), so no process outlives a failed test.
SERVER = """
import json, sys
from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling.rounds import RoundCoordinator, TapInfo

class Idle:
    def start_round(self, round_id, tap_key, settings, window_ms): pass
    def round_status(self, round_id): return {"known": False}
    def round_reports(self, round_id): return {}
    def cancel_round(self, round_id): pass
    def forget_round(self, round_id): pass

coordinator = RoundCoordinator(
    Idle(), lambda: SamplingSettings(enabled=True), round_prefix="7", check_interval_s=0.05
)
coordinator.register_tap(TapInfo("parse", "k/parse", "struct<a:int>"))
endpoint = ControlEndpoint(coordinator, ControlSettings(**json.loads(sys.argv[1])))
endpoint.start()
print(json.dumps({"url": endpoint.url, "port": endpoint.port}), flush=True)
sys.stdin.read()
endpoint.stop()
"""


@dataclass
class Endpoint:
    """The endpoint process: ``url``, ``port`` and its ``/proc`` figures."""

    process: subprocess.Popen[str]
    url: str
    port: int

    def status(self, field: str) -> int:
        """A number from ``/proc/<pid>/status`` (``Threads``; ``VmHWM``/``VmRSS`` in kB)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")


@pytest.fixture
def serve() -> Iterator[Callable[..., Endpoint]]:
    started: list[subprocess.Popen[str]] = []

    def start(**settings: Any) -> Endpoint:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps({"token": TOKEN, **settings})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        started.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the endpoint process did not start within 60 s"
        line = proc.stdout.readline()
        assert line, f"the endpoint process exited with {proc.wait()}"
        info = json.loads(line)
        return Endpoint(proc, info["url"], info["port"])

    yield start
    for proc in started:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.02)


def read_response(sock: socket.socket, timeout_s: float = 10) -> tuple[int, dict[str, str], Any]:
    """One HTTP/1.1 response from ``sock``: status, headers (lower-case), JSON body."""
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the response body"
        body += chunk
    return int(lines[0].split()[1]), headers, json.loads(body) if body else None


def request_head(method: str, path: str, headers: dict[str, str], *extra: tuple[str, str]) -> bytes:
    """A request's head; ``extra`` headers may repeat a name."""
    pairs = [("Host", "driver"), *headers.items(), *extra]
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in pairs]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset), without blocking."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("cryptography", reason="the operator's certificates need cryptography")
    from sparkglass.operator.certificates import issue_control_certificate

    folder = tmp_path_factory.mktemp("control-tls")
    issued = issue_control_certificate("app-driver", "team-a")
    other = issue_control_certificate("app-driver", "team-a")  # same names, another key
    files = {}
    pems = {"cert": issued.cert_pem, "key": issued.key_pem, "other_cert": other.cert_pem}
    for name, pem in pems.items():
        path = folder / f"{name}.pem"
        path.write_text(pem)
        path.chmod(0o600)
        files[name] = str(path)
    return {"issued": issued, "other": other, **files}

"""The service as a real process: ``sparkglass serve`` (uvicorn) on 127.0.0.1 in local mode,
in front of the fake driver, with three role tokens; its RSS read from ``/proc``.

A plain helper module (no fixtures), so the ``tests/security/test_service_*.py`` files share
it without a conftest in this folder.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from tests.service.fake_driver import TOKEN as DRIVER_TOKEN

REPO = Path(__file__).resolve().parents[2]
TOKENS = {
    "viewer": "viewer-token-0123456789",
    "sampler": "sampler-token-0123456789",
    "admin": "admin-token-0123456789",
}


def bearer(role: str) -> dict[str, str]:
    """Authorization header of the ``role`` token."""
    return {"Authorization": f"Bearer {TOKENS[role]}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status_kb(pid: int, field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class ServiceProcess:
    """``with ServiceProcess(tmp, driver_url, SPARKGLASS_X="...") as svc:`` a running service
    (``svc.url``, ``svc.pid``); the fake driver is registered as application ``flights``."""

    def __init__(self, tmp: Path, driver_url: str | None, **settings: str) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        tokens = tmp / "tokens.csv"
        tokens.write_text("".join(f"{t},{r}-user,{r}\n" for r, t in TOKENS.items()))
        self.log = tmp / "service.log"
        self._argv = [sys.executable, "-m", "sparkglass", "serve", "--tokens-file", str(tokens)]
        if driver_url:
            self._argv += ["--driver", f"flights={driver_url}"]
        src = str(REPO / "src")
        self._env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
            "SPARKGLASS_DATABASE_URL": f"sqlite:///{tmp / 'service.db'}",
            "SPARKGLASS_PORT": str(self.port),
            "SPARKGLASS_CONTROL_TOKEN": DRIVER_TOKEN,
            **settings,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_kb(self) -> int:
        """Resident set size of the service process now, kB."""
        return proc_status_kb(self.pid, "VmRSS")

    def __enter__(self) -> ServiceProcess:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self._argv, env=self._env, stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp
            )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"service did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

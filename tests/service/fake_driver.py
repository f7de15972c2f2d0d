"""The service tests' driver and an ASGI server runner.

The driver is :class:`tests.support.scripted_driver.FakeDriver` (the real control endpoint
over scripted executors); its names are kept here for the tests that import them from here.
:class:`ServerThread` runs an ASGI app (a service) with uvicorn, or serves such a driver.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from tests.support.scripted_driver import (
    MANY_PER_SUBTASK,
    MANY_SUBTASKS,
    NESTED_RECORDS,
    PIPELINE,
    TOKEN,
    FakeDriver,
    ScriptedControl,
    records,
)

__all__ = [
    "MANY_PER_SUBTASK",
    "MANY_SUBTASKS",
    "NESTED_RECORDS",
    "PIPELINE",
    "TOKEN",
    "FakeDriver",
    "ServerThread",
    "records",
]


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a daemon thread, or serves a
    scripted driver (its own real endpoint); over HTTPS when given a certificate and key file
    (``ssl_certfile``, ``ssl_keyfile``)."""

    def __init__(
        self, app: Any, *, ssl_certfile: str | None = None, ssl_keyfile: str | None = None
    ) -> None:
        self.driver = app if isinstance(app, ScriptedControl) else None
        self.tls = (ssl_certfile, ssl_keyfile)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
        )
        self.scheme = "https" if ssl_certfile else "http"
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        if self.driver is not None:
            self.driver.start(tls_cert_file=self.tls[0], tls_key_file=self.tls[1])
            self.port = self.driver.port
            return self
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.driver is not None:
            self.driver.stop()
            return
        self.server.should_exit = True
        self.thread.join(timeout=10)

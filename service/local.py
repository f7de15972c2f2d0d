"""Running the service in-process in local mode (what ``sparkglass demo`` uses).

Example::

    from sparkglass.runtime.sampling import registry
    from sparkglass.service.local import start_local_service

    endpoint = registry.endpoint_for(spark)           # the driver control endpoint
    service = start_local_service({"flights": (endpoint.url, endpoint.token)})
    print(service.page_url, service.token)       # open the page; the token is in its fragment
    ...
    service.stop()
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI

from .app import create_app
from .auth.local import LocalAuthenticator
from .catalog import register_local_application
from .driver_trust import driver_tls
from .settings import LOCAL_NAMESPACE, Settings

log = logging.getLogger(__name__)


@dataclass
class LocalService:
    """A service running on a uvicorn thread. ``token`` has the ``admin`` role (it may read,
    trigger and register) and lives only as long as this process."""

    app: FastAPI
    url: str
    token: str
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def page_url(self) -> str:
        """The Data Sample page with the token in the URL fragment (never sent to a server)."""
        return f"{self.url}/ui/#token={self.token}"

    def register(
        self, name: str, driver_url: str, driver_token: str, *, driver_ca_pem: str | None = None
    ) -> None:
        """Register (or refresh) a local application: reads its pipeline from the driver.

        ``driver_ca_pem``: the certificate to verify an ``https://`` driver with (pinned for
        registration and rounds). Raises :class:`sparkglass.service.catalog.CatalogError` if
        the driver cannot be read (its certificate failing verification included), and
        ``ValueError`` naming ``driver_ca_pem`` for a certificate that cannot be loaded or
        an ``http://`` URL.
        """
        tls = driver_tls("driver_ca_pem", driver_url, driver_ca_pem)
        state = self.app.state.sparkglass
        register_local_application(state.sessions, name, driver_url, driver_token, tls=tls)
        state.driver_trust.set(LOCAL_NAMESPACE, name, tls)

    def stop(self) -> None:
        """Stop serving (waits up to 10 s)."""
        self._server.should_exit = True
        self._thread.join(timeout=10)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_local_service(
    applications: Mapping[str, tuple[str, str]] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    **settings: Any,
) -> LocalService:
    """Start the service in local mode on a background thread and register
    ``applications`` (``{name: (driver_url, driver_token)}``).

    ``port=0`` picks a free port. ``settings`` override :class:`Settings` fields (e.g.
    ``database_url``, ``refresh_interval_seconds``); unset ones come from ``SPARKGLASS_*``
    environment variables and the defaults (SQLite under the user data directory). Raises
    ``RuntimeError`` when the server does not start within 20 s, and
    :class:`~sparkglass.service.catalog.CatalogError` when a driver cannot be read.
    """
    port = port or _free_port(host)
    app = create_app(Settings(host=host, port=port, **settings))
    token = token or secrets.token_urlsafe(24)
    authenticator = app.state.sparkglass.authenticator
    if isinstance(authenticator, LocalAuthenticator):
        authenticator.add_ephemeral_token(token, "local-admin", "admin")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="sparkglass-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the sparkglass service did not start on {host}:{port}")
        time.sleep(0.02)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    service = LocalService(app, f"http://{shown}:{port}", token, server, thread)
    for name, (driver_url, driver_token) in (applications or {}).items():
        service.register(name, driver_url, driver_token)
    return service

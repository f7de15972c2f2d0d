"""Fixtures of the service tests: a store per backend (SQLite file, PostgreSQL database per
test), the scripted driver on loopback, and a service factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from tests.support.store_fixtures import BACKENDS

from .fake_driver import TOKEN, FakeDriver, ServerThread

#: The store key of the test services (driver tokens are stored encrypted with it).
STORE_KEY = Fernet.generate_key().decode()
TOKENS = {
    "viewer": "viewer-token-0123456789",
    "sampler": "sampler-token-0123456789",
    "admin": "admin-token-0123456789",
}


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """Every service test runs on each backend (``store_url``: tests.support.store_fixtures)."""
    return str(request.param)


@pytest.fixture
def db_url(store_url: str) -> str:
    """A fresh empty store: a SQLite file, or a new PostgreSQL database dropped afterwards."""
    return store_url


@pytest.fixture(scope="session")
def fake_driver() -> Iterator[FakeDriver]:
    """The scriptable driver control endpoint, one server for the whole session."""
    driver = FakeDriver()
    with ServerThread(driver.app()) as server:
        driver.url = server.url
        yield driver


@pytest.fixture
def settings_left_to_the_service(
    fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> FakeDriver:
    """The driver answers ``GET /api/v1/settings`` with only ``enabled`` and
    ``maxSampleRate``, so that the service's own refresh interval and round timeout apply.
    No real driver does so (it states every setting, and those rule); the service falls back
    to its own settings when a driver's cannot be read."""
    monkeypatch.setattr(fake_driver, "states_every_setting", False)
    return fake_driver


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.csv"
    path.write_text(
        "# token,user,role\n" + "".join(f"{t},{r}-user,{r}\n" for r, t in TOKENS.items())
    )
    return path


def auth(role: str) -> dict[str, str]:
    """Authorization header of the test token with ``role``."""
    return {"Authorization": f"Bearer {TOKENS[role]}"}


ServiceFactory = Callable[..., TestClient]


@pytest.fixture
def make_service(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> Iterator[ServiceFactory]:
    """Build a running service (lifespan entered) on the test store with the fake driver
    registered as application ``flights``. Keyword arguments override settings."""
    clients: list[TestClient] = []

    def factory(register: bool = True, **overrides: Any) -> TestClient:
        values: dict[str, Any] = {
            "database_url": db_url,
            "tokens_file": tokens_file,
            # Driver tokens are stored encrypted; PostgreSQL has no generated key.
            "store_key": STORE_KEY,
            "refresh_interval_seconds": 60.0,
            "round_timeout_seconds": 60.0,  # generous: tests that time out set their own
            "round_grace_seconds": 0.0,
            "poll_interval_seconds": 0.05,
            "audit_flush_seconds": 0.2,
        }
        values.update(overrides)
        app = create_app(Settings(**values))
        if register:
            register_local_application(
                app.state.sparkglass.sessions, "flights", fake_driver.url, TOKEN
            )
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield factory
    for c in clients:
        c.app.state.sparkglass.coordinator.wait_idle(10)  # type: ignore[attr-defined]
        c.__exit__(None, None, None)
        c.app.state.sparkglass.sessions.kw["bind"].dispose()  # type: ignore[attr-defined]

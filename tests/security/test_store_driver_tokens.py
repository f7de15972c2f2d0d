"""Driver control tokens at rest.

The attack: in local execution mode the store kept every registered driver's bearer token in
plaintext (``applications.driver_token``). Whoever read the database file, a copy or a
backup of it, could start rounds on every driver. Now the column holds Fernet ciphertext
(``SPARKGLASS_STORE_KEY``, or a key generated once next to a SQLite file, mode 0600), and a
PostgreSQL store without a key refuses to store a driver token.

Against the real service over HTTP (uvicorn on 127.0.0.1) with the fake driver over HTTP,
on real SQLite files and a real PostgreSQL database, reading the database file and the table
directly: no plaintext token on disk or in the column, the generated key file is 0600, an
older version's plaintext is encrypted at start, keys rotate, and nothing logs the token.
"""

from __future__ import annotations

import logging
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import create_engine, text

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from sparkglass.service.state import ServiceState
from tests.service.fake_driver import TOKEN as DRIVER_TOKEN
from tests.service.fake_driver import FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(180)

ADMIN = "store-admin-token-0123456789"
PUT = "/api/v1/namespaces/local/applications/flights"
SAMPLE = PUT + "/vertices/parse/data-sample"


@pytest.fixture
def driver() -> Iterator[FakeDriver]:
    fake = FakeDriver()
    with ServerThread(fake.app()) as server:
        fake.url = server.url
        yield fake


@contextmanager
def service(
    tmp_path: Path, database_url: str, **settings: Any
) -> Iterator[tuple[httpx.Client, ServiceState]]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f"{ADMIN},root,admin\n")
    app = create_app(
        Settings(
            database_url=database_url,
            tokens_file=tokens,
            poll_interval_seconds=0.05,
            round_timeout_seconds=30,
            round_grace_seconds=0,
            **settings,
        )
    )
    state: ServiceState = app.state.sparkglass
    with (
        ServerThread(app) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        ) as http,
    ):
        yield http, state
    assert state.coordinator.wait_idle(10)
    state.sessions.kw["bind"].dispose()


def register(http: httpx.Client, driver: FakeDriver) -> httpx.Response:
    return http.put(PUT, json={"driverUrl": driver.url, "driverToken": DRIVER_TOKEN})


def sample_completes(http: httpx.Client) -> None:
    """A round runs on the driver: the service could decrypt the token (the driver says 401
    to any other)."""
    deadline = time.monotonic() + 60
    while True:
        r = http.get(SAMPLE)
        assert r.status_code == 200, r.text
        if r.json()["status"] != "PENDING":
            assert r.json()["status"] == "COMPLETE", r.json()
            return
        assert time.monotonic() < deadline
        time.sleep(0.05)


def stored_tokens(database_url: str) -> list[str]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return [
                row[0]
                for row in conn.execute(text("SELECT driver_token FROM applications"))
                if row[0] is not None
            ]
    finally:
        engine.dispose()


def raw_bytes(db: Path) -> bytes:
    """The SQLite file and its WAL, as on disk."""
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def test_sqlite_file_holds_no_plaintext_token_and_its_key_file_is_0600(
    tmp_path: Path, driver: FakeDriver, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "store" / "service.db"
    url = f"sqlite:///{db}"
    caplog.set_level(logging.DEBUG)
    with service(tmp_path, url) as (http, _):
        assert register(http, driver).status_code == 200
        sample_completes(http)
    # The database file (and its WAL) never held the token; the column holds ciphertext.
    assert DRIVER_TOKEN.encode() not in raw_bytes(db)
    [stored] = stored_tokens(url)
    assert stored.startswith("fernet:") and DRIVER_TOKEN not in stored
    # The generated key sits next to the file, owner-only, and opens the column.
    key_file = db.with_name("service.db.key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert Fernet(key.encode()).decrypt(stored[len("fernet:") :].encode()).decode() == DRIVER_TOKEN
    # Nothing logged the token or the key.
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert DRIVER_TOKEN not in logged and key not in logged
    # A restart reuses the key: the stored token still works.
    with service(tmp_path, url) as (http, _):
        sample_completes(http)
    assert key_file.read_text().strip() == key


def test_plaintext_tokens_of_an_older_version_are_encrypted_at_start_and_keys_rotate(
    tmp_path: Path, driver: FakeDriver
) -> None:
    db = tmp_path / "service.db"
    url = f"sqlite:///{db}"
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    with service(tmp_path, url, store_key=old_key) as (http, _):
        assert register(http, driver).status_code == 200
    # What an older version left: the token in plaintext.
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE applications SET driver_token = :t"), {"t": DRIVER_TOKEN})
    engine.dispose()
    assert stored_tokens(url) == [DRIVER_TOKEN]
    with service(tmp_path, url, store_key=old_key) as (http, _):
        [stored] = stored_tokens(url)
        assert stored.startswith("fernet:")
        Fernet(old_key.encode()).decrypt(stored[len("fernet:") :].encode())
        sample_completes(http)
    # Rotation: the new key first, the old one second; the token is re-encrypted.
    with service(tmp_path, url, store_key=f"{new_key},{old_key}") as (http, _):
        [stored] = stored_tokens(url)
        assert Fernet(new_key.encode()).decrypt(stored[len("fernet:") :].encode()) == (
            DRIVER_TOKEN.encode()
        )
        sample_completes(http)
    # The new key alone now opens it.
    with service(tmp_path, url, store_key=new_key) as (http, _):
        sample_completes(http)


def test_postgresql_without_a_key_refuses_driver_tokens_and_with_one_stores_ciphertext(
    tmp_path: Path,
    driver: FakeDriver,
    postgres_database: Callable[[str], AbstractContextManager[str]],
) -> None:
    with postgres_database("sg_sec") as url:
        with service(tmp_path, url) as (http, _):
            r = register(http, driver)
            assert r.status_code == 409
            assert "SPARKGLASS_STORE_KEY" in r.json()["detail"]
            assert DRIVER_TOKEN not in r.text
        assert stored_tokens(url) == []
        key = Fernet.generate_key().decode()
        with service(tmp_path, url, store_key=key) as (http, _):
            assert register(http, driver).status_code == 200
            sample_completes(http)
        [stored] = stored_tokens(url)
        assert stored.startswith("fernet:") and DRIVER_TOKEN not in stored


def test_a_malformed_key_is_refused_naming_the_setting_without_echoing_it() -> None:
    bad = "not-a-fernet-key-but-a-secret"
    with pytest.raises(ValueError) as caught:
        Settings(store_key=bad)
    assert "SPARKGLASS_STORE_KEY" in str(caught.value)
    assert bad not in str(caught.value)

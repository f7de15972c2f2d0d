"""``sparkglass demo`` keeps its own store: by default ``demo.db`` under
the user's data directory, never the ``service.db`` other work uses nor the store named by
``SPARKGLASS_DATABASE_URL``; a second demo running at once gets one in its work dir;
``--database-url`` names another; ``--help`` says where it is. The demo's service runs
here on the fake driver (no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkglass.cli.demo import _start_service, demo_store
from sparkglass.service.store import get_application, open_store

from .fake_driver import TOKEN, FakeDriver


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's data directory (platformdirs reads XDG_DATA_HOME) and a store of other
    work named by SPARKGLASS_DATABASE_URL, both under ``tmp_path``."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("SPARKGLASS_DATABASE_URL", f"sqlite:///{tmp_path / 'other-work.db'}")
    return home


def test_the_demo_s_service_keeps_its_own_store(
    data_home: Path, tmp_path: Path, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = demo_store(None, tmp_path / "work")
    try:
        demo_db = data_home / "sparkglass" / "demo.db"
        assert store.url == f"sqlite:///{demo_db}" and store.shown == str(demo_db)
        endpoint = SimpleNamespace(url=fake_driver.url, token=TOKEN)
        monkeypatch.setattr(
            "sparkglass.runtime.sampling.registry.endpoint_for", lambda spark: endpoint
        )
        service = _start_service(None, 0, store.url)  # type: ignore[arg-type]
        assert service is not None
        service.stop()
    finally:
        store.close()
    assert demo_db.exists()
    assert not (data_home / "sparkglass" / "service.db").exists()  # `sparkglass serve`'s
    assert not (tmp_path / "other-work.db").exists()
    sessions = open_store(store.url)
    try:
        with sessions() as session:
            assert get_application(session, "local", "flights") is not None
    finally:
        sessions.kw["bind"].dispose()


def test_a_second_demo_at_once_keeps_its_store_in_its_work_dir(
    data_home: Path, tmp_path: Path
) -> None:
    first = demo_store(None, tmp_path / "one")
    second = demo_store(None, tmp_path / "two")
    try:
        assert first.url == f"sqlite:///{data_home / 'sparkglass' / 'demo.db'}"
        assert second.url == f"sqlite:///{tmp_path / 'two' / 'service.db'}"
        assert "another demo uses" in second.shown
    finally:
        second.close()
        first.close()
    third = demo_store(None, tmp_path / "three")  # the first one ended: the default again
    third.close()
    assert third.url == first.url


def test_database_url_names_the_demo_s_store(data_home: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mine.db'}"
    store = demo_store(url, tmp_path / "work")
    assert store.url == url and store.lock is None
    assert not (data_home / "sparkglass").exists()  # nothing made for the default


def test_demo_help_says_where_the_store_is(data_home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sparkglass", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert str(data_home / "sparkglass" / "demo.db") in text
    assert "--database-url" in text and "sparkglass serve" in text

"""A SQLite URI filename as the store's URL is refused, before any file is made.

With ``?uri=true`` on a plain path, SQLite took the query as part of the file name: the store
prepared ``~/u.db`` (mode 0600, WAL, its key file) while the engine opened a new
``~/u.db?mode=rwc`` at the umask's mode (0644: records, tokens and the audit trail readable
by other users). A ``file:`` URI got no mode, no lock and a key of its process only (driver
tokens unreadable after a restart). A URL SQLAlchemy cannot parse is refused without being
echoed (it may hold a password)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkglass.service.settings import Settings
from sparkglass.service.store.db import make_engine


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///~/u.db?uri=true&mode=rwc",
        "sqlite:///~/u.db?uri=1",
        "sqlite:///file:u.db?mode=rwc&uri=true",
        "sqlite:///file:u.db",
    ],
)
def test_a_sqlite_uri_filename_is_refused_before_any_file_is_made(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match="database_url: SQLite URI filenames"):
        Settings(database_url=url)
    with pytest.raises(ValueError, match="give the file's path"):
        make_engine(url)
    assert list(tmp_path.iterdir()) == []


def test_a_url_that_does_not_parse_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url="postgresql//alice:s3cret-pw@db/sparkglass")
    assert "database_url: not a SQLAlchemy URL" in str(refused.value)
    assert "s3cret-pw" not in str(refused.value)


def test_plain_paths_and_postgresql_urls_pass() -> None:
    for url in (
        "sqlite:////var/lib/sparkglass/service.db",
        "sqlite:///~/service.db",
        "sqlite:///:memory:",
        "postgresql+psycopg://alice@db/sparkglass",
    ):
        assert Settings(database_url=url).database_url == url

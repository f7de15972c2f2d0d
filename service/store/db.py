"""Engine creation and migrations: SQLite by default, PostgreSQL by URL.

:func:`open_store` is what the service (and the operator) call: it creates the engine,
applies the Alembic migrations shipped in ``migrations/`` and returns a session factory.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

#: Modes of a SQLite store the service creates: it holds sampled records (possibly personal
#: data), driver tokens and the audit trail, so only its owner may read it.
SQLITE_FILE_MODE = 0o600
SQLITE_DIR_MODE = 0o700


def prepare_sqlite_file(url: str) -> Path | None:
    """Create the SQLite file of ``url`` (and missing parent directories) owner-only.

    New directories get mode 0700 and a new file 0600 (SQLite gives its ``-wal`` and
    ``-shm`` files the mode of the database file). An existing file readable or writable by
    group or others is narrowed to 0600, with a warning. Returns the file's path, or
    ``None`` for a URL that is not a SQLite file (in-memory, another database).
    Raises ``OSError`` when the file or a directory cannot be created.
    """
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or parsed.query.get("mode") == "memory":
        return None  # URI filenames are the caller's business
    path = Path(database).expanduser()
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=SQLITE_DIR_MODE)
    # O_EXCL: create with the narrow mode from the start, never a window at the umask's.
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SQLITE_FILE_MODE))
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning(
                "store file %s had mode %o (group/others may access it); setting %o",
                path,
                mode,
                SQLITE_FILE_MODE,
            )
            path.chmod(mode & 0o700 or SQLITE_FILE_MODE)
    return path


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with per-dialect settings.

    SQLite: WAL journal (readers do not block the single writer), a 30 s busy timeout
    (concurrent writers wait instead of failing with "database is locked") and foreign keys
    on; the file is created owner-only (:func:`prepare_sqlite_file`). PostgreSQL: a pool
    sized for the request threads.
    """
    if url.startswith("sqlite"):
        prepare_sqlite_file(url)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 30)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def migrate(engine: Engine, revision: str = "head") -> None:
    """Apply the packaged Alembic migrations up to ``revision`` (idempotent)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def open_store(url: str, *, apply_migrations: bool = True) -> sessionmaker[Session]:
    """Engine + migrations + session factory for the store at ``url``.

    Example (the operator saving a round)::

        from sparkglass.service.store import open_store, save_round
        sessions = open_store(os.environ["SPARKGLASS_DATABASE_URL"])
        with sessions.begin() as session:
            save_round(session, namespace="team-a", application="flights",
                       vertex="parse", result=result)
    """
    engine = make_engine(url)
    if apply_migrations:
        migrate(engine)
    return sessionmaker(engine, expire_on_commit=False)

"""Engine creation and migrations: SQLite by default, PostgreSQL by URL.

:func:`open_store` is what the service (and the operator) call: it creates the engine,
applies the Alembic migrations shipped in ``migrations/`` and returns a session factory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with per-dialect settings.

    SQLite: WAL journal (readers do not block the single writer), a 30 s busy timeout
    (concurrent writers wait instead of failing with "database is locked") and foreign keys
    on. PostgreSQL: a pool sized for the request threads.
    """
    if url.startswith("sqlite"):
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

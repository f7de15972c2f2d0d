"""A migration that fails half way leaves nothing behind, so the next start migrates.

Python's sqlite3 driver commits before each DDL statement by itself: without the store's own
transaction, an interrupted first migration left ``applications`` without an Alembic revision
and every later start failed with "table applications already exists" (seen on a busy CI
machine in the operator's store start-up).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, inspect

from sparkglass.service.store import db


class Interrupted(RuntimeError):
    pass


@pytest.fixture
def interrupt_at_rounds() -> Iterator[Callable[[], None]]:
    """Fail any migration when it creates the ``rounds`` table (after ``applications``);
    yields the function that stops doing so."""

    def fail(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE ROUNDS"):
            raise Interrupted("interrupted half way through the migration")

    def stop() -> None:
        if event.contains(Engine, "before_cursor_execute", fail):
            event.remove(Engine, "before_cursor_execute", fail)

    event.listen(Engine, "before_cursor_execute", fail)
    try:
        yield stop
    finally:
        stop()


def tables(url: str) -> set[str]:
    engine = db.make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_an_interrupted_migration_leaves_no_table_and_the_next_start_migrates(
    db_url: str, interrupt_at_rounds: Callable[[], None]
) -> None:
    engine = db.make_engine(db_url)
    try:
        with pytest.raises(Exception, match="interrupted half way"):
            db.migrate(engine)
    finally:
        engine.dispose()
    assert tables(db_url) == set(), "the failed migration left tables behind"

    interrupt_at_rounds()
    sessions = db.open_store(db_url)
    try:
        assert {"applications", "rounds", "alembic_version"} <= tables(db_url)
    finally:
        sessions.kw["bind"].dispose()


def test_a_store_at_head_opens_while_another_connection_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    """A restart next to a running service's long write transaction does not wait for it:
    a store already at head is not locked for migration at all."""
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path / 'store.db'}"
    db.open_store(url).kw["bind"].dispose()  # migrated once
    writer = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
        began = time.monotonic()
        sessions = db.open_store(url)
        waited = time.monotonic() - began
        sessions.kw["bind"].dispose()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    # Without the check, migrate() waited for the writer's lock (busy timeout: 30 s).
    assert waited < 20, waited

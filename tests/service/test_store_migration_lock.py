"""Migrations run once when several processes open one fresh store at the same moment.

Two ``sparkglass serve`` processes start together on one fresh PostgreSQL database (the
README's ``service.replicas=2``); processes released by one barrier race each other on a fresh
database, PostgreSQL and SQLite; and a held migration lock makes a migrating process wait.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from sparkglass.service.store import db
from tests.security.service_process import ServiceProcess

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]


def head_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(db.MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def versions(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [r[0] for r in conn.execute(text("SELECT version_num FROM alembic_version"))]
    finally:
        engine.dispose()


def test_two_service_processes_start_together_on_one_fresh_postgresql_database(
    tmp_path: Path, postgres_database: Callable[[str], AbstractContextManager[str]]
) -> None:
    with postgres_database("sg_migrate") as url, ExitStack() as stack:
        services = []
        for i in range(2):
            (tmp_path / str(i)).mkdir()
            services.append(ServiceProcess(tmp_path / str(i), None, SPARKGLASS_DATABASE_URL=url))
        # Started together (one thread each), then waited for: both migrate on start.
        errors: list[BaseException] = []

        def start(svc: ServiceProcess) -> None:
            try:
                stack.enter_context(svc)
            except BaseException as exc:  # reported below, with the service's log
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(s,)) for s in services]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        for svc in services:
            assert httpx.get(f"{svc.url}/healthz", timeout=10).status_code == 200
            assert "already exists" not in svc.log.read_text()
        assert versions(url) == [head_revision()]


#: A process that imports the store, says it is ready, waits for the go file, then opens the
#: store (argv: url, ready file, go file). The import comes first so that the processes reach
#: the migration within milliseconds of each other.
_OPENER = """
import sys, time
from pathlib import Path
from sparkglass.service.store import open_store
url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
deadline = time.monotonic() + 120
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("never released")
    time.sleep(0.001)
open_store(url)
"""


def race(url: str, tmp: Path, processes: int = 4) -> list[int]:
    """``processes`` processes open the store at ``url``, released together; exit codes."""
    go = tmp / "go"
    ready = [tmp / f"ready-{i}" for i in range(processes)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, url, str(r), str(go)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for r in ready
    ]
    try:
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready):
            assert time.monotonic() < deadline, "the processes never got ready"
            assert all(p.poll() is None for p in procs), [
                p.stderr.read() for p in procs if p.stderr
            ]
            time.sleep(0.02)
        go.touch()
        codes = [p.wait(timeout=120) for p in procs]
        errors = [p.stderr.read().decode()[-2000:] for p in procs if p.stderr]
        assert codes == [0] * processes, errors
        return codes
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_processes_released_together_migrate_once_postgresql(
    tmp_path: Path,
    postgres_database: Callable[[str], AbstractContextManager[str]],
) -> None:
    with postgres_database("sg_migrate") as url:
        assert race(url, tmp_path) == [0, 0, 0, 0]
        assert versions(url) == [head_revision()]


def test_processes_released_together_migrate_once_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert race(url, tmp_path) == [0, 0, 0, 0]
    assert versions(url) == [head_revision()]
    assert (tmp_path / "store.db.migrate.lock").stat().st_mode & 0o077 == 0


def test_a_process_switching_a_fresh_sqlite_file_to_wal_makes_the_others_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Switching a file to WAL takes an exclusive lock, and SQLite answers "database is
    locked" at once, without its busy timeout, to a second connection switching then (under
    load, three of four processes released together failed so). The test stands in for the
    process that switches first: it holds the migration lock and a write lock on the fresh
    file, in SQLite's rollback journal as before the switch. Another engine (a thread here,
    with its own lock file descriptor as a process has) must wait for the lock, not fail,
    then find the file in WAL."""
    import fcntl
    import sqlite3

    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    db.prepare_sqlite_file(url)
    lock = os.open(tmp_path / "store.db.migrate.lock", os.O_RDWR | os.O_CREAT, 0o600)
    first = sqlite3.connect(path, timeout=30, isolation_level=None)
    results: list[Any] = []
    done = threading.Event()

    def second_process() -> None:
        try:
            engine = db.make_engine(url)
            with engine.connect() as conn:
                results.append(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
            engine.dispose()
        except BaseException as exc:
            results.append(exc)
        finally:
            done.set()

    caplog.set_level(logging.WARNING, logger=db.__name__)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        first.execute("BEGIN IMMEDIATE")  # mid-switch: the file is locked for writing
        first.execute("CREATE TABLE t (x INTEGER)")
        worker = threading.Thread(target=second_process)
        worker.start()
        # The second must be seen waiting for the lock (its warning) before it finishes:
        # a second that ran into the write lock instead has finished, with an error.
        deadline = time.monotonic() + 60
        while "waiting for migration lock" not in caplog.text:
            assert not done.is_set(), results
            assert time.monotonic() < deadline, "the second never waited for the lock"
            time.sleep(0.02)
        assert not done.is_set(), results
        first.execute("COMMIT")
        assert first.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        fcntl.flock(lock, fcntl.LOCK_UN)
        assert done.wait(timeout=60), "the second never went on after the lock was freed"
        worker.join(timeout=10)
    finally:
        first.close()
        os.close(lock)
    assert results == ["wal"]


def test_a_held_migration_lock_makes_the_migration_wait(
    postgres_database: Callable[[str], AbstractContextManager[str]],
) -> None:
    with postgres_database("sg_migrate") as url:
        holder = create_engine(url)
        done = threading.Event()
        failures: list[BaseException] = []

        def migrate() -> None:
            try:
                db.open_store(url)
            except BaseException as exc:
                failures.append(exc)
            finally:
                done.set()

        try:
            with holder.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": db.MIGRATION_LOCK_KEY})
                worker = threading.Thread(target=migrate)
                worker.start()
                # While the lock is held the migration may not finish (a bounded look).
                assert not done.wait(timeout=1.5)
                assert not versions_or_none(url)
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": db.MIGRATION_LOCK_KEY})
                conn.commit()
            assert done.wait(timeout=60), "the migration never finished after the lock was freed"
            worker.join(timeout=10)
        finally:
            holder.dispose()
        assert not failures, failures
        assert versions(url) == [head_revision()]


def versions_or_none(url: str) -> list[str] | None:
    """The applied revisions, or None while ``alembic_version`` does not exist yet."""
    try:
        return versions(url)
    except Exception:
        return None

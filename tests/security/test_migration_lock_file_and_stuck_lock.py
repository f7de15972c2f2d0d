"""Attacks on the migration lock (service/store/db.py).

a. **A planted symbolic link.** The SQLite store's lock file ``<db>.migrate.lock`` sits next
   to the database, in whatever directory the URL names (``/tmp`` is common for a local
   service). A local user who plants ``<db>.migrate.lock`` as a symbolic link made the
   service create (and lock) the link's target, a file of that user's choosing, with the
   service's rights. Now the lock file is opened without following links and the start
   fails naming the lock; the target is not created.
b. **A lock file of another user.** One created by another user (mode 0666) let that user
   hold the ``flock`` for ever. Now it is refused (checked when the tests run as root, which
   can make a file of another uid).
c. **A stuck holder.** A process holding the lock (a hung migration, or a squatter) made every
   start wait without end and without a word. Now a start waits at most
   ``MIGRATION_LOCK_TIMEOUT_SECONDS`` and fails naming the lock; the same for the PostgreSQL
   advisory lock, which any role that may connect can take.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from sparkglass.service.store import db

pytestmark = pytest.mark.timeout(120)


def open_store_within(url: str, seconds: float) -> Any:
    """``open_store(url)`` in a thread: what it returned or raised, or a failure when it
    still runs after ``seconds`` (the attack: it would wait for ever)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = db.open_store(url)
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"open_store({url!r}) still waits after {seconds} s")
    return outcome


def test_a_planted_symlink_lock_file_is_refused_and_its_target_not_created(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    target = tmp_path / "victim" / "created-by-the-service"
    target.parent.mkdir()
    (shared / "store.db.migrate.lock").symlink_to(target)
    outcome = open_store_within(f"sqlite:///{shared / 'store.db'}", 30)
    assert isinstance(outcome.get("error"), db.MigrationLockError), outcome
    assert "symbolic link" in str(outcome["error"])
    assert str(shared / "store.db.migrate.lock") in str(outcome["error"])
    assert not target.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file of another uid needs root")
def test_a_lock_file_of_another_user_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "store.db.migrate.lock"
    lock.touch(mode=0o666)
    os.chmod(lock, 0o666)
    os.chown(lock, 65534, 65534)
    outcome = open_store_within(f"sqlite:///{tmp_path / 'store.db'}", 30)
    assert isinstance(outcome.get("error"), db.MigrationLockError), outcome
    assert "owned by uid" in str(outcome["error"]) and "65534" in str(outcome["error"])


HOLD_FLOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(300)
"""


def test_a_stuck_sqlite_lock_holder_ends_the_wait_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "MIGRATION_LOCK_TIMEOUT_SECONDS", 1.0)
    lock = tmp_path / "store.db.migrate.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FLOCK, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        outcome = open_store_within(f"sqlite:///{tmp_path / 'store.db'}", 30)
        assert isinstance(outcome.get("error"), db.MigrationLockError), outcome
        assert str(lock) in str(outcome["error"]) and "still held" in str(outcome["error"])
        assert time.monotonic() - started < 20
    finally:
        holder.kill()
        holder.wait()
    # Once the holder is gone the store opens (the lock file is ours, mode 0600).
    assert "value" in open_store_within(f"sqlite:///{tmp_path / 'store.db'}", 60)
    assert (lock.stat().st_mode & 0o777) == 0o600


def test_a_stuck_postgresql_advisory_lock_ends_the_wait_with_a_message(
    postgres_database: Callable[[str], AbstractContextManager[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(db, "MIGRATION_LOCK_TIMEOUT_SECONDS", 1.0)
    with postgres_database("sg_lock") as url:
        squatter = create_engine(url)
        with squatter.connect() as conn:
            # Any role that may connect can take the advisory lock and keep it.
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": db.MIGRATION_LOCK_KEY})
            started = time.monotonic()
            outcome = open_store_within(url, 30)
            assert isinstance(outcome.get("error"), db.MigrationLockError), outcome
            assert "advisory lock" in str(outcome["error"])
            assert time.monotonic() - started < 20
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": db.MIGRATION_LOCK_KEY})
        squatter.dispose()
        assert "value" in open_store_within(url, 60)

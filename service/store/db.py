"""Engine creation and migrations: SQLite by default, PostgreSQL by URL.

:func:`open_store` is what the service (and the operator) call: it creates the engine,
applies the Alembic migrations shipped in ``migrations/`` and returns a session factory.

Migrations run once however many processes start together (service replicas, the operator's
first save): on PostgreSQL :func:`migrate` holds a transaction-scoped advisory lock
(``pg_advisory_xact_lock(MIGRATION_LOCK_KEY)``) around the Alembic upgrade, so the others
wait, then find the schema at head and do nothing; on a SQLite file it holds an exclusive
``flock`` on ``<file>.migrate.lock`` (processes on one host: a SQLite file is not shared
between machines). A lock file that is a symbolic link or belongs to another user is refused,
and nobody waits longer than :data:`MIGRATION_LOCK_TIMEOUT_SECONDS` for a holder
(:class:`MigrationLockError` names the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: Key of the PostgreSQL advisory lock held while migrating (any bigint all sparkglass
#: processes agree on; "sgmigrat" in ASCII).
MIGRATION_LOCK_KEY = int.from_bytes(b"sgmigrat", "big") & 0x7FFF_FFFF_FFFF_FFFF

#: Modes of a SQLite store the service creates: it holds sampled records (possibly personal
#: data), driver tokens and the audit trail, so only its owner may read it.
SQLITE_FILE_MODE = 0o600
SQLITE_DIR_MODE = 0o700
#: Longest wait for another process's migration (both the SQLite ``flock`` and the
#: PostgreSQL advisory lock), seconds: a hung holder makes a start fail with a message
#: instead of waiting without end. Migrations of this project take seconds.
MIGRATION_LOCK_TIMEOUT_SECONDS = 600.0


class MigrationLockError(RuntimeError):
    """The migration lock cannot be taken: a lock file that is not ours, or a holder that
    did not finish within :data:`MIGRATION_LOCK_TIMEOUT_SECONDS`."""


def check_store_url(url: str | URL) -> None:
    """Refuse a SQLite URL the store cannot keep safe: a URI filename (``file:...`` or
    ``?uri=true``). The store sets the file's mode (0600), its WAL journal, its migration lock
    and its key file by the file's path; with a URI, SQLite opens a name the store did not
    prepare (``?uri=true`` on a plain path even makes the query part of the file name, a new
    file at the umask's mode). Raises ``ValueError`` saying what to use instead (never the
    URL itself: it may hold a password)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return
    database = parsed.database or ""
    uri = str(parsed.query.get("uri", "")).lower() in ("true", "1", "yes", "on")
    if database.startswith("file:") or uri:
        raise ValueError(
            "database_url: SQLite URI filenames (file:..., uri=true) are not supported; "
            "give the file's path (sqlite:////var/lib/sparkglass/service.db, ~ allowed) or "
            "sqlite:///:memory: for a store of this process only"
        )


def sqlite_file_path(url: str | URL) -> Path | None:
    """The database file of a SQLite file URL (``~`` expanded), or ``None`` for another
    database, an in-memory one, or a ``file:`` URI (which :func:`check_store_url` refuses)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or parsed.query.get("mode") == "memory":
        return None
    return Path(database).expanduser()


def prepare_sqlite_file(url: str) -> Path | None:
    """Create the SQLite file of ``url`` (and missing parent directories) owner-only.

    New directories get mode 0700 and a new file 0600 (SQLite gives its ``-wal`` and
    ``-shm`` files the mode of the database file). An existing file readable or writable by
    group or others is narrowed to 0600, with a warning. Returns the file's path, or
    ``None`` for a URL that is not a SQLite file (in-memory, another database).
    Raises ``OSError`` when the file or a directory cannot be created.
    """
    path = sqlite_file_path(url)
    if path is None:
        return None
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
    on; the file (``~`` expanded, which SQLite itself does not do) is created owner-only
    (:func:`prepare_sqlite_file`) and opened, and a file not yet in WAL is switched under the
    migration lock (:func:`_switch_to_wal`: may wait up to
    :data:`MIGRATION_LOCK_TIMEOUT_SECONDS` for it, then raises :class:`MigrationLockError`).
    PostgreSQL: a pool sized for the request threads. Raises ``ValueError`` for a SQLite
    URI filename (:func:`check_store_url`).
    """
    if url.startswith("sqlite"):
        check_store_url(url)
        path = prepare_sqlite_file(url)
        opened: str | URL = url
        if path is not None:
            _switch_to_wal(path)
            # SQLite does not expand "~": open the file prepared above, not "./~/...".
            opened = make_url(url).set(database=str(path))
        engine = create_engine(
            opened, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
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
    """Apply the packaged Alembic migrations up to ``revision`` (idempotent), one process at a
    time (see the module docstring): a process that finds another migrating waits for it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if revision == "head" and _at_head(engine, config):
        # The usual restart: no lock taken, so a start never waits behind a running
        # service's write transaction (SQLite's BEGIN IMMEDIATE below would).
        return
    with (
        _sqlite_file_lock(engine),
        _migration_engine(engine) as migrating,
        migrating.begin() as connection,
    ):
        _lock_for_migration(connection)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _at_head(engine: Engine, config: Config) -> bool:
    """Whether the store's Alembic revision is already the packaged head (a plain read)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(config).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current is not None and current == head


@contextlib.contextmanager
def _migration_engine(engine: Engine) -> Iterator[Engine]:
    """The engine to migrate with: ``engine`` itself, except on SQLite.

    Python's sqlite3 driver commits before every DDL statement on its own, so on ``engine``
    a migration that fails half way (a lock timeout on a busy machine, a killed process)
    would leave tables behind without the Alembic revision that created them, and every
    later start would fail with "table ... already exists". On SQLite the migration
    therefore runs on a separate engine whose transactions SQLAlchemy opens itself
    (``BEGIN IMMEDIATE``; SQLite's DDL is transactional), so it commits whole or not at all.
    """
    if engine.dialect.name != "sqlite":
        yield engine
        return
    migrating = create_engine(
        engine.url, connect_args={"check_same_thread": False, "timeout": 30}, poolclass=NullPool
    )

    @event.listens_for(migrating, "connect")
    def _driver_autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # no implicit BEGIN/COMMIT from the driver
        dbapi_conn.execute("PRAGMA busy_timeout=30000")

    @event.listens_for(migrating, "begin")
    def _begin_immediate(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now, not half way through

    try:
        yield migrating
    finally:
        migrating.dispose()


def _lock_for_migration(connection: Connection) -> None:
    """On PostgreSQL, wait for the migration lock; it is released when the transaction ends."""
    if connection.dialect.name == "postgresql":
        # lock_timeout bounds the wait for the advisory lock (any role that may connect can
        # take it); SET LOCAL ends with the transaction.
        timeout_ms = int(MIGRATION_LOCK_TIMEOUT_SECONDS * 1000)
        connection.execute(text(f"SET LOCAL lock_timeout = {timeout_ms}"))
        try:
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        except OperationalError as exc:
            code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
            if code != "55P03":  # lock_not_available
                raise
            raise MigrationLockError(
                f"the PostgreSQL migration lock (advisory lock {MIGRATION_LOCK_KEY}) is still "
                f"held by another session after {MIGRATION_LOCK_TIMEOUT_SECONDS:g} s: find it "
                "in pg_locks (locktype 'advisory') and end it"
            ) from None


def _switch_to_wal(path: Path) -> None:
    """Put the SQLite file at ``path`` in WAL mode, once, under the migration lock.

    The switch takes an exclusive lock, and SQLite gives up at once, without its busy
    timeout, when two connections switch at the same moment: of four processes started
    together on a fresh file (uvicorn workers, replicas on one host), three failed with
    "database is locked" on a loaded machine. Under the lock one process switches; the
    others then find WAL, which costs no lock. A file already in WAL is not locked at all.
    Raises :class:`MigrationLockError` as :func:`migrate` does, ``sqlite3.Error`` when the
    file cannot be read or locked within the 30 s busy timeout. A file SQLite keeps in
    another mode (a read-only file) is logged and used as it is."""
    if _journal_mode(path) == "wal":
        return
    with _file_lock(path), contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    if mode != "wal":
        log.warning("store file %s stays in journal mode %s (not WAL)", path, mode)


def _journal_mode(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


@contextlib.contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """An exclusive ``flock`` on ``<database file>.migrate.lock`` (SQLite files only)."""
    database = sqlite_file_path(engine.url)
    if database is None:
        yield
        return
    with _file_lock(database):
        yield


@contextlib.contextmanager
def _file_lock(database: Path) -> Iterator[None]:
    """The exclusive ``flock`` on ``<database>.migrate.lock``."""
    lock_path = database.with_name(database.name + ".migrate.lock")
    fd = _open_lock_file(lock_path)
    try:
        _flock_with_deadline(fd, lock_path, MIGRATION_LOCK_TIMEOUT_SECONDS)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _open_lock_file(path: Path) -> int:
    """Open (create 0600) the migration lock file, refusing one this process does not own.

    The lock file sits next to the database file, in a directory other local users may
    write to (the database may be put in ``/tmp``): a symbolic link planted there would
    make the service create or lock a file of the link's choosing, and a file another user
    created (mode 0666) would let that user hold the lock forever. Raises
    :class:`MigrationLockError` naming the path for a link, a non-regular file or a file
    owned by another user.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, SQLITE_FILE_MODE)
    except OSError as exc:
        if path.is_symlink():
            raise MigrationLockError(
                f"migration lock {path} is a symbolic link; remove it (the lock file must be "
                "a regular file owned by the service's user)"
            ) from None
        raise MigrationLockError(f"cannot open migration lock {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise MigrationLockError(
            f"migration lock {path} is not a regular file owned by uid {os.geteuid()} "
            f"(owner uid {info.st_uid}); remove it"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.fchmod(fd, SQLITE_FILE_MODE)
    return fd


def _flock_with_deadline(fd: int, path: Path, timeout_s: float) -> None:
    """Take the exclusive ``flock`` on ``fd``, waiting at most ``timeout_s`` seconds for the
    process holding it. Raises :class:`MigrationLockError` naming ``path`` after that."""
    deadline = time.monotonic() + timeout_s
    waiting_logged = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if time.monotonic() >= deadline:
            raise MigrationLockError(
                f"migration lock {path} is still held by another process after {timeout_s:g} s "
                "(a migration that hangs, or a stuck process): stop it and start again"
            )
        if not waiting_logged:
            log.warning("waiting for migration lock %s held by another process", path)
            waiting_logged = True
        time.sleep(0.1)


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

"""Fixtures shared by ``tests/`` and ``e2e/`` (pytest loads this root conftest for both)."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

#: The test Kubernetes API server and the store, with their fixtures, for every suite
#: (tests/support).
pytest_plugins = ["tests.support.kube_fixtures", "tests.support.store_fixtures"]

# The tests' JVMs live for seconds to minutes and run small data: C2 compilation and a parallel
# GC cost more CPU than they save there. On 2 cores, C1 only and the serial collector cut a
# local-cluster test from 143 s to 60 s. Every driver (the shared session, spark-submit'ed
# jobs, the demo) reads SPARK_SUBMIT_OPTS; executors of local-cluster jobs get the same
# through the spark.executor.extraJavaOptions system property. Jobs that set their own keep it.
# C1 only also shrinks the default code cache from 240 MB to 48 MB, which the shared session of
# a test process running half the suite (`make test-matrix`, 2 processes) filled: "Out of
# space in CodeCache for adapters" killed its JVM. The cache is reserved, used as needed.
_TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS", f'{_TEST_JVM} -Dspark.executor.extraJavaOptions="{_TEST_JVM}"'
)

#: The PostgreSQL the tests may create databases on (trust auth on this machine).
PG_ADMIN_URL = os.environ.get("SPARKGLASS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def _throwaway_database(prefix: str) -> Iterator[str]:
    # Skips (not fails) without a server: the suites still run on a machine without one.
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            pass
    except Exception as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL} ({exc.__class__.__name__})")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_database() -> Callable[[str], AbstractContextManager[str]]:
    """``with postgres_database("prefix") as url:`` a new PostgreSQL database, dropped after.

    ``url`` is a SQLAlchemy URL (``postgresql+psycopg://…/prefix_<random>``). Skips the test
    when no PostgreSQL answers at ``SPARKGLASS_TEST_PG`` (default the local one).
    """
    return _throwaway_database


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with a ``slow`` test first, then files on Spark, then the rest, each file whole
    and in its own order. ``make test`` hands whole files to 4 processes as they free up, so
    the longest files start first instead of ending the run alone (longest-first packing)."""

    def weight(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if item.get_closest_marker("spark") else 2

    by_file: dict[object, int] = {}
    for item in items:
        by_file[item.path] = min(by_file.get(item.path, 2), weight(item))
    items.sort(key=lambda item: by_file[item.path])  # stable: a file's tests stay together


def _pytests_own(handler: logging.Handler) -> bool:
    # pytest attaches and removes its capture handlers around each phase itself.
    return type(handler).__module__.startswith("_pytest")


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """Undo what a test did to the root logger: ``sparkglass operator run`` configures logging
    in-process on the stderr of the moment, which is a CliRunner's and closed after it. Left so,
    every later record in that test process goes to a closed stream; Py4J's error path then
    logs again from inside the failing write, for ever, holding the handler's lock (a suite
    under load hung on it in Spark's listener thread)."""
    root = logging.getLogger()
    handlers, level = [h for h in root.handlers if not _pytests_own(h)], root.level
    yield
    for handler in root.handlers[:]:
        if not _pytests_own(handler) and handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)

"""The store of the service (and of the operator's result service), for every suite.

``store_url``: a fresh empty store on the backend ``store_backend`` names: a SQLite file
(the default), or a new PostgreSQL database on the local server (the root conftest's
``postgres_database``: skipped when none answers), dropped afterwards. A folder's conftest
or a test module overrides ``store_backend`` to run on others (``params=BACKENDS``: once on
each); a test picks its own with ``@pytest.mark.parametrize("store_backend", [...])``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS[:1])
def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend of ``store_url``."""
    return str(request.param)


@pytest.fixture
def store_url(
    store_backend: str,
    tmp_path: Path,
    postgres_database: Callable[[str], AbstractContextManager[str]],
) -> Iterator[str]:
    """A fresh empty store: a SQLite file, or a new PostgreSQL database dropped afterwards."""
    if store_backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    assert store_backend == "postgresql", f"unknown store backend {store_backend!r}"
    with postgres_database("sg_test") as url:
        yield url

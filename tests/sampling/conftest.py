"""Fixtures of the sampling tests.

``sampling_conf`` sets sampling confs in the shared session and restores them after
(``FakeTransport``, the scripted RoundTransport, is in ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def sampling_conf(spark: Any) -> Iterator[Callable[..., None]]:
    """Call with ``name=value`` (``max_sample_rate=5``) to set ``spark.sparkglass.sampling.*``
    (``control_enabled=True`` sets ``spark.sparkglass.control.enabled``); restored after."""
    saved: dict[str, str | None] = {}

    def key_of(name: str) -> str:
        if name.startswith("control_"):
            return "spark.sparkglass.control." + name[len("control_") :].replace("_", "-")
        return "spark.sparkglass.sampling." + name.replace("_", "-")

    def set_conf(**values: Any) -> None:
        for name, value in values.items():
            key = key_of(name)
            saved.setdefault(key, spark.conf.get(key, None))
            spark.conf.set(key, str(value).lower() if isinstance(value, bool) else str(value))

    yield set_conf
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)

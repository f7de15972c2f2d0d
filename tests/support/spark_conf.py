"""Spark settings for the length of a test or fixture, on the shared SparkSession.

Tests share one session per process (conftest.py), so a setting a test needs must not leak
into the next one: :func:`spark_conf` sets them and puts back what was there (or unsets).
:func:`set_spark_conf` is the same as a fixture, for tests that set confs as they go."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

#: What :func:`set_spark_conf` gives a test: call it with ``{key: value}``.
SetSparkConf = Callable[[Mapping[str, str | None]], None]


def _apply(spark: Any, settings: Mapping[str, str | None]) -> None:
    for key, value in settings.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


@contextmanager
def spark_conf(spark: Any, settings: Mapping[str, str | None]) -> Iterator[None]:
    """Set ``settings`` on ``spark.conf`` (runtime SQL confs; a value ``None`` unsets the
    key meanwhile); on exit restore each key's previous value, or unset it when it had none."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    # Set inside the try: a value Spark refuses halfway must not leave the keys before it set.
    try:
        _apply(spark, settings)
        yield
    finally:
        _apply(spark, saved)


@pytest.fixture
def set_spark_conf(spark: Any) -> Iterator[SetSparkConf]:
    """``set_spark_conf({key: value})``, as often as the test likes; all restored at its
    teardown. Each call is a :func:`spark_conf` block, left latest first, so a key set twice
    gets back the value it had before the first call."""
    with ExitStack() as stack:

        def set_conf(settings: Mapping[str, str | None]) -> None:
            stack.enter_context(spark_conf(spark, settings))

        yield set_conf

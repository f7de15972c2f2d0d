"""Spark settings for the length of a test or fixture, on the shared SparkSession.

Tests share one session per process (conftest.py), so a setting a test needs must not leak
into the next one: :func:`spark_conf` sets them and puts back what was there (or unsets)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


@contextmanager
def spark_conf(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Set ``settings`` on ``spark.conf`` (runtime SQL confs); on exit restore each key's
    previous value, or unset it when it had none."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

"""Fixtures of the sampling tests.

``sampling_conf`` sets sampling confs in the shared session and restores them after
(``FakeTransport``, the scripted RoundTransport, is in ``tests/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.spark_conf import SetSparkConf


@pytest.fixture
def sampling_conf(set_spark_conf: SetSparkConf) -> Callable[..., None]:
    """Call with ``name=value`` (``max_sample_rate=5``) to set ``spark.sparkglass.sampling.*``
    (``control_enabled=True`` sets ``spark.sparkglass.control.enabled``); restored after."""

    def key_of(name: str) -> str:
        if name.startswith("control_"):
            return "spark.sparkglass.control." + name[len("control_") :].replace("_", "-")
        return "spark.sparkglass.sampling." + name.replace("_", "-")

    def set_conf(**values: Any) -> None:
        set_spark_conf(
            {
                key_of(name): str(value).lower() if isinstance(value, bool) else str(value)
                for name, value in values.items()
            }
        )

    return set_conf

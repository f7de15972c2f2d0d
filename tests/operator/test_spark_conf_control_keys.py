"""Which ``spark.sparkglass.control.*`` keys a SparkApplication's ``sparkConf`` may set.

The driver control endpoint (``runtime/control/endpoint.py``) reads its address, token and
TLS files, which the operator owns (it pins them), and a few tuning knobs, which are the
user's. The three places that decide agree: the CRD's CEL rules, the operator's spec
validation (``specs.operator_owned``) and the driver's Spark properties
(``spark_conf.spark_properties``); and every knob the endpoint documents that the operator
does not set is one of them (``max-connections-per-address`` was left out when it was added).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator.spark_conf import DriverEnvironment, spark_properties
from sparkglass.operator.specs import (
    USER_CONTROL_CONF_KEYS,
    SparkApplicationSpec,
    operator_owned,
)
from sparkglass.runtime.contract.errors import SamplingSettingsError
from tests.support.crd_cel import evaluate, schema

PREFIX = "spark.sparkglass.control."
PER_ADDRESS = PREFIX + "max-connections-per-address"


def _spec(conf: dict[str, str]) -> dict[str, Any]:
    return {"image": "i", "mainApplicationFile": "f", "sparkConf": conf}


def _refused_by_cel(conf: dict[str, str]) -> list[str]:
    """The messages of the ``sparkConf`` CEL rules that refuse ``conf``."""
    node = schema("SparkApplication")["properties"]["spec"]["properties"]["sparkConf"]
    return [
        " ".join(r["message"].split())
        for r in node["x-kubernetes-validations"]
        if not evaluate(r["rule"], conf)
    ]


def _driver_conf(conf: dict[str, str]) -> dict[str, str]:
    spec = SparkApplicationSpec.parse(_spec(conf))
    return spark_properties(spec, app="flights", namespace="spark-jobs", env=DriverEnvironment())


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self._values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._values.get(key, default)


class _Spark:
    """What ``ControlSettings.from_spark`` reads: ``spark.conf.get``."""

    def __init__(self, values: dict[str, str]) -> None:
        self.conf = _Conf(values)


def _documented_control_keys() -> set[str]:
    """Every ``spark.sparkglass.control.*`` key the endpoint's module docstring documents."""
    from sparkglass.runtime.control import endpoint

    return set(re.findall(r"``(spark\.sparkglass\.control\.[a-z.-]+)``", endpoint.__doc__ or ""))


def test_every_endpoint_knob_the_operator_does_not_set_is_the_users() -> None:
    documented = _documented_control_keys()
    assert PER_ADDRESS in documented, sorted(documented)
    set_by_operator = {k for k in _driver_conf({}) if k.startswith(PREFIX)}
    # The token reaches the driver as an environment variable of the operator's Secret, and
    # the URL is the endpoint's own output: neither is a user's to set.
    not_settings = {PREFIX + "token", PREFIX + "url"}
    assert documented - set_by_operator - not_settings == USER_CONTROL_CONF_KEYS
    assert all(operator_owned(k) for k in set_by_operator | not_settings)


def test_max_connections_per_address_reaches_the_driver() -> None:
    conf = {PER_ADDRESS: "4", PREFIX + "max-connections": "16"}
    assert _refused_by_cel(conf) == []
    assert not operator_owned(PER_ADDRESS)
    driver = _driver_conf(conf)
    assert driver[PER_ADDRESS] == "4" and driver[PREFIX + "max-connections"] == "16"
    # And the driver reads it as the per-address limit.
    from sparkglass.runtime.control.endpoint import ControlSettings

    settings = ControlSettings.from_spark(_Spark(driver))
    assert settings.per_address_limit == 4 and settings.max_connections == 16


def test_without_it_the_driver_keeps_its_default() -> None:
    from sparkglass.runtime.control.endpoint import ControlSettings

    driver = _driver_conf({})
    assert PER_ADDRESS not in driver
    assert ControlSettings.from_spark(_Spark(driver)).per_address_limit == 32  # half of 64


@pytest.mark.parametrize(
    "key",
    [
        PREFIX + "port",
        PREFIX + "host",
        PREFIX + "enabled",
        PREFIX + "token",
        PREFIX + "url",
        PREFIX + "tls.cert-file",
        PREFIX + "tls.key-file",
        # Not a knob: a prefix of the allowed key must not slip through.
        PREFIX + "max-connections-per",
    ],
)
def test_the_operators_control_keys_stay_reserved(key: str) -> None:
    messages = _refused_by_cel({key: "x"})
    assert len(messages) == 1 and "spark.sparkglass.control.*" in messages[0], messages
    assert "max-connections-per-address" in messages[0]  # the message lists the exceptions
    with pytest.raises(ValidationError, match=rf"sparkConf: {re.escape(key)} is set by"):
        SparkApplicationSpec.parse(_spec({key: "x"}))


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("1", True),
        ("32", True),
        ("1024", True),
        ("0", False),
        ("1025", False),
        ("99999", False),
        ("-1", False),
        ("many", False),
        ("", False),
        ("8 ", False),
    ],
)
def test_cel_admits_the_driver_range_only(value: str, allowed: bool) -> None:
    """The CRD refuses at admission what the driver would refuse at start (1-1024), with a
    message naming the key and the range."""
    messages = _refused_by_cel({PER_ADDRESS: value})
    if allowed:
        assert messages == []
        from sparkglass.runtime.control.endpoint import ControlSettings

        assert ControlSettings.from_spark(_Spark({PER_ADDRESS: value})).per_address_limit == int(
            value
        )
    else:
        assert len(messages) == 1, messages
        assert PER_ADDRESS in messages[0] and "1-1024" in messages[0], messages[0]


@pytest.mark.parametrize("value", ["0", "1025", "many"])
def test_the_driver_refuses_the_same_values_naming_the_key(value: str) -> None:
    from sparkglass.runtime.control.endpoint import ControlSettings

    with pytest.raises(SamplingSettingsError, match=r"1–1024") as caught:
        ControlSettings.from_spark(_Spark({PER_ADDRESS: value}))
    assert caught.value.field == PER_ADDRESS

"""SparkApplication expectations and redaction reach the driver's conf; a DataSample's kind,
filter and columns are checked before a round opens."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator import spark_conf
from sparkglass.operator.specs import DataSampleSpec, SparkApplicationSpec
from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.expectations import (
    EXPECTATIONS_CONF,
    parse_expectation_overrides,
)
from sparkglass.runtime.contract.redaction import REDACT_CONF, parse_redaction


def app_spec(**extra: Any) -> SparkApplicationSpec:
    return SparkApplicationSpec.parse(
        {"image": "img:1", "mainApplicationFile": "local:///job.py", **extra}
    )


PIPELINE = {
    "vertices": [
        {"name": "flights", "kind": "source", "bounded": False},
        {
            "name": "parse",
            "inputs": ["flights"],
            "expectations": [
                {"name": "valid-delay", "condition": "dep_delay > -120", "action": "drop"}
            ],
        },
    ]
}


def test_expectations_and_redaction_reach_the_driver_conf_and_redaction_wins() -> None:
    spec = app_spec(
        pipeline=PIPELINE,
        sampling={"enabled": True, "redact": [{"columns": ["tailnum"], "action": "drop"}]},
        sparkConf={REDACT_CONF: "[]"},  # a weaker rule through sparkConf does not stick
    )
    conf = spark_conf.spark_properties(
        spec, app="a", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    parsed = parse_expectation_overrides(conf[EXPECTATIONS_CONF])
    assert [(e.name, e.action.value) for e in parsed["parse"]] == [("valid-delay", "drop")]
    rules = parse_redaction(conf[REDACT_CONF])
    assert [(r.columns, r.action.value) for r in rules] == [(["tailnum"], "drop")]


def test_without_expectations_or_rules_no_key_is_written() -> None:
    conf = spark_conf.spark_properties(
        app_spec(), app="a", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    assert EXPECTATIONS_CONF not in conf and REDACT_CONF not in conf


@pytest.mark.parametrize(
    "sampling",
    [
        {"redact": [{"columns": [], "action": "drop"}]},
        {"redact": [{"columns": ["a"], "action": "reveal"}]},
    ],
)
def test_bad_redaction_in_the_spec_is_refused(sampling: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as err:
        app_spec(sampling=sampling)
    assert "redact" in str(err.value)


def test_expectations_on_a_source_are_refused_naming_the_step() -> None:
    """As the CRD's CEL rule (tests/operator/test_cel.py): the emulator runs no CEL, and an
    operator behind a cluster without the rule must not start a driver that will refuse."""
    pipeline = json.loads(json.dumps(PIPELINE))
    pipeline["vertices"][0]["expectations"] = [{"name": "x", "condition": "true"}]
    with pytest.raises(ValidationError, match=r"vertices\[flights\].expectations.*not to a source"):
        app_spec(pipeline=pipeline)


def test_datasample_round_request_and_its_errors() -> None:
    base = {"applicationRef": {"name": "a"}, "vertex": "parse"}
    spec = DataSampleSpec.parse(
        {**base, "kind": "violations", "expectation": "valid-delay", "columns": ["carrier"]}
    )
    request = spec.round_request()
    assert request.query_params() == {
        "kind": "violations",
        "columns": "carrier",
        "expectation": "valid-delay",
    }
    assert DataSampleSpec.parse(base).round_request().is_plain()
    with pytest.raises(InvalidParameterError) as err:
        DataSampleSpec.parse({**base, "expectation": "valid-delay"}).round_request()
    assert err.value.field == "expectation"
    with pytest.raises(ValidationError):
        DataSampleSpec.parse({**base, "kind": "everything"})
    assert json.loads(request.model_dump_json())["kind"] == "violations"

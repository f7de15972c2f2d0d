"""The CRDs' CEL rules (``x-kubernetes-validations``), evaluated as the API server would.

Uses the ``cel-python`` package (``celpy``); objects are defaulted from the schema first, as
the API server defaults before it validates. Every example passes every rule; each rule
rejects the mistake it is there for.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from sparkglass.operator.spark_conf import DriverEnvironment, spark_properties
from sparkglass.operator.specs import (
    OPERATOR_OWNED_CONF_KEYS,
    SparkApplicationSpec,
    operator_owned,
)
from tests.support.crd_cel import evaluate, rules, schema, violations
from tests.support.crd_schema import CRDS

celpy = pytest.importorskip("celpy")

REPO = Path(__file__).resolve().parents[2]


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "examples" / name).read_text())


def test_examples_pass_every_rule() -> None:
    assert violations("SparkApplication", example("flights-sparkapplication.yaml")) == []
    assert violations("SparkApplication", example("pod-settings-sparkapplication.yaml")) == []
    assert violations("DataSample", example("flights-datasample.yaml")) == []


def test_every_rule_compiles() -> None:
    env = celpy.Environment()
    for kind in CRDS:
        for _, rule, _ in rules(schema(kind), _everything(schema(kind))):
            env.compile(rule)


def _everything(node: dict[str, Any]) -> Any:
    # A value at every level, so rules() visits every rule of the schema.
    if node.get("type") == "object" and "properties" in node:
        return {k: _everything(v) for k, v in node["properties"].items()}
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return [_everything(node["items"])]
    return None


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"sparkConf": {"spark.master": "local[2]"}}, "spark.master"),
        (
            {"sparkConf": {"spark.sparkglass.control.tls.cert-file": "/tmp/mine.pem"}},
            "spark.sparkglass.control.",
        ),
        (
            {"dynamicAllocation": {"enabled": True, "minExecutors": 5, "maxExecutors": 2}},
            "minExecutors",
        ),
        ({"restartPolicy": {"type": "Never", "onFailureRetries": 3}}, "OnFailure"),
        ({"restartPolicy": {"type": "Always", "onFailureRetries": 3}}, "OnFailure"),
        ({"restartPolicy": {"type": "Never", "onSubmissionFailureRetries": 1}}, "Never"),
        ({"sampling": {"samplingWindow": "45s"}}, "30s"),
        ({"sampling": {"timeout": "500ms"}}, "10m"),
        (
            {
                "driver": {
                    "env": [
                        {
                            "name": "X",
                            "value": "1",
                            "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
                        }
                    ]
                }
            },
            "valueFrom",
        ),
    ],
)
def test_application_rules_reject(change: dict[str, Any], fragment: str) -> None:
    app = example("flights-sparkapplication.yaml")
    app["spec"].update(change)
    bad = violations("SparkApplication", app)
    assert len(bad) == 1 and fragment in bad[0], bad


def test_pipeline_rules_reject_dangling_inputs_and_sourceless_vertices() -> None:
    app = example("flights-sparkapplication.yaml")
    vertices = app["spec"]["pipeline"]["vertices"]
    vertices[3]["inputs"] = ["nowhere"]
    assert any(
        "every input" not in b and "inputs.all" in b for b in violations("SparkApplication", app)
    )
    app = example("flights-sparkapplication.yaml")
    app["spec"]["pipeline"]["vertices"][3]["inputs"] = []  # a vertex without inputs
    assert any("size(self.inputs)" in b for b in violations("SparkApplication", app))
    app = example("flights-sparkapplication.yaml")
    app["spec"]["pipeline"]["vertices"][0]["attributes"] = {"noOutputUntilEndOfInput": True}
    assert any("noOutputUntilEndOfInput" in b for b in violations("SparkApplication", app))


@pytest.mark.parametrize("kind", ["source", "sink"])
def test_expectations_are_refused_on_a_source_or_a_sink(kind: str) -> None:
    """The driver refuses them when it plans (PlanError naming the step); the API server
    refuses them first, so the mistake never reaches a driver Pod."""
    app = example("flights-sparkapplication.yaml")
    step = next(v for v in app["spec"]["pipeline"]["vertices"] if v.get("kind") == kind)
    step["expectations"] = [{"name": "known-delay", "condition": "dep_delay IS NOT NULL"}]
    bad = violations("SparkApplication", app)
    assert len(bad) == 1 and "self.expectations" in bad[0], bad
    step["kind"] = "vertex"  # the same entry on a vertex passes this rule
    assert not [b for b in violations("SparkApplication", app) if "expectations" in b]


def test_datasample_rules() -> None:
    sample = example("flights-datasample.yaml")
    sample["spec"]["samplingWindow"] = "31s"
    assert violations("DataSample", sample) == [
        ".spec.samplingWindow: "
        + schema("DataSample")["properties"]["spec"]["properties"]["samplingWindow"][
            "x-kubernetes-validations"
        ][0]["rule"]
    ]
    old = example("flights-datasample.yaml")
    changed = example("flights-datasample.yaml")
    changed["spec"]["vertex"] = "enrich-origin"
    assert any("oldSelf" in b for b in violations("DataSample", changed, old))  # immutable
    assert violations("DataSample", old, old) == []


def test_restart_policy_rule_agrees_with_its_field_descriptions() -> None:
    """onSubmissionFailureRetries is documented for OnFailure and Always: both accept it."""
    for kind in ("OnFailure", "Always"):
        app = example("flights-sparkapplication.yaml")
        app["spec"]["restartPolicy"] = {"type": kind, "onSubmissionFailureRetries": 2}
        assert violations("SparkApplication", app) == [], kind


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("flights", True),
        ("a", True),
        ("etl-2026", True),
        ("a" * 56, True),
        ("a" * 57, False),  # <name>-driver would pass 63 characters
        ("2026-etl", False),  # a Service name must start with a letter (DNS-1035)
        ("Flights", False),
        ("flights-", False),
        ("flights.v2", False),
    ],
)
def test_application_name_must_make_valid_child_names(name: str, ok: bool) -> None:
    app = example("flights-sparkapplication.yaml")
    app["metadata"]["name"] = name
    bad = violations("SparkApplication", app)
    assert (bad == []) is ok, bad
    if not ok:
        assert len(bad) == 1 and "metadata.name" in bad[0], bad


def _spark_conf_rules() -> list[dict[str, str]]:
    spec = schema("SparkApplication")["properties"]["spec"]["properties"]
    return list(spec["sparkConf"]["x-kubernetes-validations"])


def _refused_by_cel(key: str) -> list[str]:
    """The messages of the sparkConf rules that refuse ``{key: ...}``."""
    return [
        " ".join(r["message"].split())
        for r in _spark_conf_rules()
        if not evaluate(r["rule"], {key: "x"})
    ]


#: Every key the operator sets in the driver's spark-defaults.conf for the example.
_OPERATOR_SET_KEYS = sorted(
    spark_properties(
        SparkApplicationSpec.parse(example("flights-sparkapplication.yaml")["spec"]),
        app="flights",
        namespace="spark-jobs",
        env=DriverEnvironment(),
    )
)


@pytest.mark.parametrize(
    "key",
    sorted(
        {
            *OPERATOR_OWNED_CONF_KEYS,
            "spark.sparkglass.control.port",
            "spark.sparkglass.control.host",
            "spark.sparkglass.control.enabled",
            "spark.sparkglass.control.token",
            "spark.sparkglass.control.url",
            "spark.sparkglass.control.tls.cert-file",
        }
    ),
)
def test_reserved_spark_conf_keys_are_refused_by_cel_and_the_operator(key: str) -> None:
    messages = _refused_by_cel(key)
    assert len(messages) == 1, (key, messages)
    named = key if key in OPERATOR_OWNED_CONF_KEYS else "spark.sparkglass.control.*"
    assert named in messages[0], messages[0]
    with pytest.raises(
        ValidationError, match=rf"sparkConf: {re.escape(key)} is set by the operator"
    ):
        SparkApplicationSpec.parse(
            {"image": "i", "mainApplicationFile": "f", "sparkConf": {key: "x"}}
        )


@pytest.mark.parametrize(
    "key",
    ["spark.kubernetes.driver.pod.featureSteps", "spark.kubernetes.executor.pod.featureSteps"],
)
def test_pod_feature_steps_are_reserved(key: str) -> None:
    # Spark would load these user classes to rewrite the Pods it builds, after the operator
    # checked the spec's ServiceAccounts and Secrets: neither the CRD nor the operator lets
    # a sparkConf set them.
    messages = _refused_by_cel(key)
    assert len(messages) == 1 and key in messages[0], (key, messages)
    with pytest.raises(
        ValidationError, match=rf"sparkConf: {re.escape(key)} is set by the operator"
    ):
        SparkApplicationSpec.parse(
            {"image": "i", "mainApplicationFile": "f", "sparkConf": {key: "com.x.Steal"}}
        )


@pytest.mark.parametrize("key", _OPERATOR_SET_KEYS)
def test_cel_and_the_operator_agree_on_every_key_the_operator_sets(key: str) -> None:
    assert bool(_refused_by_cel(key)) is operator_owned(key), key


@pytest.mark.parametrize(
    "key",
    [
        "spark.sparkglass.control.max-body-bytes",
        "spark.sparkglass.control.connection-timeout",
        "spark.sparkglass.control.max-connections",
        "spark.driver.memory",
        "spark.kubernetes.executor.label.team",
        "spark.sparkglass.sampling.timeout",
    ],
)
def test_user_tunable_keys_pass(key: str) -> None:
    assert _refused_by_cel(key) == []
    assert (
        key
        in SparkApplicationSpec.parse(
            {"image": "i", "mainApplicationFile": "f", "sparkConf": {key: "1"}}
        ).spark_conf
    )


@pytest.mark.parametrize(
    ("conf", "refused"),
    [
        ({"spark.kubernetes.executor.secrets.victim-control-token": "/mnt/t"}, True),
        ({"spark.kubernetes.driver.secrets.victim-control-token": "/mnt/t"}, True),
        ({"spark.kubernetes.executor.secretKeyRef.TOKEN": "victim-control-token:token"}, True),
        ({"spark.kubernetes.driver.secretKeyRef.TOKEN": "victim-control-token"}, True),
        ({"spark.kubernetes.executor.secrets.s3-credentials": "/mnt/s3"}, False),
        ({"spark.kubernetes.executor.secretKeyRef.KEY": "s3-credentials:control-token"}, False),
        ({"spark.kubernetes.executor.secretKeyRef.KEY": "s3:key-control-token"}, False),
        ({"spark.app.note": "victim-control-token:token"}, False),
    ],
)
def test_spark_secret_properties_may_not_name_a_control_token_secret(
    conf: dict[str, str], refused: bool
) -> None:
    """The CEL rule and the operator (``pod_privileges``) agree on Spark's own secret keys."""
    from sparkglass.operator.pod_privileges import PodPrivilegeRefused, check_secret_names

    messages = [r["message"] for r in _spark_conf_rules() if not evaluate(r["rule"], conf)]
    assert bool(messages) is refused, messages
    if refused:
        assert "control-token" in messages[0]
    spec = SparkApplicationSpec.parse({"image": "i", "mainApplicationFile": "f", "sparkConf": conf})
    if refused:
        with pytest.raises(PodPrivilegeRefused, match=r"spec\.sparkConf"):
            check_secret_names(spec)
    else:
        check_secret_names(spec)

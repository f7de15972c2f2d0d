"""Attacks through a SparkApplication spec on the parts of the driver the operator owns.

Whoever may edit a SparkApplication must not be able to redirect the driver (host, ports,
namespace, Pod name), replace its control token or TLS files, or shadow its configuration,
through ``sparkConf`` or the Pod settings: each is refused with an error naming the field,
and ``spark_properties`` keeps the operator's values even for a spec that skipped
validation (stored before a rule existed).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator import children
from sparkglass.operator.spark_conf import DriverEnvironment, spark_properties
from sparkglass.operator.specs import SparkApplicationSpec

BASE: dict[str, Any] = {"image": "i", "mainApplicationFile": "f"}
ENV = DriverEnvironment()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.driver.host", "attacker.example.com"),
        ("spark.driver.port", "1"),
        ("spark.kubernetes.driver.pod.name", "someone-elses-pod"),
        ("spark.kubernetes.namespace", "kube-system"),
        ("spark.sparkglass.control.host", "127.0.0.1"),
        ("spark.sparkglass.control.token", "known-token"),
        ("spark.sparkglass.control.tls.cert-file", "/tmp/attacker.pem"),
        ("spark.kubernetes.executor.podTemplateFile", "/tmp/privileged.yaml"),
    ],
)
def test_spark_conf_cannot_take_an_operator_key(key: str, value: str) -> None:
    with pytest.raises(ValidationError, match=key.replace(".", r"\.")):
        SparkApplicationSpec.parse({**BASE, "sparkConf": {key: value}})
    # A spec that skipped validation (model_copy runs no validators) still gets ours.
    unchecked = SparkApplicationSpec.parse(BASE).model_copy(update={"spark_conf": {key: value}})
    conf = spark_properties(unchecked, app="job", namespace="ns", env=ENV)
    assert conf.get(key) != value


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # Serve a certificate of the attacker's choosing from the control TLS path.
        (
            {"volumes": [{"name": "sparkglass-control-tls", "secret": {"secretName": "mine"}}]},
            "volumes",
        ),
        (
            {
                "volumes": [{"name": "mine", "secret": {"secretName": "mine"}}],
                "driver": {
                    "volumeMounts": [{"name": "mine", "mountPath": "/etc/sparkglass-control-tls"}]
                },
            },
            "volumeMounts[0].mountPath",
        ),
        # Replace spark-defaults.conf (and with it the control settings).
        (
            {
                "volumes": [{"name": "mine", "configMap": {"name": "mine"}}],
                "driver": {"volumeMounts": [{"name": "mine", "mountPath": "/etc/sparkglass/"}]},
            },
            "volumeMounts[0].mountPath",
        ),
        # A known token instead of the operator's.
        (
            {"driver": {"env": [{"name": "SPARKGLASS_CONTROL_TOKEN", "value": "known"}]}},
            "env[0].name",
        ),
        # A second container named like the driver's.
        (
            {"driver": {"initContainers": [{"name": "spark-driver", "image": "x"}]}},
            "initContainers[0].name",
        ),
    ],
)
def test_pod_settings_cannot_replace_the_operators_parts(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        SparkApplicationSpec.parse({**BASE, **change})
    assert field in str(info.value)


def test_user_labels_cannot_spoof_the_operators_labels() -> None:
    spoof = {"sparkglass.io/application": "other", "sparkglass.io/role": "driver"}
    spec = SparkApplicationSpec.parse(
        {**BASE, "driver": {"labels": spoof}, "sparkUIOptions": {"serviceLabels": spoof}}
    )
    pod = children.driver_pod("job", "ns", "uid", spec, hash="h", attempt=1, env=ENV)
    svc = children.service("job", "ns", "uid", spec)
    assert pod["metadata"]["labels"]["sparkglass.io/application"] == "job"
    assert svc["metadata"]["labels"]["sparkglass.io/application"] == "job"
    assert svc["metadata"]["labels"]["sparkglass.io/role"] == "driver-service"

"""The service may read the Kubeflow / Apache Spark operators' SparkApplications (and get the
ConfigMaps the operator publishes their pipelines in, never list them) only when the chart
value that lets the operator serve them is on, only read, and is told to list them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_rbac import allows, rules_for

from .conftest import NAMESPACE, find, manifests

SERVICE_SA = "sparkglass-service"
KINDS = [
    ("kubeflow", "sparkoperator.k8s.io", "SPARKGLASS_KUBEFLOW_APPLICATIONS"),
    ("apacheSparkOperator", "spark.apache.org", "SPARKGLASS_APACHE_SPARK_APPLICATIONS"),
]


def service_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    deployment = find(docs, "Deployment", "sparkglass-service")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


@pytest.mark.parametrize(("value", "group", "env"), KINDS)
def test_off_by_default(value: str, group: str, env: str) -> None:
    docs = manifests({})
    rules = rules_for(docs, SERVICE_SA, NAMESPACE)
    assert not allows(rules, group, "sparkapplications", "get")
    assert not allows(rules, "", "configmaps", "get")
    assert service_env(docs)[env] == "false"


@pytest.mark.parametrize(("value", "group", "env"), KINDS)
def test_on_grants_read_only(value: str, group: str, env: str) -> None:
    docs = manifests({value: {"enabled": True}})
    rules = rules_for(docs, SERVICE_SA, NAMESPACE)
    for verb in ("get", "list"):
        assert allows(rules, group, "sparkapplications", verb), verb
    for verb in ("create", "update", "patch", "delete", "watch"):
        assert not allows(rules, group, "sparkapplications", verb), verb
    # The published pipelines are read by name: a list (or watch) would read every ConfigMap
    # anyone creates in the namespace.
    assert allows(rules, "", "configmaps", "get")
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not allows(rules, "", "configmaps", verb), verb
    other = next(g for _, g, _ in KINDS if g != group)
    assert not allows(rules, other, "sparkapplications", "get")
    assert service_env(docs)[env] == "true"

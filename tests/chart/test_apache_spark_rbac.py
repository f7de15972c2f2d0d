"""Chart value ``apacheSparkOperator.enabled``: the operator may read the Apache Spark
Kubernetes operator's SparkApplications, only then, only read, and only where it works."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart_rbac import allows, rules_for

from .conftest import NAMESPACE, find, load_chart, manifests, render

GROUP, PLURAL = "spark.apache.org", "sparkapplications"
OPERATOR_SA = "sparkglass-operator"


def apache_rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        rule
        for role in find(docs, "Role") + find(docs, "ClusterRole")
        for rule in role["rules"]
        if GROUP in rule.get("apiGroups", [])
    ]


def test_off_by_default_no_right_on_apache_spark_applications() -> None:
    docs = manifests({})
    assert apache_rules(docs) == []
    assert not allows(rules_for(docs, OPERATOR_SA, NAMESPACE), GROUP, PLURAL, "get")
    # Kubeflow's switch grants nothing of the Apache operator's, and the other way round.
    assert apache_rules(manifests({"kubeflow": {"enabled": True}})) == []
    docs = manifests({"apacheSparkOperator": {"enabled": True}})
    kubeflow = rules_for(docs, OPERATOR_SA, NAMESPACE)
    assert not allows(kubeflow, "sparkoperator.k8s.io", PLURAL, "get")


@pytest.mark.parametrize(
    ("values", "namespaces", "kind"),
    [
        ({}, [NAMESPACE], "Role"),
        ({"watchNamespaces": ["spark-jobs", "spark-batch"]}, ["spark-jobs", "spark-batch"], "Role"),
        (
            {
                "operator": {"clusterWide": True},
                "driver": {"namespaces": ["spark-jobs"]},
            },
            ["spark-jobs", "anywhere"],
            "ClusterRole",
        ),
    ],
)
def test_enabled_grants_read_only_where_the_operator_works(
    values: dict[str, Any], namespaces: list[str], kind: str
) -> None:
    docs = manifests({**values, "apacheSparkOperator": {"enabled": True}})
    for namespace in namespaces:
        rules = rules_for(docs, OPERATOR_SA, namespace)
        for verb in ("get", "list", "watch"):
            assert allows(rules, GROUP, PLURAL, verb), (namespace, verb)
        for verb in ("create", "update", "patch", "delete", "deletecollection"):
            assert not allows(rules, GROUP, PLURAL, verb), (namespace, verb)
        for sub in ("status", "finalizers"):
            assert not allows(rules, GROUP, f"{PLURAL}/{sub}", "update")
            assert not allows(rules, GROUP, f"{PLURAL}/{sub}", "patch")
    holders = {
        role["kind"]
        for role in find(docs, "Role") + find(docs, "ClusterRole")
        if any(GROUP in r.get("apiGroups", []) for r in role["rules"])
    }
    assert holders == {kind}
    # The operator reads and watches them; the service (Kubernetes execution mode) only gets
    # and lists them, to show them to callers who may get them; the drivers get nothing.
    verbs = {"sparkglass-operator": ["get", "list", "watch"], "sparkglass-service": ["get", "list"]}
    for role in find(docs, "Role") + find(docs, "ClusterRole"):
        for rule in role["rules"]:
            if GROUP in rule.get("apiGroups", []):
                assert role["metadata"]["name"] in verbs, role["metadata"]["name"]
                assert rule["resources"] == [PLURAL]
                assert rule["verbs"] == verbs[role["metadata"]["name"]]


@pytest.mark.parametrize("bad", [{"enabled": "yes"}, {"enabled": True, "crd": True}])
def test_schema_refuses_bad_apache_spark_operator_values(bad: dict[str, Any]) -> None:
    helm = pytest.importorskip("helm_python")
    chart = load_chart()
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values({"apacheSparkOperator": bad}))
    with pytest.raises(helm.HelmError):
        render({"apacheSparkOperator": bad})

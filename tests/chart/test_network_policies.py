"""The chart's NetworkPolicies against the driver Pods the operator really creates.

No cluster enforces policies here, so the test evaluates the rendered policies the way the
NetworkPolicy API defines them (a Pod selected by some policy accepts a connection only when a
rule of one of them admits its source and port; named ports resolve against the destination
Pod's container ports) for a driver Pod built by ``operator/children.py`` and peers labelled
as the chart's operator and service Deployments label their Pods. Labels and port names come
from the operator code and the rendered manifests, never restated here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkglass.operator import children, names, spark_conf
from sparkglass.operator.specs import SparkApplicationSpec
from tests.support.network_policy import Labels, reachable, selects

from .conftest import NAMESPACE, VARIANTS, find, manifests, one

Rendered = Callable[[str], list[dict[str, Any]]]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flights-sparkapplication.yaml"
DRIVER_NS = "spark-jobs"
KUBE_VERSIONS = ("1.27", "1.33")


# ------------------------------------------- the model (tests/support/network_policy.py)
def test_the_model_isolates_and_admits_as_the_api_defines() -> None:
    """The evaluator itself: an empty rule list denies, an empty `from` admits everyone."""
    pod = _driver_pod()
    closed = {
        "metadata": {"namespace": DRIVER_NS},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    assert reachable([], pod, 4045, {}, "x")
    assert not reachable([closed], pod, 4045, {}, "x")
    open_rule = copy.deepcopy(closed)
    open_rule["spec"]["ingress"] = [{"ports": [{"port": "control"}]}]
    assert reachable([open_rule], pod, 4045, {}, "x")
    assert not reachable([open_rule], pod, names.UI_PORT, {}, "x")


# ---------------------------------------------------------------------------------- fixtures
def _driver_pod(control_port: int | None = None, app: str = "flights") -> dict[str, Any]:
    """The driver Pod exactly as the operator builds it for the example application."""
    body = yaml.safe_load(EXAMPLE.read_text())
    if control_port is not None:
        body["spec"]["sampling"]["controlPort"] = control_port
    spec = SparkApplicationSpec.parse(body["spec"])
    return children.driver_pod(
        app, DRIVER_NS, "uid-1", spec, hash="h", attempt=1, env=spark_conf.DriverEnvironment()
    )


def _pod_labels(docs: list[dict[str, Any]], component: str) -> Labels:
    """Labels of the Pods of the chart's ``component`` Deployment (operator or service)."""
    dep = one(docs, "Deployment", f"sparkglass-{component}")
    return dict(dep["spec"]["template"]["metadata"]["labels"])


def _executor_labels(app: str = "flights") -> Labels:
    """Labels the driver puts on executors: Spark's own plus those the operator configures."""
    body = yaml.safe_load(EXAMPLE.read_text())
    conf = spark_conf.spark_properties(
        SparkApplicationSpec.parse(body["spec"]),
        app=app,
        namespace=DRIVER_NS,
        env=spark_conf.DriverEnvironment(),
    )
    prefix = "spark.kubernetes.executor.label."
    labels = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}
    return {**labels, "spark-role": "executor", "spark-exec-id": "1"}


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The policies on driver Pods (the operator's own is tested with the webhook)."""
    return [p for p in find(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("-driver")]


def _ports(pod: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}


# ---------------------------------------------------------------------------------- the tests
def test_policy_selects_the_driver_pods_the_operator_labels(rendered: Rendered) -> None:
    docs = rendered("namespaced")
    pod = _driver_pod()
    labels = pod["metadata"]["labels"]
    # The labels the policy relies on are the operator's own constants, on the real Pod.
    assert labels[names.LABEL_ROLE] == names.ROLE_DRIVER
    assert labels[names.LABEL_MANAGED_BY] == names.MANAGED_BY
    for ns in ("spark-jobs", "spark-batch"):
        (policy,) = [p for p in _policies(docs) if p["metadata"]["namespace"] == ns]
        assert selects(policy["spec"]["podSelector"], labels)
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        # Executors are not isolated by it (the driver and other executors dial them).
        assert not selects(policy["spec"]["podSelector"], _executor_labels())
    # A Pod a user labels like a driver but without the operator's managed-by is not a driver.
    impostor = {k: v for k, v in labels.items() if k != names.LABEL_MANAGED_BY}
    assert not selects(_policies(docs)[0]["spec"]["podSelector"], impostor)


def test_only_operator_and_service_reach_the_control_port(rendered: Rendered) -> None:
    docs = rendered("default")
    policies = _policies(docs)
    pod = _driver_pod()
    pod["metadata"]["namespace"] = NAMESPACE  # default install: drivers in the release's
    control = _ports(pod)["control"]
    assert control == 4045
    operator, service = _pod_labels(docs, "operator"), _pod_labels(docs, "service")
    assert reachable(policies, pod, control, operator, NAMESPACE)
    assert reachable(policies, pod, control, service, NAMESPACE)
    # Anyone else is refused: another Pod of the namespace, an executor, a Pod labelled like
    # the operator in another namespace, a Pod of another release.
    assert not reachable(policies, pod, control, {"app": "curl"}, NAMESPACE)
    assert not reachable(policies, pod, control, _executor_labels(), NAMESPACE)
    assert not reachable(policies, pod, control, operator, "attacker")
    other_release = {**operator, "app.kubernetes.io/instance": "other"}
    assert not reachable(policies, pod, control, other_release, NAMESPACE)


def test_control_port_of_the_application_is_covered_whatever_its_number(
    rendered: Rendered,
) -> None:
    """spec.sampling.controlPort is per application: the policy names the port, so a custom
    number is closed to strangers and open to the operator alike."""
    docs = rendered("namespaced")
    pod = _driver_pod(control_port=5123)
    assert _ports(pod)["control"] == 5123
    operator = _pod_labels(docs, "operator")
    assert reachable(_policies(docs), pod, 5123, operator, NAMESPACE)
    assert not reachable(_policies(docs), pod, 5123, {"app": "curl"}, DRIVER_NS)


def test_spark_ui_is_closed_unless_peers_are_named() -> None:
    pod = _driver_pod()
    ui = _ports(pod)["spark-ui"]
    assert ui == names.UI_PORT
    namespaced = VARIANTS["namespaced"]
    docs = manifests(namespaced)
    for labels, ns in (
        ({"app": "curl"}, DRIVER_NS),
        (_executor_labels(), DRIVER_NS),
        (_pod_labels(docs, "operator"), NAMESPACE),
        (_pod_labels(docs, "service"), NAMESPACE),
    ):
        assert not reachable(_policies(docs), pod, ui, labels, ns), labels
    opened = manifests(
        {
            **namespaced,
            "networkPolicy": {
                "sparkUIFrom": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
                ]
            },
        }
    )
    assert reachable(_policies(opened), pod, ui, {"app": "grafana"}, "ops")
    assert not reachable(_policies(opened), pod, ui, {"app": "curl"}, DRIVER_NS)
    # Opening the UI opens nothing else to those peers.
    assert not reachable(_policies(opened), pod, _ports(pod)["control"], {"app": "x"}, "ops")


def test_executors_reach_driver_rpc_and_block_manager_only(rendered: Rendered) -> None:
    docs = rendered("namespaced")
    pod = _driver_pod()
    ports = _ports(pod)
    assert (ports["driver-rpc"], ports["blockmanager"]) == (
        names.DRIVER_PORT,
        names.BLOCK_MANAGER_PORT,
    )
    executor = _executor_labels()
    assert executor[names.LABEL_APP] == "flights"
    for port in (names.DRIVER_PORT, names.BLOCK_MANAGER_PORT):
        assert reachable(_policies(docs), pod, port, executor, DRIVER_NS)
        assert not reachable(_policies(docs), pod, port, executor, "elsewhere")
        assert not reachable(_policies(docs), pod, port, {"app": "curl"}, DRIVER_NS)
    # Every port the driver opens is accounted for: nothing reachable by a stranger.
    assert set(ports) == {"driver-rpc", "blockmanager", "spark-ui", "control"}
    for port in ports.values():
        assert not reachable(_policies(docs), pod, port, {"app": "curl"}, DRIVER_NS)


def test_policies_follow_driver_namespaces_and_components() -> None:
    docs = manifests({"driver": {"namespaces": ["etl", "ml"]}})
    assert sorted(p["metadata"]["namespace"] for p in _policies(docs)) == ["etl", "ml"]
    # Without the operator, only the service keeps the control port (local execution mode).
    docs = manifests({"operator": {"enabled": False}})
    pod = _driver_pod()
    pod["metadata"]["namespace"] = NAMESPACE
    control = _ports(pod)["control"]
    service = _pod_labels(docs, "service")
    assert reachable(_policies(docs), pod, control, service, NAMESPACE)
    operator_like = {**service, "app.kubernetes.io/component": "operator"}
    assert not reachable(_policies(docs), pod, control, operator_like, NAMESPACE)


def test_switch_turns_them_off() -> None:
    assert not _policies(manifests({"networkPolicy": {"enabled": False}}))
    assert _policies(manifests({}))  # on by default


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_policies_validate_against_kubernetes_schemas(kube_version: str) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    values = {
        **VARIANTS["namespaced"],
        "networkPolicy": {
            "sparkUIFrom": [{"podSelector": {"matchLabels": {"app": "grafana"}}}],
        },
    }
    policies = find(manifests(values), "NetworkPolicy")
    assert len(policies) == 3  # the drivers' in both namespaces, the operator's
    for doc in policies:
        kv.validate(doc, kube_version, strict=True)


@pytest.mark.parametrize(
    "bad",
    [
        {"networkPolicy": {"enabled": "yes"}},
        {"networkPolicy": {"sparkUIFrom": [{}]}},
        {"networkPolicy": {"sparkUIFrom": [{"pods": {}}]}},
        {"networkPolicy": {"open": True}},
    ],
)
def test_schema_rejects_bad_policy_values(bad: dict[str, Any]) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError):
        manifests(bad)

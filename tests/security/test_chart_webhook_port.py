"""Attack on the chart's defaults: the operator's admission webhook port (9443) took reviews
from every Pod of the cluster unless ``networkPolicy.webhookFrom`` was set, and it had no
default, so a default install left it open without saying so. The API server presents no
client certificate, so the webhook cannot tell a forged review from a real one: any Pod could
ask it, for every watched namespace, whether a guessed column or expectation exists (and
make it call the drivers, within its bounds).

The chart as rendered by Helm's own engine (``tests/chart/conftest.py``): with NetworkPolicies
and the webhook on, the render refuses without the API servers' addresses, naming the value
and the ways out; with them, the rendered policies (evaluated as the NetworkPolicy API
defines them, ``tests/chart/test_network_policies.py``) admit the webhook port from those
addresses only, and no Pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.conftest import API_SERVERS, NAMESPACE, VARIANTS, find, manifests, one, render
from tests.support.network_policy import reachable

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a test extra")


def _operator_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """An operator Pod as its Deployment makes it (labels, named container ports)."""
    template = one(docs, "Deployment", "sparkglass-operator")["spec"]["template"]
    return {"metadata": {**template["metadata"], "namespace": NAMESPACE}, "spec": template["spec"]}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_webhook_is_not_rendered_open_to_every_pod_unannounced(variant: str) -> None:
    with pytest.raises(helm.HelmError) as refused:
        render(VARIANTS[variant], required=False)
    message = str(refused.value)
    for value in ("networkPolicy.webhookFrom", "webhookFromAnywhere", "operator.webhook.enabled"):
        assert value in message, message


def test_with_the_api_servers_named_no_pod_reaches_the_webhook_port() -> None:
    docs = manifests({"networkPolicy": {"webhookFrom": API_SERVERS}}, required=False)
    pod = _operator_pod(docs)
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    policies = find(docs, "NetworkPolicy")
    for src_labels, src_ns in (
        ({}, "default"),
        ({"app": "anything"}, NAMESPACE),
        ({"sparkglass.io/application": "flights"}, "spark-jobs"),  # an executor
        (_operator_pod(docs)["metadata"]["labels"], NAMESPACE),  # another replica
    ):
        assert not reachable(policies, pod, ports["webhook"], src_labels, src_ns), src_labels
        # Probes and scraping stay open.
        assert reachable(policies, pod, ports["health"], src_labels, src_ns)
    (policy,) = find(docs, "NetworkPolicy", "sparkglass-operator")
    webhook_rules = [
        r for r in policy["spec"]["ingress"] if any(p["port"] == "webhook" for p in r["ports"])
    ]
    assert [r["from"] for r in webhook_rules] == [API_SERVERS]


@pytest.mark.parametrize(
    "values",
    [
        {"networkPolicy": {"webhookFromAnywhere": True}},  # said out loud
        {"networkPolicy": {"enabled": False}},  # no policies at all, chosen
        {"operator": {"webhook": {"enabled": False}}},
        {"operator": {"enabled": False}},
    ],
)
def test_the_ways_out_the_message_names_render(values: dict[str, Any]) -> None:
    docs = manifests(values, required=False)
    assert find(docs, "Deployment")
    assert not find(docs, "NetworkPolicy", "sparkglass-operator")

"""The chart's DataSample admission webhook (templates/operator-webhook.yaml): what the API
server is told to call, and the certificate it is told to trust. The running webhook answers
the chart's own configuration in ``test_boot.py``."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtensionOID

from .conftest import NAMESPACE, find, manifests, one, render

Rendered = Callable[[str], list[dict[str, Any]]]


def _hook(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (config,) = find(docs, "ValidatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    return dict(hook)


def test_only_datasample_creations_are_reviewed_by_the_operator_service(
    rendered: Rendered,
) -> None:
    docs = rendered("default")
    hook = _hook(docs)
    assert hook["rules"] == [
        {
            "apiGroups": ["sparkglass.io"],
            "apiVersions": ["*"],
            "resources": ["datasamples"],
            "operations": ["CREATE"],  # the spec is immutable: nothing to check on UPDATE
            "scope": "Namespaced",
        }
    ]
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    # Ignore: an operator down for a moment blocks no DataSample (the driver checks again).
    assert hook["failurePolicy"] == "Ignore" and 1 <= hook["timeoutSeconds"] <= 30
    service = hook["clientConfig"]["service"]
    assert service["path"] == "/validate/datasamples"
    svc = one(docs, "Service", service["name"])
    dep = one(docs, "Deployment", "sparkglass-operator")
    pod = dep["spec"]["template"]
    # It reaches every operator replica (each serves the webhook), on the named port.
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = svc["spec"]["ports"]
    assert port["port"] == service["port"] and port["targetPort"] == "webhook"
    container = pod["spec"]["containers"][0]
    assert any(p["name"] == "webhook" for p in container["ports"])
    # Namespaced by default: only the watched namespace's DataSamples are reviewed.
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NAMESPACE]}
    ]


def test_the_ca_bundle_trusts_the_served_certificate_for_the_service_name(
    rendered: Rendered,
) -> None:
    docs = rendered("default")
    hook = _hook(docs)
    service = hook["clientConfig"]["service"]
    secret = one(docs, "Secret", "sparkglass-operator-webhook-tls")
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_oid(
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME
    ).value.get_values_for_type(x509.DNSName)
    assert f"{service['name']}.{service['namespace']}.svc" in names
    assert cert.not_valid_after_utc > datetime.now(UTC)
    # The Pod mounts exactly that Secret's certificate and key.
    dep = one(docs, "Deployment", "sparkglass-operator")
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == secret["metadata"]["name"]


def test_cluster_wide_reviews_every_namespace(rendered: Rendered) -> None:
    assert "namespaceSelector" not in _hook(rendered("cluster-wide"))


def test_cert_manager_issues_the_certificate_and_injects_its_ca() -> None:
    values = {
        "operator": {
            "webhook": {
                "certificateSource": "cert-manager",
                "certManagerIssuer": {"kind": "ClusterIssuer", "name": "internal-ca"},
            }
        }
    }
    docs = manifests(values)
    (config,) = find(docs, "ValidatingWebhookConfiguration")
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    (certificate,) = find(docs, "Certificate")
    assert certificate["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}
    assert certificate["spec"]["secretName"] == "sparkglass-operator-webhook-tls"
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}"
    )
    assert not [s for s in find(docs, "Secret") if "webhook" in s["metadata"]["name"]]


def test_cert_manager_without_an_issuer_fails_the_render_naming_the_value() -> None:
    helm = pytest.importorskip("helm_python")
    values = {"operator": {"webhook": {"certificateSource": "cert-manager"}}}
    with pytest.raises(helm.HelmError, match=r"certManagerIssuer\.name"):
        render(values)


def test_disabled_webhook_leaves_nothing_behind() -> None:
    docs = manifests({"operator": {"webhook": {"enabled": False}}})
    assert not find(docs, "ValidatingWebhookConfiguration")
    container = one(docs, "Deployment", "sparkglass-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert not [a for a in container["args"] if a.startswith("--webhook")]
    assert not [p for p in container["ports"] if p["name"] == "webhook"]


def test_webhook_port_only_from_the_listed_peers() -> None:
    api_servers = [{"ipBlock": {"cidr": "10.0.0.0/28"}}]
    docs = manifests({"networkPolicy": {"webhookFrom": api_servers}})
    policy = one(docs, "NetworkPolicy", "sparkglass-operator")
    dep = one(docs, "Deployment", "sparkglass-operator")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    rules = policy["spec"]["ingress"]
    webhook = [r for r in rules if any(p["port"] == "webhook" for p in r["ports"])]
    assert webhook == [{"from": api_servers, "ports": [{"port": "webhook", "protocol": "TCP"}]}]
    # Probes and scraping stay open: a rule with no `from` for exactly those ports.
    (open_rule,) = [r for r in rules if "from" not in r]
    assert {p["port"] for p in open_rule["ports"]} == {"health", "metrics"}
    # Accepting any caller explicitly: no policy on the operator (the refusal without either
    # is tests/security/test_chart_webhook_port.py).
    anywhere = {"networkPolicy": {"webhookFromAnywhere": True}}
    assert not find(manifests(anywhere, required=False), "NetworkPolicy", "sparkglass-operator")

"""Helpers for the Helm chart and container image checks (no cluster, no Docker engine).

The chart is rendered offline with ``helm-python-sdk`` (Helm v4's Go SDK through ctypes, imported
as ``helm_python``), the same engine as ``helm template``. Rendering applies
``values.schema.json`` first, exactly like ``helm install``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "sparkglass"
RELEASE = "sparkglass"
NAMESPACE = "sparkglass-system"

#: The API servers' addresses every install gives (``networkPolicy.webhookFrom``): the chart
#: refuses to render the admission webhook without them or ``webhookFromAnywhere``.
API_SERVERS: list[dict[str, Any]] = [{"ipBlock": {"cidr": "10.0.0.0/28"}}]
#: What :func:`render` adds under every test's values (the test's own win).
REQUIRED: dict[str, Any] = {"networkPolicy": {"webhookFrom": API_SERVERS}}

#: The three value sets the README documents, plus the cluster-wide, namespaced and local-auth
#: variants. "default" is namespaced too: the release namespace only. Each also gets
#: :data:`REQUIRED`, as the README's commands give it.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "postgresql-ingress-metrics": {
        "store": {
            "type": "postgresql",
            "existingSecret": "sparkglass-pg",
            "existingSecretKey": "url",
        },
        "service": {"replicas": 2},
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "hosts": [
                {"host": "sparkglass.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}
            ],
            "tls": [{"secretName": "sparkglass-tls", "hosts": ["sparkglass.example.com"]}],
        },
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
    },
    "postgresql-url": {
        "store": {
            "type": "postgresql",
            "postgresql": {"url": "postgresql+psycopg://sg:not-a-real-password@db:5432/sg"},
        },
    },
    "cluster-wide": {
        "operator": {"clusterWide": True},
        "driver": {"namespaces": ["spark-jobs", "spark-batch"]},
    },
    "namespaced": {
        "watchNamespaces": ["spark-jobs", "spark-batch"],
        "driver": {"persistentVolumeClaims": True},
        "store": {"sqlite": {"persistence": {"enabled": False}}},
    },
    "local-auth": {
        "service": {
            "authMode": "local",
            "executionMode": "local",
            "localAuth": {"existingSecret": "sparkglass-tokens"},
            "config": {"refresh_interval_seconds": 30, "retention_seconds": 86400},
        },
        "podDisruptionBudget": {"enabled": True, "minAvailable": None, "maxUnavailable": "50%"},
    },
}


def load_chart() -> Any:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a test extra")
    return helm.Chart.load(str(CHART))


def merged(base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over ``base``, maps merged key by key (as Helm merges values files)."""
    out = dict(base)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def render(values: dict[str, Any], *, required: bool = True) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included), like ``helm template``;
    ``values`` over :data:`REQUIRED` unless ``required`` is false."""
    given = merged(REQUIRED, values) if required else values
    return dict(load_chart().render(given, name=RELEASE, namespace=NAMESPACE))


def manifests(values: dict[str, Any], *, required: bool = True) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders for ``values`` (NOTES.txt left out)."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render(values, required=required).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[dict[str, Any]]]:
    """``rendered(variant)`` -> manifests, rendered once per variant per session."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def get(variant: str) -> list[dict[str, Any]]:
        if variant not in cache:
            cache[variant] = manifests(VARIANTS[variant])
        return cache[variant]

    return get

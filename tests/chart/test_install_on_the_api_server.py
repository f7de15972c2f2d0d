"""The chart installs on an API server as strict as a real one.

Every object each documented value set renders is created, in Helm's install order (the CRDs
first), on the test API server (tests/support/kube_apiserver.py): the CRDs pass the structural
and CEL-cost checks, every object's metadata (names, label and annotation keys and values,
annotation size) and ConfigMap and Secret sizes are what the API server accepts. A template
that renders but would be refused by a real cluster fails here.
"""

from __future__ import annotations

from typing import Any

import httpx
import kmock
import pytest

from tests.support.crd_schema import yaml_documents
from tests.support.kube_apiserver import StrictApiServer

from .conftest import CHART, NAMESPACE, VARIANTS, manifests


def _path(kube: StrictApiServer, obj: dict[str, Any]) -> str:
    """The collection URL of ``obj``'s kind, from the server's discovery data."""
    group, _, version = obj["apiVersion"].rpartition("/")
    for resource, info in kube.resources.items():
        if resource.group == group and resource.version == version and info.kind == obj["kind"]:
            base = f"/apis/{group}/{version}" if group else f"/api/{version}"
            if info.namespaced:
                namespace = obj["metadata"].get("namespace", NAMESPACE)
                return f"{base}/namespaces/{namespace}/{resource.plural}"
            return f"{base}/{resource.plural}"
    raise AssertionError(f"the API server does not serve {obj['apiVersion']} {obj['kind']}")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_every_rendered_object_is_accepted(kube: StrictApiServer, variant: str) -> None:
    kube.namespaces.setdefault(NAMESPACE, {})
    # A value set that asks for a ServiceMonitor needs the Prometheus Operator's CRD there.
    kube.resources["monitoring.coreos.com/v1/servicemonitors"] = kmock.ResourceInfo(
        kind="ServiceMonitor", namespaced=True, verbs={"create", "get", "list"}
    )
    docs = manifests(VARIANTS[variant])
    crds = [yaml_documents(p)[0] for p in sorted((CHART / "crds").glob("*.yaml"))]
    async with httpx.AsyncClient(base_url=str(kube.url).rstrip("/"), timeout=60) as api:
        for obj in [*crds, *docs]:
            if obj["metadata"].get("namespace"):
                kube.namespaces.setdefault(obj["metadata"]["namespace"], {})
            answer = await api.post(_path(kube, obj), json=obj)
            assert answer.status_code in (200, 201), (
                f"{variant}: {obj['kind']} {obj['metadata'].get('name')}: {answer.text[:2000]}"
            )

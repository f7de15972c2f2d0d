"""SparkApplications on the test API server: the example application, creating it, playing
the kubelet on its driver Pod, reading its status."""

from __future__ import annotations

from typing import Any

import yaml

from tests.operator.conftest import EXAMPLES_DIR, NAMESPACE, StrictApiServer

APPS = "sparkglass.io/v1alpha1/sparkapplications"
APPS_PATH = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications"


def example_app() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / "flights-sparkapplication.yaml").read_text())


async def create(kube: StrictApiServer, plural_path: str, body: dict[str, Any]) -> None:
    resp = await kube.post(plural_path, json=body)
    assert resp.status in (200, 201), await resp.text()


async def create_app(kube: StrictApiServer, body: dict[str, Any]) -> None:
    await create(kube, APPS_PATH, body)


async def patch(kube: StrictApiServer, path: str, body: dict[str, Any]) -> None:
    resp = await kube.patch(
        path, json=body, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert resp.status == 200, await resp.text()


async def set_pod_phase(kube: StrictApiServer, pod: str, phase: str, **status: Any) -> None:
    """Play the kubelet: move the driver Pod to ``phase``."""
    await patch(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/status",
        {"status": {"phase": phase, **status}},
    )


def app_status(kube: StrictApiServer, name: str) -> dict[str, Any]:
    obj = kube.stored(APPS, NAMESPACE, name)
    return (obj or {}).get("status") or {}


def state(kube: StrictApiServer, name: str) -> str | None:
    return (app_status(kube, name).get("applicationState") or {}).get("state")

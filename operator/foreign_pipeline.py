"""The pipeline of another operator's application, published for the service.

A Kubeflow or Apache Spark operator SparkApplication has no ``spec.pipeline``: its vertices
are what its driver serves at ``GET /api/v1/pipeline``. The service never dials a driver in
Kubernetes mode and holds no token, so the operator, which reaches only a driver Pod it
verified (:mod:`.foreign_apps`) over TLS pinned to the certificate of the Secret it created,
asks it and writes the answer, bounded, into a ConfigMap ``<app>-sparkglass-pipeline`` owned
by the application (deleted with it), as it publishes ``status.progress`` for its own
applications (:mod:`.driver_progress`). The service reads it as display data
(``service/foreign_apps.py``).

Asked when the application changes (the other operator writes its state as the driver starts
and runs) while its driver runs, until one answer is published for that driver Pod; a new
driver Pod (a restart) is asked again.
"""

from __future__ import annotations

import json
from typing import Any

import structlog

from sparkglass.crds.datasample import (
    FOREIGN_PIPELINE_KEY,
    FOREIGN_PIPELINE_SUFFIX,
    MAX_FOREIGN_PIPELINE_BYTES,
)
from sparkglass.runtime.control.client import AsyncControlClient, ControlError

from . import names
from .driver_access import DriverAccess
from .foreign_apps import ForeignApps
from .kube.cluster import CONFIG_MAPS, ApiError, Cluster, Conflict

log = structlog.get_logger(__name__)

#: Per-request timeout towards the driver, seconds (an event handler waits for it).
PIPELINE_TIMEOUT_S = 3.0
#: The most of the driver's answer read, bytes: four times what may be published (its JSON
#: is re-encoded compactly first); the driver is the application's code, and a bigger
#: answer could not be published anyway.
MAX_PIPELINE_ANSWER_BYTES = 4 * MAX_FOREIGN_PIPELINE_BYTES
#: The ConfigMap's role label (the service reads a ConfigMap by name and trusts it only
#: with this label and the operator's owner reference).
ROLE_PIPELINE = "pipeline"


def configmap_name(app: str) -> str:
    """``<app>-sparkglass-pipeline``."""
    return f"{app}{FOREIGN_PIPELINE_SUFFIX}"


def pipeline_json(description: dict[str, Any]) -> str | None:
    """The description as compact JSON, or None when it is over
    :data:`MAX_FOREIGN_PIPELINE_BYTES` (the driver is the application's own code; a
    ConfigMap lives in etcd and every reader receives it)."""
    text = json.dumps(description, separators=(",", ":"), sort_keys=True)
    return text if len(text.encode()) <= MAX_FOREIGN_PIPELINE_BYTES else None


def configmap_manifest(apps: ForeignApps, app: dict[str, Any], text: str) -> dict[str, Any]:
    """The ConfigMap holding ``text`` for ``app``: the operator's labels, owned by the
    application (as its control Secret: :meth:`ForeignApps.owner_reference`)."""
    meta = app["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {
                names.LABEL_APP: meta["name"],
                names.LABEL_ROLE: ROLE_PIPELINE,
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
            },
            "ownerReferences": [apps.owner_reference(app)],
        },
        "data": {FOREIGN_PIPELINE_KEY: text},
    }


async def read_pipeline(access: DriverAccess) -> dict[str, Any] | None:
    """The driver's pipeline description (camelCase JSON), or None when it cannot be had (no
    token, a refused or untrusted driver, no answer)."""
    if access.refusal or not access.token:
        return None
    try:
        async with AsyncControlClient(
            access.endpoint,
            access.token,
            timeout_s=PIPELINE_TIMEOUT_S,
            tls=access.tls,
            max_answer_bytes=MAX_PIPELINE_ANSWER_BYTES,
        ) as driver:
            description = await driver.pipeline()
    except (ControlError, ValueError) as exc:
        log.info("driver pipeline unavailable", endpoint=access.endpoint, reason=type(exc).__name__)
        return None
    return description.to_json_dict()


async def publish(
    cluster: Cluster, apps: ForeignApps, app: dict[str, Any], description: dict[str, Any]
) -> bool:
    """Write ``description`` into the application's ConfigMap (created, or patched when it
    differs). A ConfigMap at that name the operator did not make for this application is left
    alone (never overwritten). Returns whether the ConfigMap now holds it. Raises
    ``ApiError``."""
    meta = app["metadata"]
    text = pipeline_json(description)
    if text is None:
        log.warning(
            f"{apps.log_name} pipeline too large to publish",
            namespace=meta["namespace"],
            application=meta["name"],
            max_bytes=MAX_FOREIGN_PIPELINE_BYTES,
        )
        return False
    body = configmap_manifest(apps, app, text)
    name = configmap_name(meta["name"])
    current = await cluster.find(CONFIG_MAPS, meta["namespace"], name)
    if current is None:
        try:
            await cluster.create(CONFIG_MAPS, meta["namespace"], body)
        except Conflict:  # another pass made it a moment ago: the next event compares
            return False
        return True
    labels = (current.get("metadata") or {}).get("labels") or {}
    if labels != body["metadata"]["labels"] or not apps.controls(current, app):
        log.warning(
            f"{apps.log_name} pipeline configmap not ours",
            namespace=meta["namespace"],
            application=meta["name"],
            configmap=name,
        )
        return False
    if (current.get("data") or {}).get(FOREIGN_PIPELINE_KEY) != text:
        await cluster.patch(CONFIG_MAPS, meta["namespace"], name, {"data": body["data"]})
    return True


async def publish_from_driver(cluster: Cluster, apps: ForeignApps, app: dict[str, Any]) -> str:
    """Ask the running driver of ``app`` for its pipeline and publish it. Returns the uid of
    the driver Pod whose answer is published, or ``""`` when nothing was (no running driver
    yet, no answer, a refusal): the caller tries again at the application's next event.
    Raises ``ApiError``."""
    pod = await apps.find_driver(cluster, app)
    if isinstance(pod, str):
        return ""
    try:
        access = await apps.driver_access(cluster, app, pod)
    except ValueError:  # no sg-control port: its DataSamples say so
        return ""
    description = await read_pipeline(access)
    if description is None or not await publish(cluster, apps, app, description):
        return ""
    return str((pod.get("metadata") or {}).get("uid") or "")


__all__ = [
    "ROLE_PIPELINE",
    "ApiError",
    "configmap_manifest",
    "configmap_name",
    "pipeline_json",
    "publish",
    "publish_from_driver",
    "read_pipeline",
]

"""Where a SparkApplication's driver listens, and its control token: only from what we own.

The operator sends the control token (``Authorization: Bearer``) to the driver, so both the
address and the token must come from objects this operator created for the application, not
from anything a user can write. A SparkApplication's ``status.driverInfo`` is output only:
anyone allowed to patch ``sparkapplications/status`` could otherwise point
``controlEndpoint`` at a listener of theirs and ``controlSecretName`` at any Secret with a
``token`` key, and the operator would deliver that token.

What is trusted:

* the driver Pod ``<app>-driver`` when it carries the operator's labels (application, role
  ``driver``, managed-by) and a controller owner reference to this application's uid (the
  API server sets ``status.podIP``; the control port is the Pod's own ``control`` port, the
  one the driver was started with);
* the Secret ``<app>-control-token`` (its name derived from the application, never read
  from status or an annotation) when it carries the same labels and owner reference.
"""

from __future__ import annotations

from typing import Any

from . import names
from .cluster import PODS, SECRETS
from .context import OperatorContext


def owned_by(obj: dict[str, Any], app: dict[str, Any], role: str) -> bool:
    """Whether ``obj`` is a child the operator created for ``app`` with ``role``: our labels
    and a controller owner reference to the application's uid (a copy made by hand, or an
    object left over from an earlier application of the same name, does not qualify)."""
    meta = obj.get("metadata") or {}
    app_meta = app.get("metadata") or {}
    uid = app_meta.get("uid")
    labels = meta.get("labels") or {}
    if not uid or labels.get(names.LABEL_APP) != app_meta.get("name"):
        return False
    if labels.get(names.LABEL_ROLE) != role:
        return False
    if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
        return False
    return any(
        ref.get("uid") == uid
        and ref.get("kind") == names.APP_KIND
        and ref.get("apiVersion") == names.API_VERSION
        and ref.get("controller") is True
        for ref in meta.get("ownerReferences") or []
    )


def control_endpoint(pod: dict[str, Any]) -> str | None:
    """``http://<podIP>:<control port>`` of a running driver Pod, or None when it is not
    running, is being deleted, has no IP yet or declares no ``control`` port."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        return None
    port = next(
        (
            p.get("containerPort")
            for c in (pod.get("spec") or {}).get("containers") or []
            for p in c.get("ports") or []
            if p.get("name") == "control"
        ),
        None,
    )
    if not isinstance(port, int):
        return None
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"http://{host}:{port}"


async def driver_access(
    ctx: OperatorContext, app: dict[str, Any]
) -> tuple[str, dict[str, Any] | None] | str:
    """``(control endpoint, control-token Secret or None)`` of ``app``'s running driver, or
    a message saying why there is none (no owned driver Pod, or it is not running yet).

    The Secret is None when ``<app>-control-token`` is missing or not owned by ``app``.
    Raises ``ApiError`` when the API server fails.
    """
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    pod = await ctx.cluster.find(PODS, namespace, names.driver_pod_name(name))
    if pod is None or not owned_by(pod, app, names.ROLE_DRIVER):
        return f"application {name!r} is not running (no driver Pod of its own)"
    endpoint = control_endpoint(pod)
    if endpoint is None:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        return f"application {name!r} is not running (driver Pod {phase})"
    secret = await ctx.cluster.find(SECRETS, namespace, names.secret_name(name))
    if secret is not None and not owned_by(secret, app, names.ROLE_CONTROL_TOKEN):
        secret = None
    return endpoint, secret

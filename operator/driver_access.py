"""Where a SparkApplication's driver listens, and its control token: only from what we own.

The operator sends the control token (``Authorization: Bearer``) to the driver, so both the
address and the token must come from objects this operator created for the application (the
driver Pod and the Secret ``<app>-control-token``, each with our labels and a controller
owner reference to the application's uid: :func:`owned_by`), not from anything a user can
write: ``status.driverInfo`` is output only, or whoever may patch it could have the token
sent to a listener of theirs. The client pins the Secret's certificate (:func:`pinned_access`).
The rules: operator/README.md, "Trust boundary".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sparkglass.runtime.control.client import ControlTLS

from . import children, names
from .certificates import read_stored_certificate, server_name
from .context import OperatorContext
from .kube.cluster import PODS, SECRETS


@dataclass(frozen=True)
class DriverAccess:
    """How to reach a running driver: ``endpoint`` (``https://<podIP>:<port>``, or
    ``http://`` for a driver started without TLS), ``token`` (None when the Secret is
    missing, not ours, or has no token), ``tls`` (the pinned certificate for ``https``) and
    ``refusal``: why the token must not be sent at all (None: go ahead)."""

    endpoint: str
    token: str | None
    tls: ControlTLS | None
    refusal: str | None = None


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


def serves_tls(pod: dict[str, Any]) -> bool:
    """Whether the operator created ``pod`` with the control TLS volume (then its driver
    serves HTTPS only, with the certificate of the application's Secret)."""
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(v.get("name") == names.CONTROL_TLS_VOLUME for v in volumes)


def control_endpoint(pod: dict[str, Any]) -> str | None:
    """``https://<podIP>:<control port>`` of a running driver Pod (``http://`` when it was
    started without TLS), or None when it is not running, is being deleted, has no IP yet
    or declares no ``control`` port."""
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
    scheme = "https" if serves_tls(pod) else "http"
    return f"{scheme}://{host}:{port}"


#: ``driver_access``'s ``pod`` when the caller has not read the driver Pod.
UNREAD: Any = object()


async def driver_access(
    ctx: OperatorContext, app: dict[str, Any], *, pod: Any = UNREAD
) -> DriverAccess | str:
    """How to reach ``app``'s running driver (:class:`DriverAccess`), or a message saying
    why there is none (no owned driver Pod, or it is not running yet). ``pod``: the driver
    Pod (None: there is none) when the caller holds it from a watch, so it is not read again.
    The control Secret is always read from the API: Secrets are not watched (list and watch
    of Secrets is a right the operator does not take), and one changed since the last full
    pass (its owner reference gone, say) must not be used.

    What is trusted: the driver Pod ``<app>-driver`` when it carries the operator's labels
    (application, role ``driver``, managed-by) and a controller owner reference to this
    application's uid (the API server sets ``status.podIP``; the control port is the Pod's
    own ``control`` port, the one the driver was started with); the Secret
    ``<app>-control-token`` (its name derived from the application, never read from status or
    an annotation) when it carries the same labels and owner reference. A driver Pod the
    operator created with the control TLS volume serves HTTPS with the certificate in that
    Secret, and the client pins exactly that certificate (``ca_pem`` = the Secret's
    ``tls.crt``, ``server_name`` = ``<app>-driver.<namespace>.svc``), so a listener at the
    driver's address with any other certificate, even one a cluster CA signed for the same
    name, fails the handshake before the token is sent. A driver Pod without that volume was
    started by an operator older than control TLS and speaks plain HTTP: the token is not
    sent to it unless the operator runs with ``--allow-cleartext-control`` (``refusal`` says
    to restart the application, whose new driver gets the certificate).

    The token is None when ``<app>-control-token`` is missing, not owned by ``app`` or has
    no ``token``. ``refusal`` is set when the driver serves HTTPS but the Secret holds no
    usable certificate (unreadable or expired), or when it speaks plain HTTP and
    ``allow_cleartext_control`` is off. Raises ``ApiError`` when the API server fails.
    """
    name, namespace = app["metadata"]["name"], app["metadata"]["namespace"]
    if pod is UNREAD:
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
    token = children.secret_token(secret) if secret is not None else None
    restart = (
        f"restart the application (change its spec, or delete and re-create the "
        f"SparkApplication {name!r}) so that its driver starts with a new certificate"
    )
    if not serves_tls(pod):
        if ctx.config.allow_cleartext_control:
            return DriverAccess(endpoint, token, None)
        return DriverAccess(
            endpoint,
            token,
            None,
            refusal=(
                f"the driver of {name!r} was started without TLS (by an operator older than "
                f"control TLS) and the control token is not sent in clear text: restart the "
                f"application so that its driver serves HTTPS, or run the operator with "
                f"--allow-cleartext-control"
            ),
        )
    return pinned_access(
        endpoint,
        token,
        secret,
        name,
        server_name(names.service_name(name), namespace),
        missing=(
            f"the driver of {name!r} serves HTTPS but its control Secret "
            f"{names.secret_name(name)!r} holds no certificate to verify it with"
        ),
        restart=restart,
    )


def pinned_access(
    endpoint: str,
    token: str | None,
    secret: dict[str, Any] | None,
    name: str,
    tls_server_name: str,
    *,
    missing: str,
    restart: str,
) -> DriverAccess:
    """:class:`DriverAccess` to ``endpoint`` pinned to the certificate in the operator's own
    control ``secret`` and checked against ``tls_server_name``; a refusal instead when the
    Secret holds none (``missing``), an unreadable one, or an expired one (each followed by
    ``restart``: what the user does about it). Application ``name`` is for the messages."""
    try:
        stored = read_stored_certificate(children.secret_tls_data(secret)) if secret else None
    except ValueError as exc:
        return DriverAccess(endpoint, token, None, refusal=f"control Secret of {name!r}: {exc}")
    if stored is None:
        return DriverAccess(endpoint, token, None, refusal=f"{missing}; {restart}")
    if stored.not_after <= datetime.now(UTC):
        return DriverAccess(
            endpoint,
            token,
            None,
            refusal=(
                f"the control certificate of {name!r} expired at "
                f"{stored.not_after.isoformat()}; {restart}"
            ),
        )
    return DriverAccess(
        endpoint, token, ControlTLS(ca_pem=stored.cert_pem, server_name=tls_server_name)
    )

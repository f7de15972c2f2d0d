"""The user's Pod settings (``spec.driver`` / ``spec.executor``, ``spec.volumes``) merged
under the operator's own parts, and the restricted security defaults.

sparkglass creates the driver Pod itself and hands Spark an executor Pod template
(``spark.kubernetes.executor.podTemplateFile``), so every setting applies without a
mutating webhook. What the operator owns cannot be replaced by a user addition
(:func:`check_pod_settings`), and every Pod gets the Pod Security Standards' ``restricted``
defaults with the user's security contexts merged over them (:func:`pod_security_context`,
:func:`container_security_context`). The rules: operator/README.md, "Pod settings".
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from . import names

if TYPE_CHECKING:
    from .specs import PodSettings, SparkApplicationSpec

#: Names of the main containers (Spark's own executor container name, so Spark's and the
#: template's container are one).
DRIVER_CONTAINER = "spark-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
#: The driver's ConfigMap volume (spark-defaults.conf, pipeline, executor template).
CONFIG_VOLUME = "sparkglass-config"
#: ConfigMap key of the executor Pod template, read by the driver from ``CONFIG_DIR``.
EXECUTOR_TEMPLATE_KEY = "executor-pod-template.yaml"

#: Volume names the operator or Spark uses: ours, and Spark's executor local dirs and conf.
RESERVED_VOLUMES = frozenset({CONFIG_VOLUME, names.CONTROL_TLS_VOLUME})
RESERVED_VOLUME_PREFIXES = ("spark-local-dir-", "spark-conf-volume")
#: Mount paths the operator uses (a user mount there, or below, would shadow its files).
RESERVED_MOUNT_PATHS = (names.CONFIG_DIR, names.CONTROL_TLS_DIR)
#: Driver environment variables the operator sets (the control token, port, identity, conf).
RESERVED_ENV = frozenset(
    {
        names.ENV_CONTROL_TOKEN,
        names.ENV_CONTROL_PORT,
        names.ENV_PIPELINE_FILE,
        names.ENV_APPLICATION,
        names.ENV_NAMESPACE,
        "SPARK_CONF_DIR",
    }
)

#: Pod-level defaults of Pod Security ``restricted``.
POD_SECURITY_DEFAULTS: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
#: Container-level defaults of Pod Security ``restricted``.
CONTAINER_SECURITY_DEFAULTS: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def merged(defaults: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    """``user`` over ``defaults``, key by key into nested objects (a list is replaced)."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in defaults.items()}
    for key, value in (user or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def pod_security_context(settings: PodSettings, **operator: Any) -> dict[str, Any]:
    """The Pod ``securityContext``: restricted defaults, ``operator`` extras (the driver's
    ``fsGroup``), the user's ``podSecurityContext`` over both.

    Security defaults (Pod Security Standards, profile ``restricted``): every Pod gets
    ``runAsNonRoot: true`` and seccomp ``RuntimeDefault``; every container (main, init,
    sidecar) ``allowPrivilegeEscalation: false`` and ``capabilities.drop: [ALL]``
    (:func:`container_security_context`). The user's ``podSecurityContext`` /
    ``securityContext`` are merged over them key by key, so a user setting wins where it is
    set and the defaults apply where it is not. The image must run as a numeric non-root
    user (``USER 10001`` in the project's image) or the spec must set
    ``podSecurityContext.runAsUser``."""
    return merged({**POD_SECURITY_DEFAULTS, **operator}, settings.pod_security_context)


def container_security_context(user: dict[str, Any] | None) -> dict[str, Any]:
    """A container ``securityContext``: restricted defaults, ``user``'s over them."""
    return merged(CONTAINER_SECURITY_DEFAULTS, user)


def extra_container(container: dict[str, Any]) -> dict[str, Any]:
    """An init container or sidecar as written, with the restricted defaults under its own
    ``securityContext``."""
    return {
        **container,
        "securityContext": container_security_context(container.get("securityContext")),
    }


def user_volumes(spec: SparkApplicationSpec, settings: PodSettings) -> list[dict[str, Any]]:
    """The ``spec.volumes`` that ``settings`` mounts (main container, init containers and
    sidecars), in ``spec.volumes`` order: a volume only the driver uses (a ReadWriteOnce
    claim) stays out of the executor template."""
    used = {m.get("name") for m in _all_mounts(settings)}
    return [v for v in spec.volumes if v.get("name") in used]


def scheduling(settings: PodSettings) -> dict[str, Any]:
    """The Pod ``spec`` fields for where and how it is scheduled (unset ones omitted)."""
    out: dict[str, Any] = {}
    if settings.tolerations:
        out["tolerations"] = list(settings.tolerations)
    if settings.affinity:
        out["affinity"] = settings.affinity
    if settings.priority_class_name:
        out["priorityClassName"] = settings.priority_class_name
    if settings.scheduler_name:
        out["schedulerName"] = settings.scheduler_name
    return out


def executor_pod_template(spec: SparkApplicationSpec) -> dict[str, Any]:
    """The executor Pod template (``spark.kubernetes.executor.podTemplateFile``).

    Spark builds each executor Pod on it: it keeps the template's Pod and container security
    contexts, volumes, mounts, tolerations, affinity, scheduler, priority class, init
    containers, sidecars and the ``valueFrom``/``envFrom`` variables, and sets the image,
    resources, ports, plain environment, labels and name itself (from the Spark properties).
    """
    x = spec.executor
    container: dict[str, Any] = {
        "name": EXECUTOR_CONTAINER,
        "securityContext": container_security_context(x.security_context),
    }
    env = [e.manifest() for e in x.env if e.value_from is not None]
    if env:
        container["env"] = env
    if x.env_from:
        container["envFrom"] = list(x.env_from)
    if x.volume_mounts:
        container["volumeMounts"] = list(x.volume_mounts)
    pod_spec: dict[str, Any] = {
        "securityContext": pod_security_context(x),
        "containers": [container, *(extra_container(c) for c in x.sidecars)],
        **scheduling(x),
    }
    if x.init_containers:
        pod_spec["initContainers"] = [extra_container(c) for c in x.init_containers]
    volumes = user_volumes(spec, x)
    if volumes:
        pod_spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "spec": pod_spec}


def check_pod_settings(settings: PodSettings, volumes: list[dict[str, Any]], *, role: str) -> None:
    """Refuse user additions that collide with the operator's parts of a ``role`` Pod
    (``driver`` or ``executor``). Raises ``ValueError`` naming the field (relative to
    ``spec.<role>``) and what it collides with; ``volumes`` is ``spec.volumes``.

    What the operator owns: its volumes and mount paths (the config directory, the control
    TLS files), the driver's control and identity environment variables, its container
    names, ports, labels and owner references. The spec then ends ``InvalidSpec``."""
    known = {v.get("name") for v in volumes}
    main = DRIVER_CONTAINER if role == "driver" else EXECUTOR_CONTAINER
    if role == "driver":
        for i, e in enumerate(settings.env):
            if e.name in RESERVED_ENV:
                raise ValueError(f"env[{i}].name: {e.name} is set by the operator")
    _check_mounts(settings.volume_mounts, "volumeMounts", known)
    seen: set[Any] = {main}
    for field, containers in (
        ("initContainers", settings.init_containers),
        ("sidecars", settings.sidecars),
    ):
        for i, c in enumerate(containers):
            name = c.get("name")
            if name in seen:
                raise ValueError(
                    f"{field}[{i}].name: {name!r} is used by another container of the Pod"
                    + (" (the operator's)" if name == main else "")
                )
            seen.add(name)
            _check_mounts(c.get("volumeMounts") or [], f"{field}[{i}].volumeMounts", known)


def check_volumes(volumes: list[dict[str, Any]]) -> None:
    """Refuse ``spec.volumes`` named like the operator's or Spark's own volumes. Raises
    ``ValueError`` naming the entry."""
    for i, v in enumerate(volumes):
        name = str(v.get("name") or "")
        if name in RESERVED_VOLUMES or name.startswith(RESERVED_VOLUME_PREFIXES):
            raise ValueError(
                f"[{i}].name: {name!r} is reserved (the operator's "
                f"{', '.join(sorted(RESERVED_VOLUMES))}"
                f" and Spark's {', '.join(p + '*' for p in RESERVED_VOLUME_PREFIXES)})"
            )


def _check_mounts(mounts: list[dict[str, Any]], field: str, known: set[Any]) -> None:
    for i, m in enumerate(mounts):
        name = m.get("name")
        if name not in known:
            raise ValueError(f"{field}[{i}].name: no volume {name!r} in spec.volumes")
        path = posixpath.normpath(str(m.get("mountPath") or "/"))
        for reserved in RESERVED_MOUNT_PATHS:
            if path == reserved or path.startswith(reserved + "/"):
                raise ValueError(
                    f"{field}[{i}].mountPath: {path} is reserved for the operator's files "
                    f"({reserved})"
                )


def _all_mounts(settings: PodSettings) -> list[dict[str, Any]]:
    mounts = list(settings.volume_mounts)
    for c in [*settings.init_containers, *settings.sidecars]:
        mounts += c.get("volumeMounts") or []
    return mounts

"""What a SparkApplication's Pods may run as, and which Secrets they may not reach.

The operator creates the driver Pod (and, through the executor Pod template and the Spark
conf, the executors) with its own rights, so whoever may create a SparkApplication would
otherwise borrow those rights: run the driver as any ServiceAccount of the namespace (the
operator's own can read every Secret it watches), or mount any Secret, including the
``<app>-control-token`` Secret of another application (its control token and TLS key). Two
rules close that, checked before anything is created and on every pass after:
ServiceAccounts from an allowlist (:func:`check_service_accounts`) and no control-token
Secret (:func:`secret_references`). A refusal ends the submission (``SUBMISSION_FAILED``)
until the spec changes: operator/README.md, "Whose rights the Pods get".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from . import names
from .specs import SparkApplicationSpec

#: The environment variable holding the allowlist (comma-separated ServiceAccount names),
#: read by ``sparkglass operator run`` (``--allowed-service-account``).
ALLOWED_SERVICE_ACCOUNTS_ENV = "SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS"
#: The allowlist without configuration: the chart's Spark driver ServiceAccount
#: (``driver.serviceAccount.name``).
DEFAULT_ALLOWED_SERVICE_ACCOUNTS: tuple[str, ...] = ("spark-driver",)
#: The account a Pod runs as when it names none; always accepted (see the module docstring).
DEFAULT_SERVICE_ACCOUNT = "default"
#: Suffix of every Secret the operator creates for an application (``names.secret_name``).
CONTROL_SECRET_SUFFIX = names.secret_name("")
#: Spark properties that mount (``secrets.<name>``) or read (``secretKeyRef.<VAR>``) Secrets.
_SPARK_SECRET_MOUNT = re.compile(r"^spark\.kubernetes\.(driver|executor)\.secrets\.(.+)$")
_SPARK_SECRET_KEY_REF = re.compile(r"^spark\.kubernetes\.(driver|executor)\.secretKeyRef\..+$")
#: A ServiceAccount name is a DNS-1123 subdomain.
_DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


class PodPrivilegeRefused(ValueError):
    """The spec asks for a ServiceAccount or a Secret its Pods may not have; ``field`` is the
    spec path (``spec.driver.serviceAccount``...), the message says why and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_service_accounts(
    text: str, *, setting: str = ALLOWED_SERVICE_ACCOUNTS_ENV
) -> tuple[str, ...]:
    """The allowlist in ``text`` (comma-separated names; blanks ignored). Raises
    ``ValueError`` naming ``setting`` and the bad name when one is not a ServiceAccount name."""
    found = [part.strip() for part in text.split(",") if part.strip()]
    for name in found:
        if len(name) > 253 or not _DNS_1123_SUBDOMAIN.match(name):
            raise ValueError(
                f"{setting}: {name!r} is not a ServiceAccount name (a DNS-1123 subdomain: "
                "lower-case letters, digits, '-' and '.')"
            )
    return tuple(dict.fromkeys(found))


def check_service_accounts(spec: SparkApplicationSpec, allowed: tuple[str, ...]) -> None:
    """Raise :class:`PodPrivilegeRefused` when a Pod would run as an account not allowed.

    ``spec.driver.serviceAccount`` and ``spec.executor.serviceAccount`` must be empty, the
    namespace's ``default`` account (what a Pod gets when it names none, so naming it grants
    nothing new), or one of ``allowed`` (``sparkglass operator run
    --allowed-service-account`` or ``SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS``, chart value
    ``operator.allowedServiceAccounts``; by default the chart's driver account,
    ``spark-driver``). The Spark properties that name them
    (``spark.kubernetes.authenticate.{driver,executor}.serviceAccountName``) are the
    operator's (``specs.OPERATOR_OWNED_CONF_KEYS``), so ``sparkConf`` cannot go around this.
    """
    for role, settings in (("driver", spec.driver), ("executor", spec.executor)):
        account = settings.service_account
        if not account or account == DEFAULT_SERVICE_ACCOUNT or account in allowed:
            continue
        raise PodPrivilegeRefused(
            f"spec.{role}.serviceAccount",
            f"ServiceAccount {account!r} is not allowed; allowed: "
            f"{', '.join(allowed) or '(none)'} or unset (the namespace's "
            f"{DEFAULT_SERVICE_ACCOUNT!r} account). The list is the operator's "
            f"{ALLOWED_SERVICE_ACCOUNTS_ENV} (chart value operator.allowedServiceAccounts)",
        )


def secret_references(spec: SparkApplicationSpec) -> Iterator[tuple[str, str]]:
    """Every Secret the application's Pods would reference, as ``(spec field, name)``:
    ``spec.volumes`` including projected sources and volume plugins' ``secretRef``s, ``env``
    ``valueFrom.secretKeyRef``, ``envFrom.secretRef`` of the main, init and sidecar
    containers, ``imagePullSecrets``, and Spark's own secret properties
    (``spark.kubernetes.{driver,executor}.secrets.<name>``,
    ``spark.kubernetes.{driver,executor}.secretKeyRef.<VAR>=<name>:<key>``).

    None may name a Secret the operator creates for applications: by name
    (``*-control-token``, every application's Secret name; the suffix is reserved:
    :func:`check_secret_names`) and, read from the API, by label
    (``sparkglass.io/role: control-token`` or ``app.kubernetes.io/managed-by:
    sparkglass-operator``: :func:`is_operator_secret`). The operator mounts an application's
    own Secret itself (its ``tls.crt``/``tls.key`` and the token variable); a user reference
    is never needed.
    """
    for i, volume in enumerate(spec.volumes):
        yield from _walk(volume, f"spec.volumes[{i}]")
    for role, settings in (("driver", spec.driver), ("executor", spec.executor)):
        base = f"spec.{role}"
        for i, env in enumerate(settings.env):
            if env.value_from is not None:
                yield from _walk(env.value_from, f"{base}.env[{i}].valueFrom")
        for i, source in enumerate(settings.env_from):
            yield from _walk(source, f"{base}.envFrom[{i}]")
        for field, containers in (
            ("initContainers", settings.init_containers),
            ("sidecars", settings.sidecars),
        ):
            for i, container in enumerate(containers):
                for key in ("env", "envFrom"):
                    yield from _walk(container.get(key) or [], f"{base}.{field}[{i}].{key}")
    for i, name in enumerate(spec.image_pull_secrets):
        yield f"spec.imagePullSecrets[{i}]", name
    for key, value in spec.spark_conf.items():
        if m := _SPARK_SECRET_MOUNT.match(key):
            yield f"spec.sparkConf[{key}]", m.group(2)
        elif _SPARK_SECRET_KEY_REF.match(key):
            yield f"spec.sparkConf[{key}]", value.split(":", 1)[0]


def _walk(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """Secret names in a ``core/v1`` fragment: a ``secretName`` string, or the ``name`` of an
    object under any key naming a secret (``secret``, ``secretRef``, ``secretKeyRef``,
    ``nodePublishSecretRef``, ...). Generic on purpose: a volume plugin added to Kubernetes
    later with its own ``fooSecretRef`` is still caught."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        here = f"{path}.{key}"
        if key == "secretName" and isinstance(value, str):
            yield here, value
        elif (
            "secret" in str(key).lower()
            and isinstance(value, dict)
            and isinstance(value.get("name"), str)
        ):
            yield f"{here}.name", value["name"]
        yield from _walk(value, here)


def is_control_secret_name(name: str) -> bool:
    """Whether ``name`` is (or could be) an application's control-token Secret."""
    return name.endswith(CONTROL_SECRET_SUFFIX)


def is_operator_secret(secret: dict[str, Any]) -> bool:
    """Whether a Secret read from the API carries the labels the operator puts on the
    Secrets it creates for applications."""
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(names.LABEL_ROLE) == names.ROLE_CONTROL_TOKEN
        or labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY
    )


def refuse_secret(field: str, name: str, why: str) -> PodPrivilegeRefused:
    return PodPrivilegeRefused(
        field,
        f"Secret {name!r} {why}: the operator creates it for an application (control token "
        "and TLS key), and no SparkApplication's Pods may mount or read it",
    )


def check_secret_names(spec: SparkApplicationSpec) -> list[tuple[str, str]]:
    """Raise :class:`PodPrivilegeRefused` for a reference by the reserved name pattern; return
    the other references (``(field, name)``), whose labels the caller checks in the API."""
    others = []
    for field, name in secret_references(spec):
        if is_control_secret_name(name):
            why = f"is a control-token Secret (*{CONTROL_SECRET_SUFFIX})"
            raise refuse_secret(field, name, why)
        others.append((field, name))
    return others

"""Who is calling and what they may do: the types every auth mode shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Permission(StrEnum):
    """What a request needs, mapped per mode to a role (local) or an RBAC verb (Kubernetes)."""

    READ = "read"
    """Read applications and cached results: ``get`` on ``datasamples.sparkglass.io``."""
    TRIGGER = "trigger"
    """Start a sampling round: ``create`` on ``datasamples.sparkglass.io``."""
    ADMIN = "admin"
    """Register applications, read the audit trail: ``update`` on
    ``sparkapplications.sparkglass.io``."""
    READ_KUBEFLOW_APPLICATIONS = "read-kubeflow-applications"
    """See a Kubeflow spark-operator application (Kubernetes mode), on top of ``read``:
    ``get`` on ``sparkapplications.sparkoperator.k8s.io``."""
    READ_APACHE_SPARK_APPLICATIONS = "read-apache-spark-applications"
    """See an Apache Spark operator application (Kubernetes mode), on top of ``read``:
    ``get`` on ``sparkapplications.spark.apache.org``."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``role`` is set in local mode only."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    role: str | None = None
    extra: dict[str, list[str]] = field(default_factory=dict, compare=False, hash=False)
    #: When the credential stops being valid (ms since the epoch), if it expires: caches of
    #: this principal must not outlive it.
    expires_at: int | None = field(default=None, compare=False, hash=False)


class AuthBackendError(Exception):
    """The identity provider could not be asked (e.g. the API server is unreachable).

    The message is safe to show: it never holds the token.
    """


class Authenticator(Protocol):
    """One auth mode: turn a bearer token into a principal and decide permissions."""

    def authenticate(self, token: str, audiences: tuple[str, ...] = ()) -> Principal | None:
        """The caller owning ``token``, or ``None`` when it is not valid (or, with
        ``audiences``, not bound to one of them where tokens carry audiences).

        Raises :class:`AuthBackendError` when validity cannot be decided.
        """
        ...

    def authorize(self, principal: Principal, namespace: str, permission: Permission) -> bool:
        """Whether ``principal`` has ``permission`` in ``namespace``.

        Raises :class:`AuthBackendError` when it cannot be decided.
        """
        ...

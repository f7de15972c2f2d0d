"""Another operator's Spark applications as DataSample targets: the rule both kinds share.

The Kubeflow spark-operator (:mod:`.kubeflow`) and the Apache Spark Kubernetes operator
(:mod:`.apache_spark`), not sparkglass, create the driver Pod of their applications, so the
rule of :mod:`.driver_access` ("only children we created") cannot hold for the Pod. The
operator still takes nothing a user can write as an address or a Secret name: the
application is read from the API (:meth:`ForeignApps.read_application`), its driver Pod must
carry that operator's driver labels and an owner reference to the application's uid
(:meth:`ForeignApps.is_driver_pod`), and the token and the pinned certificate come only from
the Secret this operator creates (:meth:`ForeignApps.ensure_control_secret`). What differs
between the two operators (names, labels, where the state is, whether the owner reference is
a controller one, where the user declares the port) is a :class:`ForeignApps` value; the
rest is written once here. The trust rule, what it proves and its limits: docs/pipelines.md,
"Kubeflow spark-operator applications" and "Apache Spark Kubernetes operator applications".
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from sparkglass.crds.datasample import KUBEFLOW_MAX_NAME_LENGTH, KUBEFLOW_SECRET_SUFFIX
from sparkglass.runtime.contract.sampling_settings import PREFIX, SamplingSettings

from . import children, names
from .certificates import (
    ControlCertificate,
    issue_control_certificate,
    reissue_reason,
    server_name,
)
from .driver_access import DriverAccess, pinned_access
from .kube.cluster import PODS, SECRETS, ApiError, Cluster, Conflict, Kind, NotFound

log = structlog.get_logger(__name__)

#: Spark's role label on the driver Pod (both operators' drivers are made by Spark's own
#: Kubernetes submission code, which sets it).
LABEL_SPARK_ROLE = "spark-role"
SPARK_ROLE_DRIVER = "driver"
#: The container port the user declares on the driver for the control endpoint (a port name
#: is at most 15 characters).
CONTROL_PORT_NAME = "sg-control"
#: Suffix of the control Secret of an application, and the longest application name (the
#: certificate's names are made from ``<name>-sparkglass-control``, a 63-character DNS label).
SECRET_SUFFIX = KUBEFLOW_SECRET_SUFFIX
MAX_APP_NAME = KUBEFLOW_MAX_NAME_LENGTH
#: The conf key that opts an application in (the driver reads the same key).
SAMPLING_ENABLED_KEY = PREFIX + "enabled"
SAMPLING_WINDOW_KEY = PREFIX + "sampling-window"


class NotEnabled(Exception):
    """The operator may not read the other operator's applications (403): the chart value
    that grants it is off. The message says so."""


def secret_name(app: str) -> str:
    """``<app>-sparkglass-control``: the application's control Secret."""
    return f"{app}{SECRET_SUFFIX}"


def tls_server_name(app: str, namespace: str) -> str:
    """The name the certificate is checked against: ``<app>-sparkglass-control.<ns>.svc``
    (a Service of that name, if the user adds one, is reachable by it too)."""
    return server_name(secret_name(app), namespace)


def spark_conf(app: dict[str, Any]) -> dict[str, str]:
    """The application's ``spec.sparkConf`` (string keys and values only); both operators
    keep it there."""
    conf = (app.get("spec") or {}).get("sparkConf") or {}
    if not isinstance(conf, dict):
        return {}
    return {k: str(v) for k, v in conf.items() if isinstance(k, str) and v is not None}


def sampling_settings(app: dict[str, Any]) -> SamplingSettings:
    """The ``spark.sparkglass.sampling.*`` settings of the application's ``sparkConf`` (off
    unless it sets ``enabled=true``); raises ``SamplingSettingsError`` naming the key.
    Whether a DataSample fits them is :mod:`.sample_fit`'s to say."""
    return SamplingSettings.from_conf(spark_conf(app))


def sampling_requested(app: dict[str, Any]) -> bool:
    """Whether the application's ``sparkConf`` opts in to sampling (a control Secret is
    created only for those). Looser than :func:`sampling_settings` on purpose: an opted-in
    application whose other sampling keys are invalid still gets its Secret, which its
    driver Pod reads the token from (without it the Pod would not start at all); its
    DataSamples fail ``InvalidApplication`` (:mod:`.sample_fit`)."""
    return spark_conf(app).get(SAMPLING_ENABLED_KEY, "").strip().lower() == "true"


def _running(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    return not deleting and status.get("phase") == "Running" and bool(status.get("podIP"))


def control_port(pod: dict[str, Any]) -> int | None:
    """The container port named :data:`CONTROL_PORT_NAME` of ``pod`` (any container of it),
    or None."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            number = port.get("containerPort")
            if port.get("name") == CONTROL_PORT_NAME and isinstance(number, int):
                return number if 0 < number < 65536 else None
    return None


def control_endpoint(pod: dict[str, Any]) -> str | None:
    """``https://<podIP>:<sg-control port>`` of a running driver Pod; None when it does not
    run or declares no such port. Always ``https``: the token never travels in clear."""
    port = control_port(pod)
    if port is None or not _running(pod):
        return None
    ip = str((pod.get("status") or {}).get("podIP"))
    host = f"[{ip}]" if ":" in ip else ip
    return f"https://{host}:{port}"


@dataclass(frozen=True)
class ForeignApps:
    """One other operator's ``SparkApplication`` kind and how its driver is recognised.

    * ``group``, ``version``, ``kind``, ``plural``: where the API serves the applications;
    * ``owner``: how messages name the other operator (``"Kubeflow"``): its applications
      are ``"<owner> application"`` (:attr:`title`);
    * ``app_label``: the label that operator puts on the driver Pod, valued with the
      application's name (Spark's own ``spark-app-name`` label carries ``spark.app.name``,
      which need not be the resource's name, so it is not used);
    * ``controller_owner``: whether the driver Pod's owner reference to the application must
      be a controller one (Kubeflow sets ``controller: true``; the Apache operator sets no
      ``controller`` field at all, so requiring it would refuse every genuine driver);
    * ``state``: the application's state as its operator writes it (only ever used to decide
      whether to wait); ``running``: the states in which a driver is worth looking for;
      ``over``: those after which none comes back;
    * ``ports_field``: where the user declares the ``sg-control`` port;
    * ``chart_value``: the chart value that lets the operator read these applications;
    * ``log_name``: the short name in log lines.
    """

    group: str
    version: str
    kind: str
    plural: str
    owner: str
    app_label: str
    controller_owner: bool
    state: Callable[[dict[str, Any]], str]
    running: frozenset[str]
    over: frozenset[str]
    ports_field: str
    chart_value: str
    log_name: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def title(self) -> str:
        return f"{self.owner} application"

    @property
    def kind_title(self) -> str:
        """``"<owner> SparkApplication"``."""
        return f"{self.owner} {self.kind}"

    @property
    def apps(self) -> Kind:
        """Where the API serves them. Not in :mod:`.cluster`: only the chart value
        :attr:`chart_value` grants reading them, and that module's kinds are always granted."""
        return Kind(f"/apis/{self.api_version}", self.plural)

    @property
    def resource(self) -> str:
        """``<plural>.<group>``, as RBAC and messages name them."""
        return f"{self.plural}.{self.group}"

    # ------------------------------------------------------------------ pure rules
    def app_name_problem(self, app: str) -> str | None:
        """Why ``app`` cannot name an application's control Secret, or None."""
        ok = len(app) <= MAX_APP_NAME and app[:1].isalnum() and app[-1:].isalnum()
        if not ok or any(not (c.islower() or c.isdigit() or c == "-") for c in app):
            return (
                f"{self.title} name {app!r} must be a DNS-1123 label of at most "
                f"{MAX_APP_NAME} characters: its control Secret and certificate name "
                f"{secret_name(app)!r} must be a 63-character label"
            )
        return None

    def _refers_to(self, ref: dict[str, Any], app: dict[str, Any]) -> bool:
        # By uid (unique in the cluster), and the group and kind of these applications: an
        # operator may write the reference with any version its CRD serves.
        uid = (app.get("metadata") or {}).get("uid")
        group = str(ref.get("apiVersion") or "").rpartition("/")[0]
        return (
            bool(uid)
            and ref.get("uid") == uid
            and group == self.group
            and ref.get("kind") == self.kind
        )

    def _owned_by(self, obj: dict[str, Any], app: dict[str, Any], *, controller: bool) -> bool:
        return any(
            self._refers_to(ref, app) and (ref.get("controller") is True or not controller)
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
        )

    def is_driver_pod(self, pod: dict[str, Any], app: dict[str, Any]) -> bool:
        """Whether ``pod`` is a driver Pod of ``app``: the driver labels (Spark's role, the
        operator's application name), the application's namespace and an owner reference to
        the application's uid (a controller one where that operator sets it). Labels alone,
        or an owner reference to another uid (an application of the same name deleted
        before), do not qualify."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        app_meta = app.get("metadata") or {}
        if labels.get(LABEL_SPARK_ROLE) != SPARK_ROLE_DRIVER:
            return False
        if labels.get(self.app_label) != app_meta.get("name"):
            return False
        if meta.get("namespace") and meta.get("namespace") != app_meta.get("namespace"):
            return False
        return self._owned_by(pod, app, controller=self.controller_owner)

    def running_driver(
        self, pods: Sequence[dict[str, Any]], app: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The running driver Pod of ``app`` among ``pods`` (see :meth:`is_driver_pod`), or
        None. With several (a re-run overlapping its predecessor's end) the newest."""
        found = [p for p in pods if self.is_driver_pod(p, app) and _running(p)]
        if not found:
            return None
        return max(
            found,
            key=lambda p: (
                str((p.get("metadata") or {}).get("creationTimestamp") or ""),
                str((p.get("metadata") or {}).get("name") or ""),
            ),
        )

    def owner_reference(self, app: dict[str, Any]) -> dict[str, Any]:
        """The owner reference of the operator's Secret: the application, as controller (only
        this operator manages the Secret; the other operator ignores it), without
        ``blockOwnerDeletion``, which would need ``update`` on the application's finalizers,
        a right the operator is not given on another operator's resource."""
        meta = app["metadata"]
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }

    def controls(self, obj: dict[str, Any], app: dict[str, Any]) -> bool:
        """Whether ``obj`` carries the controller owner reference to ``app``'s uid that the
        operator writes on what it creates for the application (its control Secret, its
        published pipeline)."""
        return self._owned_by(obj, app, controller=True)

    def owns_secret(self, secret: dict[str, Any], app: dict[str, Any]) -> bool:
        """Whether ``secret`` is the control Secret the operator created for ``app``: its
        labels and a controller owner reference to the application's uid (a Secret someone
        put at the name, or one left by an earlier application of the same name, does not
        qualify)."""
        labels = (secret.get("metadata") or {}).get("labels") or {}
        if labels.get(names.LABEL_APP) != (app.get("metadata") or {}).get("name"):
            return False
        if labels.get(names.LABEL_ROLE) != names.ROLE_CONTROL_TOKEN:
            return False
        if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
            return False
        return self._owned_by(secret, app, controller=True)

    def secret_manifest(
        self, app: dict[str, Any], token: str, certificate: ControlCertificate
    ) -> dict[str, Any]:
        """The control Secret of ``app``: ``token``, ``tls.crt``, ``tls.key``. Its labels are
        those of the operator's other control Secrets, so no sparkglass SparkApplication may
        mount it (:mod:`.pod_privileges` refuses Secrets carrying them)."""
        meta = app["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret_name(meta["name"]),
                "namespace": meta["namespace"],
                "labels": {
                    names.LABEL_APP: meta["name"],
                    names.LABEL_ROLE: names.ROLE_CONTROL_TOKEN,
                    names.LABEL_MANAGED_BY: names.MANAGED_BY,
                },
                "ownerReferences": [self.owner_reference(app)],
            },
            "data": {
                names.TOKEN_KEY: base64.b64encode(token.encode()).decode(),
                **children.certificate_data(certificate),
            },
        }

    # ------------------------------------------------------------------ API reads and writes
    async def read_application(
        self, cluster: Cluster, namespace: str, name: str
    ) -> dict[str, Any] | None:
        """The application ``namespace/name``, None when absent (or when its CRD is not
        installed: the API answers 404 either way). Raises :class:`NotEnabled` when the
        operator may not read it, ``ApiError`` for other failures."""
        try:
            return await cluster.get(self.apps, namespace, name)
        except NotFound:
            return None
        except ApiError as exc:
            if exc.status in (401, 403):
                raise NotEnabled(
                    f"the operator may not read {self.resource} in namespace {namespace!r} "
                    f"({exc}): install the chart with {self.chart_value}=true"
                ) from None
            raise

    async def find_driver(self, cluster: Cluster, app: dict[str, Any]) -> dict[str, Any] | str:
        """The running driver Pod of ``app`` (:meth:`running_driver`), or why there is none.

        The API server narrows the list by the driver labels; the result is filtered here
        again (labels, owner reference, phase), so a server or emulator that ignored the
        selector still yields only the application's own Pod."""
        meta = app["metadata"]
        selector = {LABEL_SPARK_ROLE: SPARK_ROLE_DRIVER, self.app_label: meta["name"]}
        pods = await cluster.list_objects(PODS, meta["namespace"], selector)
        pod = self.running_driver(pods, app)
        if pod is not None:
            return pod
        return (
            f"no Running driver Pod of {self.title} {meta['name']!r} (labelled "
            f"{LABEL_SPARK_ROLE}={SPARK_ROLE_DRIVER}, {self.app_label}={meta['name']} and owned "
            f"by the application's uid)"
        )

    async def ensure_control_secret(
        self, cluster: Cluster, app: dict[str, Any], *, renew: bool = False
    ) -> dict[str, Any] | None:
        """The application's control Secret, created (random token, new certificate) when
        missing. Returns None when a Secret the operator did not create holds the name (left
        alone: it is never read). With ``renew`` a certificate that is missing, unreadable,
        for another name or within 30 days of expiry is replaced (the token kept), but only
        while no driver Pod of the application runs (a running driver loaded the old one).
        Raises ``ApiError``.

        Called when the operator sees an application whose ``spec.sparkConf`` sets
        ``spark.sparkglass.sampling.enabled=true`` (the kopf event handler, enabled when the
        operator may list these applications: chart value :attr:`chart_value`), and
        otherwise when a DataSample first needs the Secret."""
        meta = app["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        secret = await cluster.find(SECRETS, namespace, secret_name(name))
        if secret is None:
            certificate = issue_control_certificate(secret_name(name), namespace)
            body = self.secret_manifest(app, secrets.token_urlsafe(32), certificate)
            try:
                created = await cluster.create(SECRETS, namespace, body)
            except Conflict:  # another pass made it a moment ago
                return await self.ensure_control_secret(cluster, app)
            log.info(
                f"{self.log_name} control secret created",
                namespace=namespace,
                application=name,
                fingerprint=certificate.fingerprint_sha256,
                not_after=certificate.not_after.isoformat(),
            )
            return created or body
        if not self.owns_secret(secret, app):
            return None
        if renew:
            service = secret_name(name)
            reason = reissue_reason(children.secret_tls_data(secret), service, namespace)
            if reason is not None and isinstance(await self.find_driver(cluster, app), str):
                certificate = issue_control_certificate(service, namespace)
                data = children.certificate_data(certificate)
                secret = await cluster.patch(SECRETS, namespace, service, {"data": data})
                log.info(
                    f"{self.log_name} control certificate renewed",
                    namespace=namespace,
                    application=name,
                    reason=reason,
                    fingerprint=certificate.fingerprint_sha256,
                )
        return secret

    async def driver_access(
        self, cluster: Cluster, app: dict[str, Any], pod: dict[str, Any]
    ) -> DriverAccess:
        """How to reach the driver ``pod`` of ``app`` (found by :meth:`find_driver`): its
        endpoint, the token of the operator's Secret (created if missing; None when a Secret
        the operator did not create holds the name) and the pinned certificate. ``refusal``
        when the Secret holds no usable certificate. Raises ``ValueError`` when the Pod
        declares no control port, ``ApiError`` when the API server fails."""
        meta = app["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        endpoint = control_endpoint(pod)
        if endpoint is None:
            raise ValueError(
                f"the driver Pod {(pod.get('metadata') or {}).get('name')!r} of {name!r} "
                f"declares no container port named {CONTROL_PORT_NAME!r}: add it to the "
                f"application's {self.ports_field}"
            )
        secret = await self.ensure_control_secret(cluster, app)
        token = children.secret_token(secret) if secret is not None else None
        restart = (
            f"delete the Secret {secret_name(name)!r} and restart the application, whose next "
            f"driver mounts the new certificate"
        )
        return pinned_access(
            endpoint,
            token,
            secret,
            name,
            tls_server_name(name, namespace),
            missing=f"the control Secret {secret_name(name)!r} holds no certificate",
            restart=restart,
        )

    async def readable(self, cluster: Cluster, namespaces: Sequence[str]) -> str | None:
        """None when the operator may list these applications where it works (every
        namespace in ``namespaces``; cluster-wide when empty or a pattern); otherwise why not
        (the CRD is not installed, or the chart value is off). Checked once at start: a kopf
        watch the operator may not open would stop it."""
        exact = namespaces and not any(set("*?[!") & set(ns) for ns in namespaces)
        # A whole list, like the one kopf's watch starts with anyway (a query string would
        # end up in the request metric's resource label).
        everywhere = f"/apis/{self.api_version}/{self.plural}"
        paths = [self.apps.path(ns) for ns in namespaces] if exact else [everywhere]
        for path in paths:
            try:
                await cluster.get_path(path)
            except NotFound:
                return f"the {self.resource} CRD is not installed"
            except ApiError as exc:
                return f"listing {self.resource} failed ({exc}); chart value {self.chart_value}?"
        return None


__all__ = [
    "CONTROL_PORT_NAME",
    "ForeignApps",
    "NotEnabled",
    "control_endpoint",
    "control_port",
    "sampling_requested",
    "sampling_settings",
    "secret_name",
    "spark_conf",
    "tls_server_name",
]

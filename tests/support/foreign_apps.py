"""The two other operators whose SparkApplications a DataSample may target (Kubeflow's
spark-operator, the Apache Spark Kubernetes operator), as test data: one
:class:`ForeignOperator` each (:data:`KUBEFLOW`, :data:`APACHE_SPARK`), and the ``foreign``
fixture parametrized over both (ids ``kubeflow`` and ``apache-spark``).

Production code holds the rule once (``operator/foreign_apps.py``) with a ``ForeignApps`` value
per operator; a :class:`ForeignOperator` wraps that value (:attr:`ForeignOperator.rule`) with
what the tests must play themselves: the application as that operator's example declares it,
its driver Pod as that operator starts it (labels, owner reference, where the security
contexts come from), where it writes the state. On the test API server the tests play the
other operator: the CRDs applied (``crds_applied``), an application and its driver Pod, the
control Secret served by a scripted driver, DataSamples against them. Without a server,
:meth:`ForeignOperator.bare_app` and :meth:`ForeignOperator.bare_pod` are the minimal objects
the rule reads.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from sparkglass.operator import apache_spark, kubeflow
from sparkglass.operator.foreign_apps import CONTROL_PORT_NAME, ForeignApps, spark_conf
from tests.operator.conftest import (
    CRD_DIR,
    EXAMPLES_DIR,
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    StrictApiServer,
    eventually,
)
from tests.support.datasamples import ScriptedDriver, patch_status, secret_entry, status
from tests.support.foreign_crds import sparkapplication_crd

#: The namespace and the application uid of the objects made without a server.
NS = "spark-jobs"
UID = "3f1c2a9e-0000-4000-8000-000000000001"


class Declared(NamedTuple):
    """Where an application declares its driver: the container's ``ports``, ``env``,
    ``volumeMounts`` and ``securityContext`` (``container``), the Pod's security context,
    the Pod's volumes, and the jars on the classpath."""

    container: dict[str, Any]
    pod_security: dict[str, Any]
    volumes: list[dict[str, Any]]
    jars: list[str]


@dataclass(frozen=True, eq=False)
class ForeignOperator:
    """One other operator as the tests see it: its rule and what differs between the two.

    * ``id``: the pytest id, also the prefix of its example files
      (``examples/<id>-sparkapplication.yaml``, ``examples/<id>-datasample.yaml``);
    * ``rule``: the production ``ForeignApps`` value (names, labels, states, chart value);
    * ``app``: the example application's name; ``crd``: the CRD the test server gets;
    * ``watch_log``: the operator's log event saying whether it watches these applications;
    * ``waiting_state``, ``running_state``, ``ended_state``: states that operator writes
      before the driver runs, while it runs and once it is over; ``state_status`` the status
      holding a state (where that operator writes it);
    * ``driver_labels``: that operator's labels on the driver Pod besides Spark's
      ``spark-role``, given the application's name; ``driver_suffix``: the Pod's name after
      the application's;
    * ``declared``: where the application declares its driver (:class:`Declared`);
    * ``not_enabled_reason``: the DataSample's reason when the chart value is off.
    """

    id: str
    rule: ForeignApps
    app: str
    crd: dict[str, Any]
    watch_log: str
    waiting_state: str
    running_state: str
    ended_state: str
    state_status: Callable[[str], dict[str, Any]]
    driver_labels: Callable[[str], dict[str, str]]
    driver_suffix: str
    declared: Callable[[dict[str, Any]], Declared]
    not_enabled_reason: str

    # ------------------------------------------------------------------ names
    @property
    def example_file(self) -> Path:
        """The example SparkApplication (and its optional Service)."""
        return EXAMPLES_DIR / f"{self.id}-sparkapplication.yaml"

    @property
    def sample_file(self) -> Path:
        """The example DataSample of the example application."""
        return EXAMPLES_DIR / f"{self.id}-datasample.yaml"

    @property
    def stored_as(self) -> str:
        """The key of its applications in ``StrictApiServer.stored``."""
        return f"{self.rule.api_version}/{self.rule.plural}"

    def apps_path(self, namespace: str = NAMESPACE) -> str:
        """The API path of its applications in ``namespace``."""
        return f"/apis/{self.rule.api_version}/namespaces/{namespace}/{self.rule.plural}"

    # ------------------------------------------------------------------ on the test server
    def example(self) -> dict[str, Any]:
        """The example SparkApplication (the first document of its file)."""
        return copy.deepcopy(next(iter(yaml.safe_load_all(self.example_file.read_text()))))

    def example_app(
        self, name: str | None = None, *, sampling: bool = True, **conf: str
    ) -> dict[str, Any]:
        """The example under another name (its Secret references follow the name), with
        sampling on or off and ``conf`` added to its ``sparkConf``."""
        name = name or self.app
        text = json.dumps(self.example())
        body = json.loads(
            text.replace(f"{self.app}-sparkglass-control", f"{name}-sparkglass-control")
        )
        body["metadata"]["name"] = name
        body["spec"]["sparkConf"]["spark.sparkglass.sampling.enabled"] = str(sampling).lower()
        body["spec"]["sparkConf"].update(conf)
        return body

    async def create_app(
        self, kube: StrictApiServer, body: dict[str, Any], namespace: str = NAMESPACE
    ) -> dict[str, Any]:
        """Create the application; the stored object (with its uid)."""
        body = copy.deepcopy(body)
        body["metadata"]["namespace"] = namespace
        resp = await kube.post(self.apps_path(namespace), json=body)
        assert resp.status in (200, 201), await resp.text()
        stored = kube.stored(self.stored_as, namespace, body["metadata"]["name"])
        assert stored is not None
        return stored

    async def set_state(
        self,
        kube: StrictApiServer,
        app: str,
        state: str,
        namespace: str = NAMESPACE,
        **extra: Any,
    ) -> None:
        """Play the other operator: write the application's state (and ``extra``) where it
        writes it."""
        await patch_status(
            kube, f"{self.apps_path(namespace)}/{app}/status", {**self.state_status(state), **extra}
        )

    def driver_pod(
        self,
        app: dict[str, Any],
        port: int | None,
        *,
        name: str | None = None,
        owner: str = "own",
        other_uid: str = "",
    ) -> dict[str, Any]:
        """A driver Pod as the other operator starts it: Spark's ``spark-role`` label and the
        operator's (:attr:`driver_labels`), an owner reference to the application (a
        controller one where that operator sets ``controller``), the ``sg-control`` port when
        ``port``, the application's security contexts. ``owner``: ``own`` (what the operator
        writes), ``none``, ``other-uid`` (a reference naming the application but carrying
        ``other_uid``, e.g. of an application of that name deleted and made again; it must be
        a live object's, or the garbage collector deletes the Pod), ``not-controller``."""
        meta = app["metadata"]
        ref = {
            "apiVersion": self.rule.api_version,
            "kind": self.rule.kind,
            "name": meta["name"],
            "uid": meta["uid"],
            **({"controller": True} if self.rule.controller_owner else {}),
            "blockOwnerDeletion": True,
        }
        refs = {
            "own": [ref],
            "none": [],
            "other-uid": [{**ref, "uid": other_uid}],
            "not-controller": [{**ref, "controller": False}],
        }[owner]
        ports = [{"name": CONTROL_PORT_NAME, "containerPort": port, "protocol": "TCP"}]
        declared = self.declared(app)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name or f"{meta['name']}{self.driver_suffix}",
                "namespace": meta["namespace"],
                "labels": {"spark-role": "driver", **self.driver_labels(meta["name"])},
                "ownerReferences": refs,
            },
            # Both operators give the driver the application's security contexts.
            "spec": {
                "securityContext": declared.pod_security,
                "containers": [
                    {
                        "name": "spark-kubernetes-driver",
                        "image": "spark:4.0.1",
                        "ports": ports if port else [],
                        "securityContext": declared.container.get("securityContext", {}),
                    }
                ],
            },
        }

    async def running_app(
        self,
        kube: StrictApiServer,
        operator: OperatorProcess,
        driver: ScriptedDriver,
        name: str | None = None,
        namespace: str = NAMESPACE,
    ) -> dict[str, Any]:
        """A running application whose owned driver Pod is the scripted driver."""
        name = name or self.app
        app = await self.create_app(kube, self.example_app(name), namespace)
        await serve_as_driver(kube, driver, name, operator, namespace)
        await start_pod(kube, self.driver_pod(app, driver.port))
        await self.set_state(kube, name, self.running_state, namespace)
        return app

    def sample(self, name: str, app: str | None = None, **spec: Any) -> dict[str, Any]:
        """The example DataSample named ``name``, of the application ``app``, with ``spec``."""
        body = yaml.safe_load(self.sample_file.read_text())
        body["metadata"]["name"] = name
        body["spec"].pop("ttlSecondsAfterFinished", None)
        body["spec"]["applicationRef"]["name"] = app or self.app
        body["spec"].update(spec)
        return body

    # ------------------------------------------------------------------ without a server
    def bare_app(self, name: str = "etl", state: str | None = None, **conf: str) -> dict[str, Any]:
        """An application in :data:`NS` with uid :data:`UID`, sampling on (and ``conf``), in
        ``state`` (default: running)."""
        return {
            "apiVersion": self.rule.api_version,
            "kind": self.rule.kind,
            "metadata": {"name": name, "namespace": NS, "uid": UID},
            "spec": {"sparkConf": {"spark.sparkglass.sampling.enabled": "true", **conf}},
            "status": self.state_status(state or self.running_state),
        }

    def bare_pod(
        self,
        name: str | None = None,
        *,
        app_name: str = "etl",
        uid: str = UID,
        controller: bool | None = None,
        role: str = "driver",
        phase: str = "Running",
        ip: str | None = "10.0.0.7",
        port: int | None = 4045,
        created: str = "2026-01-01T00:00:00Z",
        namespace: str = NS,
        refs: list[dict[str, Any]] | None = None,
        api_version: str | None = None,
        label: str | None = None,
    ) -> dict[str, Any]:
        """A driver Pod of :meth:`bare_app` ``app_name``, each part replaceable: the owner
        reference's ``uid``, ``controller`` (None: as that operator writes it, ``true`` for
        Kubeflow, no field for the Apache operator) and ``api_version``, or all references
        (``refs``); the role label, the application label's key (``label``); phase, IP, the
        ``sg-control`` port, creation time, namespace."""
        ref: dict[str, Any] = {
            "apiVersion": api_version or self.rule.api_version,
            "kind": self.rule.kind,
            "name": app_name,
            "uid": uid,
        }
        if controller is None and self.rule.controller_owner:
            controller = True
        if controller is not None:
            ref["controller"] = controller
        name = name or f"{app_name}{self.driver_suffix}"
        ports = [{"name": CONTROL_PORT_NAME, "containerPort": port}] if port is not None else []
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"pod-{name}",
                "creationTimestamp": created,
                "labels": {"spark-role": role, label or self.rule.app_label: app_name},
                "ownerReferences": [ref] if refs is None else refs,
            },
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "ports": ports}]},
            "status": {"phase": phase, **({"podIP": ip} if ip else {})},
        }


# --------------------------------------------------------------------------- the two operators
def _kubeflow_declared(app: dict[str, Any]) -> Declared:
    # The spark-operator's Pod webhook applies spec.driver's ports, env and mounts to the
    # driver container and spec.volumes to the Pod.
    spec = app["spec"]
    driver = spec["driver"]
    jars = (spec.get("deps") or {}).get("jars") or []
    return Declared(driver, driver.get("podSecurityContext", {}), spec.get("volumes", []), jars)


def _apache_declared(app: dict[str, Any]) -> Declared:
    # Spark builds the driver on the pod template's first container; the jars are sparkConf's.
    template = app["spec"]["driverSpec"]["podTemplateSpec"]["spec"]
    jars = [j for j in spark_conf(app).get("spark.jars", "").split(",") if j]
    return Declared(
        template["containers"][0],
        template.get("securityContext", {}),
        template.get("volumes", []),
        jars,
    )


KUBEFLOW = ForeignOperator(
    id="kubeflow",
    rule=kubeflow.KUBEFLOW,
    app="flights-kf",
    # The spark-operator's SparkApplication, its whole object kept as sent.
    crd=sparkapplication_crd(
        kubeflow.GROUP,
        kubeflow.VERSION,
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    ),
    watch_log="kubeflow spark-operator applications",
    waiting_state="SUBMITTED",
    running_state=kubeflow.RUNNING,
    ended_state="COMPLETED",
    state_status=lambda state: {"applicationState": {"state": state}},
    driver_labels=lambda app: {
        kubeflow.LABEL_APP_NAME: app,
        "sparkoperator.k8s.io/launched-by-spark-operator": "true",
    },
    driver_suffix="-driver",
    declared=_kubeflow_declared,
    not_enabled_reason="KubeflowNotEnabled",
)

APACHE_SPARK = ForeignOperator(
    id="apache-spark",
    rule=apache_spark.APACHE_SPARK,
    app="flights-apache",
    # The Apache operator's SparkApplication: structural, spec and status kept as sent.
    crd=sparkapplication_crd(
        apache_spark.GROUP,
        apache_spark.VERSION,
        {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    ),
    watch_log="apache spark operator applications",
    waiting_state="DriverRequested",
    running_state="RunningHealthy",
    ended_state="ResourceReleased",
    state_status=lambda state: {
        "currentState": {"currentStateSummary": state, "message": f"{state} (test)"}
    },
    driver_labels=lambda app: {
        "spark-app-selector": "spark-0123456789abcdef",
        apache_spark.LABEL_APP_NAME: app,
        "spark.operator/name": "spark-kubernetes-operator",
    },
    driver_suffix="-0-driver",
    declared=_apache_declared,
    not_enabled_reason="ApacheSparkOperatorNotEnabled",
)

OPERATORS = (KUBEFLOW, APACHE_SPARK)


@pytest.fixture(params=OPERATORS, ids=[op.id for op in OPERATORS])
def foreign(request: pytest.FixtureRequest) -> ForeignOperator:
    """Each other operator in turn (a module testing one of them overrides this fixture)."""
    op: ForeignOperator = request.param
    return op


async def apply_crds(kubectl: Kubectl, kube: StrictApiServer, op: ForeignOperator) -> None:
    """sparkglass's CRDs and ``op``'s SparkApplication CRD."""
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
    resp = await kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=op.crd)
    assert resp.status in (200, 201), await resp.text()


@pytest.fixture()
async def crds_applied(kubectl: Kubectl, kube: StrictApiServer, foreign: ForeignOperator) -> None:
    """The CRDs (:func:`apply_crds`) before the operator starts: it checks once, at start,
    whether it may list the other operator's applications."""
    await apply_crds(kubectl, kube, foreign)


# --------------------------------------------------------------------------- either operator
async def start_pod(kube: StrictApiServer, pod: dict[str, Any], ip: str = "127.0.0.1") -> None:
    """Create ``pod`` and play the kubelet: it runs at ``ip``."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    resp = await kube.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
    assert resp.status in (200, 201), await resp.text()
    await patch_status(
        kube,
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {"phase": "Running", "podIP": ip},
    )


async def control_secret(
    kube: StrictApiServer,
    app: str,
    operator: OperatorProcess,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """The control Secret the operator creates for ``app`` (waited for)."""
    found: dict[str, Any] = await eventually(
        lambda: kube.stored("v1/secrets", namespace, f"{app}-sparkglass-control"),
        what=f"the control Secret of {app}",
        operator=operator,
    )
    return found


async def serve_as_driver(
    kube: StrictApiServer,
    driver: ScriptedDriver,
    app: str,
    operator: OperatorProcess,
    namespace: str = NAMESPACE,
) -> None:
    """What the user's driver does with the operator's Secret: the token from ``env``, the
    certificate and key from the mounted volume; vertices of the flights demo."""
    secret = await control_secret(kube, app, operator, namespace)
    driver.tokens.add(secret_entry(secret, "token"))
    driver.serve_certificate(
        f"{app}-sparkglass-control.{namespace}.svc",
        secret_entry(secret, "tls.crt"),
        secret_entry(secret, "tls.key"),
    )
    driver.vertices |= {"parse", "flights", "enrich-origin"}


async def post_sample(
    kube: StrictApiServer, body: dict[str, Any], namespace: str = NAMESPACE
) -> None:
    """Create the DataSample ``body`` in ``namespace``."""
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    resp = await kube.post(
        f"/apis/sparkglass.io/v1alpha1/namespaces/{namespace}/datasamples", json=body
    )
    assert resp.status in (200, 201), await resp.text()


def ready(kube: StrictApiServer, name: str) -> dict[str, Any]:
    """The DataSample's ``Ready`` condition ({} before it has one)."""
    return {c["type"]: c for c in status(kube, name).get("conditions") or []}.get("Ready") or {}

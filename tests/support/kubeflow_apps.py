"""Kubeflow spark-operator SparkApplications on the test API server, the emulator playing the
spark-operator: the CRDs applied (``crds_applied``), an application and its driver Pod, the
control Secret served by a scripted driver, DataSamples against them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

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

KF_GROUP, KF_VERSION = "sparkoperator.k8s.io", "v1beta2"
KF_APPS = f"{KF_GROUP}/{KF_VERSION}/sparkapplications"
APP = "flights-kf"

#: The spark-operator's SparkApplication, its whole object kept as sent.
KUBEFLOW_CRD = sparkapplication_crd(
    KF_GROUP, KF_VERSION, {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
)


@pytest.fixture()
async def crds_applied(kubectl: Kubectl, kube: StrictApiServer) -> None:
    """sparkglass's CRDs and the Kubeflow one, before the operator starts (it checks once,
    at start, whether it may list Kubeflow applications)."""
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
    resp = await kube.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=KUBEFLOW_CRD
    )
    assert resp.status in (200, 201), await resp.text()


# --------------------------------------------------------------------------- the spark-operator
def kubeflow_example() -> dict[str, Any]:
    """The example SparkApplication (the first document of its file)."""
    docs = list(yaml.safe_load_all((EXAMPLES_DIR / "kubeflow-sparkapplication.yaml").read_text()))
    return copy.deepcopy(docs[0])


def kubeflow_app(name: str = APP, *, sampling: bool = True, **conf: str) -> dict[str, Any]:
    """The example under another name (its Secret references follow the name)."""
    body = kubeflow_example()
    text = json.dumps(body).replace(f"{APP}-sparkglass-control", f"{name}-sparkglass-control")
    body = json.loads(text)
    body["metadata"]["name"] = name
    body["spec"]["sparkConf"]["spark.sparkglass.sampling.enabled"] = str(sampling).lower()
    body["spec"]["sparkConf"].update(conf)
    return body


async def create_kubeflow_app(
    kube: StrictApiServer, body: dict[str, Any], namespace: str = NAMESPACE
) -> dict[str, Any]:
    """Create the application; the stored object (with its uid)."""
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    path = f"/apis/{KF_GROUP}/{KF_VERSION}/namespaces/{namespace}/sparkapplications"
    resp = await kube.post(path, json=body)
    assert resp.status in (200, 201), await resp.text()
    stored = kube.stored(KF_APPS, namespace, body["metadata"]["name"])
    assert stored is not None
    return stored


async def set_state(
    kube: StrictApiServer,
    app: str,
    state: str,
    namespace: str = NAMESPACE,
    **extra: Any,
) -> None:
    """Play the spark-operator: write ``status.applicationState.state`` (and ``extra``)."""
    await patch_status(
        kube,
        f"/apis/{KF_GROUP}/{KF_VERSION}/namespaces/{namespace}/sparkapplications/{app}/status",
        {"applicationState": {"state": state}, **extra},
    )


def driver_pod(
    app: dict[str, Any],
    port: int | None,
    *,
    name: str | None = None,
    owner: str = "controller",
    other_uid: str = "",
) -> dict[str, Any]:
    """A driver Pod as the spark-operator starts it. ``owner``: ``controller`` (what the
    spark-operator sets), ``none``, ``other-uid`` (a controller reference naming the
    application but carrying ``other_uid``, e.g. of an application of that name deleted and
    made again; it must be a live object's, or the garbage collector deletes the Pod),
    ``not-controller``."""
    meta = app["metadata"]
    ref = {
        "apiVersion": f"{KF_GROUP}/{KF_VERSION}",
        "kind": "SparkApplication",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    refs = {
        "controller": [ref],
        "none": [],
        "other-uid": [{**ref, "uid": other_uid}],
        "not-controller": [{**ref, "controller": False}],
    }[owner]
    ports = [{"name": "sg-control", "containerPort": port, "protocol": "TCP"}] if port else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"{meta['name']}-driver",
            "namespace": meta["namespace"],
            "labels": {
                "spark-role": "driver",
                "sparkoperator.k8s.io/app-name": meta["name"],
                "sparkoperator.k8s.io/launched-by-spark-operator": "true",
            },
            "ownerReferences": refs,
        },
        # The spark-operator copies the application's security contexts into the Pod.
        "spec": {
            "securityContext": app["spec"]["driver"].get("podSecurityContext", {}),
            "containers": [
                {
                    "name": "spark-kubernetes-driver",
                    "image": "spark:4.0.1",
                    "ports": ports,
                    "securityContext": app["spec"]["driver"].get("securityContext", {}),
                }
            ],
        },
    }


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


async def running_kubeflow_app(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    name: str = APP,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """A RUNNING Kubeflow application whose owned driver Pod is the scripted driver."""
    app = await create_kubeflow_app(kube, kubeflow_app(name), namespace)
    await serve_as_driver(kube, driver, name, operator, namespace)
    await start_pod(kube, driver_pod(app, driver.port))
    await set_state(kube, name, "RUNNING", namespace)
    return app


def kubeflow_sample(name: str, app: str = APP, **spec: Any) -> dict[str, Any]:
    body = yaml.safe_load((EXAMPLES_DIR / "kubeflow-datasample.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"].pop("ttlSecondsAfterFinished", None)
    body["spec"]["applicationRef"]["name"] = app
    body["spec"].update(spec)
    return body


async def post_sample(
    kube: StrictApiServer, body: dict[str, Any], namespace: str = NAMESPACE
) -> None:
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    resp = await kube.post(
        f"/apis/sparkglass.io/v1alpha1/namespaces/{namespace}/datasamples", json=body
    )
    assert resp.status in (200, 201), await resp.text()


def ready(kube: StrictApiServer, name: str) -> dict[str, Any]:
    return {c["type"]: c for c in status(kube, name).get("conditions") or []}.get("Ready") or {}

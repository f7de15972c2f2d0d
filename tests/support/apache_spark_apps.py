"""Apache Spark Kubernetes operator SparkApplications (``spark.apache.org/v1``) on the test API
server, the tests playing that operator: the CRDs applied (``crds_applied``), an application
and its driver Pod, DataSamples against them. The control Secret, the scripted driver serving
it and the DataSample helpers are the Kubeflow support's (``kubeflow_apps``): the rule is the
same, only the application's kind, labels and status differ.
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
    StrictApiServer,
)
from tests.support.datasamples import patch_status
from tests.support.foreign_crds import sparkapplication_crd

AS_GROUP, AS_VERSION = "spark.apache.org", "v1"
AS_APPS = f"{AS_GROUP}/{AS_VERSION}/sparkapplications"
APP = "flights-apache"

#: The Apache operator's SparkApplication: structural, spec and status kept as sent.
APACHE_SPARK_CRD = sparkapplication_crd(
    AS_GROUP,
    AS_VERSION,
    {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
)


@pytest.fixture()
async def crds_applied(kubectl: Kubectl, kube: StrictApiServer) -> None:
    """sparkglass's CRDs and the Apache operator's, before the operator starts (it checks
    once, at start, whether it may list those applications)."""
    await kubectl.apply(CRD_DIR / "sparkapplication.yaml", CRD_DIR / "datasample.yaml")
    resp = await kube.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=APACHE_SPARK_CRD
    )
    assert resp.status in (200, 201), await resp.text()


# --------------------------------------------------------------------------- the operator
def apache_example() -> dict[str, Any]:
    """The example SparkApplication (the first document of its file)."""
    path = EXAMPLES_DIR / "apache-spark-sparkapplication.yaml"
    return copy.deepcopy(next(iter(yaml.safe_load_all(path.read_text()))))


def apache_app(name: str = APP, *, sampling: bool = True) -> dict[str, Any]:
    """The example under another name (its Secret references follow the name)."""
    text = json.dumps(apache_example())
    body = json.loads(text.replace(f"{APP}-sparkglass-control", f"{name}-sparkglass-control"))
    body["metadata"]["name"] = name
    body["spec"]["sparkConf"]["spark.sparkglass.sampling.enabled"] = str(sampling).lower()
    return body


async def create_apache_app(
    kube: StrictApiServer, body: dict[str, Any], namespace: str = NAMESPACE
) -> dict[str, Any]:
    """Create the application; the stored object (with its uid)."""
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = namespace
    path = f"/apis/{AS_GROUP}/{AS_VERSION}/namespaces/{namespace}/sparkapplications"
    resp = await kube.post(path, json=body)
    assert resp.status in (200, 201), await resp.text()
    stored = kube.stored(AS_APPS, namespace, body["metadata"]["name"])
    assert stored is not None
    return stored


async def set_state(
    kube: StrictApiServer, app: str, state: str, namespace: str = NAMESPACE
) -> None:
    """Play the Apache operator: write ``status.currentState.currentStateSummary``."""
    await patch_status(
        kube,
        f"/apis/{AS_GROUP}/{AS_VERSION}/namespaces/{namespace}/sparkapplications/{app}/status",
        {"currentState": {"currentStateSummary": state, "message": f"{state} (test)"}},
    )


def driver_pod(
    app: dict[str, Any],
    port: int | None,
    *,
    name: str | None = None,
    owner: str = "owner",
    other_uid: str = "",
) -> dict[str, Any]:
    """A driver Pod as the Apache operator creates it: Spark's ``spark-role`` label, the
    operator's ``spark.operator/*`` labels, an owner reference to the application without
    ``controller`` (the operator sets none), the pod template's container port. ``owner``:
    ``owner`` (what the operator sets), ``none``, ``other-uid`` (a reference naming the
    application but carrying ``other_uid``, a live object's, or the garbage collector
    deletes the Pod)."""
    meta = app["metadata"]
    ref = {
        "apiVersion": f"{AS_GROUP}/{AS_VERSION}",
        "kind": "SparkApplication",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }
    refs = {"owner": [ref], "none": [], "other-uid": [{**ref, "uid": other_uid}]}[owner]
    ports = [{"name": "sg-control", "containerPort": port, "protocol": "TCP"}] if port else []
    template = app["spec"]["driverSpec"]["podTemplateSpec"]["spec"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"{meta['name']}-0-driver",
            "namespace": meta["namespace"],
            "labels": {
                "spark-role": "driver",
                "spark-app-selector": "spark-0123456789abcdef",
                "spark.operator/spark-app-name": meta["name"],
                "spark.operator/name": "spark-kubernetes-operator",
            },
            "ownerReferences": refs,
        },
        "spec": {
            "securityContext": template.get("securityContext", {}),
            "containers": [
                {
                    "name": "spark-kubernetes-driver",
                    "image": "spark:4.0.1",
                    "ports": ports,
                    "securityContext": template["containers"][0].get("securityContext", {}),
                }
            ],
        },
    }


def apache_sample(name: str, app: str = APP, **spec: Any) -> dict[str, Any]:
    body = yaml.safe_load((EXAMPLES_DIR / "apache-spark-datasample.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"].pop("ttlSecondsAfterFinished", None)
    body["spec"]["applicationRef"]["name"] = app
    body["spec"].update(spec)
    return body

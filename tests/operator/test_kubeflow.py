"""DataSamples against Kubeflow spark-operator SparkApplications, with the real operator process.

The kmock API server stands in for the cluster and this module plays the spark-operator: it
creates the ``sparkoperator.k8s.io/v1beta2`` SparkApplication (the example, under a minimal
CRD of our own: the spark-operator's schema is not needed to store one), starts its driver
Pod the way the spark-operator does (Spark's and the spark-operator's labels, a controller
owner reference to the application's uid, ``driver.ports`` on the container) and writes the
application's ``status.applicationState.state``. The driver is ``test_datasample``'s
``ScriptedDriver`` over real HTTPS on 127.0.0.1, serving the certificate of the Secret the
operator created for the application.

What kmock (with ``conftest.StrictApiServer``'s additions) does not do, and where that
logic is covered instead:

* no pruning of unknown fields, no CRD defaulting, no CEL: a DataSample reaches the operator
  as written (``applicationRef.apiVersion`` defaults and the refused ``namespace`` are the
  operator's own, ``test_kubeflow_units.py``; the CRD's rules are evaluated there with
  ``celpy``);
* plain kmock ignores ``labelSelector``; the emulator filters equality selectors, and
  ``kubeflow.find_driver`` filters the Pods again itself, which ``test_kubeflow_units.py``
  checks with a client that ignores the selector;
* ``resourceVersion`` preconditions and 409 on create come from the emulator, not kmock; the
  control Secret's create-race path (``Conflict``) is a unit test;
* no RBAC: the 403 of an operator without ``kubeflow.enabled`` is a unit test
  (``read_application``, ``readable``), and the chart's rule is ``tests/chart``'s.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import yaml
from cryptography import x509

from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.datasamples import store_url as store_url

from .conftest import (
    CRD_DIR,
    EXAMPLES_DIR,
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    StrictApiServer,
    eventually,
)
from .test_datasample import (
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    events_for,
    patch_status,
    phase,
    secret_entry,
    status,
    wait_final,
)

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

KF_GROUP, KF_VERSION = "sparkoperator.k8s.io", "v1beta2"
KF_APPS = f"{KF_GROUP}/{KF_VERSION}/sparkapplications"
APP = "flights-kf"

#: A minimal CRD for the spark-operator's SparkApplication: enough for the API server to store
#: and serve one (with a status subresource). Written here; the spark-operator's own schema
#: validates fields sparkglass never reads.
KUBEFLOW_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"sparkapplications.{KF_GROUP}"},
    "spec": {
        "group": KF_GROUP,
        "scope": "Namespaced",
        "names": {
            "kind": "SparkApplication",
            "listKind": "SparkApplicationList",
            "plural": "sparkapplications",
            "singular": "sparkapplication",
            "shortNames": ["sparkapp"],
        },
        "versions": [
            {
                "name": KF_VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


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


# --------------------------------------------------------------------------- tests
async def test_a_datasample_against_a_kubeflow_application_completes(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, store_url: str
) -> None:
    # The operator found at start that it may list these applications, so it watches them.
    await eventually(
        lambda: any(
            '"kubeflow spark-operator applications"' in line and '"watched": true' in line
            for line in operator.output().splitlines()
        ),
        what="the operator to watch Kubeflow applications",
        operator=operator,
    )
    app = await create_kubeflow_app(kube, kubeflow_app())
    # The operator creates the control Secret as soon as it sees the application (before the
    # driver, which reads its token from it, can start): labelled, owned by the application.
    secret = await control_secret(kube, APP, operator)
    meta = secret["metadata"]
    assert meta["labels"] == {
        "sparkglass.io/application": APP,
        "sparkglass.io/role": "control-token",
        "app.kubernetes.io/managed-by": "sparkglass-operator",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "name": APP,
            "uid": app["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert set(secret["data"]) == {"token", "tls.crt", "tls.key"}
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{APP}-sparkglass-control.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)

    # A DataSample made while the application is still submitted waits for it.
    await set_state(kube, APP, "SUBMITTED")
    await post_sample(kube, kubeflow_sample("kf-parse"))
    await eventually(
        lambda: ready(kube, "kf-parse").get("reason") == "WaitingForApplication",
        what="the DataSample to wait",
        operator=operator,
    )
    assert phase(kube, "kf-parse") == "Pending" and driver.calls == {}

    # The spark-operator starts the driver; the DataSample completes on it.
    await serve_as_driver(kube, driver, APP, operator)
    await start_pod(kube, driver_pod(app, driver.port))
    await set_state(kube, APP, "RUNNING")
    assert await wait_final(kube, "kf-parse", operator) == "Complete"
    st = status(kube, "kf-parse")
    assert st["totalRecordCount"] == 6 and st["roundId"] == "r1-parse"
    assert (ready(kube, "kf-parse")["status"], ready(kube, "kf-parse")["reason"]) == (
        "True",
        "RoundComplete",
    )
    assert st["observedGeneration"] == 1
    uid = kube.stored(SAMPLES, NAMESPACE, "kf-parse")["metadata"]["uid"]
    assert st["resultsURL"] == (
        f"{SERVICE_URL}/api/v1/namespaces/{NAMESPACE}/applications/{APP}/rounds/{uid}"
    )
    assert kube.stored(SAMPLES, NAMESPACE, "kf-parse")["metadata"]["labels"] == {
        "sparkglass.io/application": APP,
        "sparkglass.io/vertex": "parse",
        "sparkglass.io/phase": "Complete",
    }
    await eventually(
        lambda: (
            {"RoundStarted", "RoundComplete"} <= {e["reason"] for e in events_for(kube, "kf-parse")}
        ),
        what="events",
        operator=operator,
    )
    # One round, with the Secret's token, over TLS pinned to the Secret's certificate and its
    # name; the token reached neither the status nor the log.
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0
    assert set(driver.handshakes) == {f"{APP}-sparkglass-control.{NAMESPACE}.svc"}
    (token,) = driver.tokens
    assert token not in json.dumps(kube.stored(SAMPLES, NAMESPACE, "kf-parse"))
    assert token not in operator.output()
    from sparkglass.service.store import finished_result, open_store

    with open_store(store_url).begin() as session:
        result = finished_result(session, uid)
        assert result is not None and sum(len(s.records) for s in result.samples) == 6

    # The Secret goes with the application (owner reference; the emulator's collector).
    resp = await kube.delete(
        f"/apis/{KF_GROUP}/{KF_VERSION}/namespaces/{NAMESPACE}/sparkapplications/{APP}"
    )
    assert resp.status in (200, 202), await resp.text()
    await eventually(
        lambda: kube.stored("v1/secrets", NAMESPACE, f"{APP}-sparkglass-control") is None,
        what="the Secret to be collected",
        operator=operator,
    )


async def test_sampling_off_gives_no_secret_and_a_disabled_datasample(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await create_kubeflow_app(kube, kubeflow_app("quiet", sampling=False))
    await post_sample(kube, kubeflow_sample("quiet-parse", app="quiet"))
    assert await wait_final(kube, "quiet-parse", operator) == "Disabled"
    assert ready(kube, "quiet-parse")["reason"] == "SamplingDisabled"
    assert "spark.sparkglass.sampling.enabled" in status(kube, "quiet-parse")["message"]
    # An application created after it gets its Secret; the one with sampling off never does.
    await create_kubeflow_app(kube, kubeflow_app("loud"))
    await control_secret(kube, "loud", operator)
    assert kube.stored("v1/secrets", NAMESPACE, "quiet-sparkglass-control") is None
    assert driver.calls == {}


async def test_a_round_is_abandoned_when_the_kubeflow_driver_pod_fails(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_kubeflow_app(kube, operator, driver)
    driver.behaviour["parse"] = "hold"
    await post_sample(kube, kubeflow_sample("held"))
    await eventually(lambda: phase(kube, "held") == "InProgress", operator=operator)
    # The kubelet reports the driver's end before the spark-operator's status does.
    await patch_status(
        kube, f"/api/v1/namespaces/{NAMESPACE}/pods/{APP}-driver/status", {"phase": "Failed"}
    )
    assert await wait_final(kube, "held", operator) == "Abandoned"
    assert ready(kube, "held")["reason"] == "ApplicationNotRunning"
    assert "r1-parse" in status(kube, "held")["message"]


async def test_a_driver_pod_without_the_control_port_fails_naming_the_field(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    app = await create_kubeflow_app(kube, kubeflow_app())
    await start_pod(kube, driver_pod(app, None))
    await set_state(kube, APP, "RUNNING")
    await post_sample(kube, kubeflow_sample("no-port"))
    assert await wait_final(kube, "no-port", operator) == "Failed"
    assert ready(kube, "no-port")["reason"] == "ControlPortMissing"
    message = status(kube, "no-port")["message"]
    assert "sg-control" in message and "spec.driver.ports" in message
    assert driver.calls == {}


async def test_an_application_that_ended_abandons_the_datasample(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await create_kubeflow_app(kube, kubeflow_app())
    await set_state(kube, APP, "COMPLETED")
    await post_sample(kube, kubeflow_sample("late"))
    assert await wait_final(kube, "late", operator) == "Abandoned"
    assert ready(kube, "late")["reason"] == "ApplicationNotRunning"
    assert driver.calls == {}

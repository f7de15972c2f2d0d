"""DataSamples against Kubeflow spark-operator SparkApplications, with the real operator process.

The kmock API server stands in for the cluster and ``tests/support/kubeflow_apps.py`` plays
the spark-operator: it creates the ``sparkoperator.k8s.io/v1beta2`` SparkApplication (the
example, under a minimal CRD of our own: the spark-operator's schema is not needed to store
one), starts its driver Pod the way the spark-operator does (Spark's and the spark-operator's
labels, a controller owner reference to the application's uid, ``driver.ports`` on the
container) and writes the application's ``status.applicationState.state``. The driver is the
``ScriptedDriver`` of ``tests/support/datasamples.py`` over real HTTPS on 127.0.0.1, serving
the certificate of the Secret the operator created for the application.

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
import json

import pytest
from cryptography import x509

from tests.support.datasamples import (
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    events_for,
    patch_status,
    phase,
    status,
    wait_final,
)
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.datasamples import store_url as store_url
from tests.support.kubeflow_apps import (
    APP,
    KF_GROUP,
    KF_VERSION,
    control_secret,
    create_kubeflow_app,
    driver_pod,
    kubeflow_app,
    kubeflow_sample,
    post_sample,
    ready,
    running_kubeflow_app,
    serve_as_driver,
    set_state,
    start_pod,
)
from tests.support.kubeflow_apps import crds_applied as crds_applied  # the fixture, by name

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines


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

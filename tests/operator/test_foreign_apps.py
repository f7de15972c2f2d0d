"""DataSamples against another operator's SparkApplications, with the real operator process:
each test runs once for Kubeflow's spark-operator (``sparkoperator.k8s.io/v1beta2``) and once
for the Apache Spark Kubernetes operator (``spark.apache.org/v1``), which share one rule
(``operator/foreign_apps.py``).

The strict stand-in API server (kmock with ``StrictApiServer``'s additions) plays the cluster
and ``tests/support/foreign_apps.py`` plays the other operator: it creates the example
SparkApplication under a minimal CRD of our own (that operator's schema is not needed to
store one), starts its driver Pod the way that operator does (Spark's ``spark-role`` label,
the operator's application label, an owner reference to the application's uid, a controller
one for Kubeflow only, the ``sg-control`` container port) and writes the state where that
operator writes it. The driver is the ``ScriptedDriver`` of ``tests/support/datasamples.py``
over real HTTPS on 127.0.0.1, serving the certificate of the Secret the operator created for
the application.

What the stand-in does not do, and where that logic is covered instead:

* no pruning of unknown fields, no CRD defaulting, no CEL: a DataSample reaches the operator
  as written (the CRD's rules are evaluated with ``celpy`` in ``test_foreign_apps_units.py``;
  ``applicationRef`` defaults and the refused ``namespace``: ``test_kubeflow_units.py``);
* plain kmock ignores ``labelSelector``; the emulator filters equality selectors, and
  ``find_driver`` filters the Pods again itself, which ``test_foreign_apps_units.py`` checks
  with a client that ignores the selector;
* ``resourceVersion`` preconditions and 409 on create come from the emulator, not kmock; the
  control Secret's create-race path (``Conflict``) is a unit test (``test_kubeflow_units.py``);
* no RBAC, no admission webhook: the 403 of an operator without the chart value
  (``read_application``, ``readable``) and the webhook's verdicts are
  ``test_foreign_apps_units.py``'s, the chart's rules ``tests/chart``'s.

What only one operator does: ``test_kubeflow.py``, ``test_apache_spark.py``.
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
    phase,
    status,
    wait_final,
)
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.foreign_apps import (
    OPERATORS,
    ForeignOperator,
    control_secret,
    post_sample,
    ready,
    serve_as_driver,
    start_pod,
)
from tests.support.foreign_apps import crds_applied as crds_applied  # the fixtures, by name
from tests.support.foreign_apps import foreign as foreign

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines


async def test_a_datasample_against_the_application_completes(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
    foreign: ForeignOperator,
) -> None:
    """The whole path: the operator watches the applications, makes the control Secret as
    soon as it sees one, a DataSample waits for the driver, completes on it over TLS pinned
    to the Secret's certificate, a DataSample of an application that is over is abandoned,
    and the Secret goes with the application."""
    app_name = foreign.app
    # The operator found at start that it may list these applications, so it watches them.
    await eventually(
        lambda: any(
            f'"{foreign.watch_log}"' in line and '"watched": true' in line
            for line in operator.output().splitlines()
        ),
        what=f"the operator to watch {foreign.rule.owner} applications",
        operator=operator,
    )
    app = await foreign.create_app(kube, foreign.example_app())
    # The operator creates the control Secret as soon as it sees the application (before the
    # driver, which reads its token from it, can start): labelled, owned by the application
    # as controller.
    secret = await control_secret(kube, app_name, operator)
    meta = secret["metadata"]
    assert meta["labels"] == {
        "sparkglass.io/application": app_name,
        "sparkglass.io/role": "control-token",
        "app.kubernetes.io/managed-by": "sparkglass-operator",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": foreign.rule.api_version,
            "kind": "SparkApplication",
            "name": app_name,
            "uid": app["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert set(secret["data"]) == {"token", "tls.crt", "tls.key"}
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    server = f"{app_name}-sparkglass-control.{NAMESPACE}.svc"
    assert server in sans.get_values_for_type(x509.DNSName)

    # A DataSample made while the driver is not started yet waits for it.
    await foreign.set_state(kube, app_name, foreign.waiting_state)
    await post_sample(kube, foreign.sample("parse"))
    await eventually(
        lambda: ready(kube, "parse").get("reason") == "WaitingForApplication",
        what="the DataSample to wait",
        operator=operator,
    )
    assert phase(kube, "parse") == "Pending" and driver.calls == {}

    # The other operator starts the driver; the DataSample completes on it.
    await serve_as_driver(kube, driver, app_name, operator)
    await start_pod(kube, foreign.driver_pod(app, driver.port))
    await foreign.set_state(kube, app_name, foreign.running_state)
    assert await wait_final(kube, "parse", operator) == "Complete"
    st = status(kube, "parse")
    assert st["totalRecordCount"] == 6 and st["roundId"] == "r-1"
    assert (ready(kube, "parse")["status"], ready(kube, "parse")["reason"]) == (
        "True",
        "RoundComplete",
    )
    assert st["observedGeneration"] == 1
    uid = kube.stored(SAMPLES, NAMESPACE, "parse")["metadata"]["uid"]
    assert st["resultsURL"] == (
        f"{SERVICE_URL}/api/v1/namespaces/{NAMESPACE}/applications/{app_name}/rounds/{uid}"
    )
    assert kube.stored(SAMPLES, NAMESPACE, "parse")["metadata"]["labels"] == {
        "sparkglass.io/application": app_name,
        "sparkglass.io/vertex": "parse",
        "sparkglass.io/phase": "Complete",
    }
    await eventually(
        lambda: (
            {"RoundStarted", "RoundComplete"} <= {e["reason"] for e in events_for(kube, "parse")}
        ),
        what="events",
        operator=operator,
    )
    # One round, with the Secret's token, over TLS pinned to the Secret's certificate and its
    # name; the token reached neither the status nor the log.
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0
    assert set(driver.handshakes) == {server}
    (token,) = driver.tokens
    assert token not in json.dumps(kube.stored(SAMPLES, NAMESPACE, "parse"))
    assert token not in operator.output()
    from sparkglass.service.store import finished_result, open_store

    with open_store(store_url).begin() as session:
        result = finished_result(session, uid)
        assert result is not None and sum(len(s.records) for s in result.samples) == 6

    # Once the other operator says the application is over, a new DataSample is abandoned
    # at once rather than left waiting, and the driver is not asked again.
    await foreign.set_state(kube, app_name, foreign.ended_state)
    await post_sample(kube, foreign.sample("late"))
    assert await wait_final(kube, "late", operator) == "Abandoned"
    assert ready(kube, "late")["reason"] == "ApplicationNotRunning"
    assert driver.calls["open:parse"] == 1

    # The Secret goes with the application (owner reference; the emulator's collector).
    resp = await kube.delete(f"{foreign.apps_path()}/{app_name}")
    assert resp.status in (200, 202), await resp.text()
    await eventually(
        lambda: kube.stored("v1/secrets", NAMESPACE, f"{app_name}-sparkglass-control") is None,
        what="the Secret to be collected",
        operator=operator,
    )


async def test_sampling_off_gives_no_secret_and_a_disabled_datasample(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    foreign: ForeignOperator,
) -> None:
    """An application that does not opt in to sampling gets no control Secret, and its
    DataSamples end Disabled naming the conf key, before its driver runs and while it runs
    (which is never asked)."""
    app = await foreign.create_app(kube, foreign.example_app("quiet", sampling=False))
    await post_sample(kube, foreign.sample("quiet-early", app="quiet"))
    assert await wait_final(kube, "quiet-early", operator) == "Disabled"
    assert ready(kube, "quiet-early")["reason"] == "SamplingDisabled"
    assert "spark.sparkglass.sampling.enabled" in status(kube, "quiet-early")["message"]
    # With its driver running: the same, and the message names the field.
    await start_pod(kube, foreign.driver_pod(app, driver.port))
    await foreign.set_state(kube, "quiet", foreign.running_state)
    await post_sample(kube, foreign.sample("quiet-parse", app="quiet"))
    assert await wait_final(kube, "quiet-parse", operator) == "Disabled"
    assert ready(kube, "quiet-parse")["reason"] == "SamplingDisabled"
    message = status(kube, "quiet-parse")["message"]
    assert "spec.sparkConf spark.sparkglass.sampling.enabled is not true" in message, message
    # An application created after it gets its Secret; the one with sampling off never does.
    await foreign.create_app(kube, foreign.example_app("loud"))
    await control_secret(kube, "loud", operator)
    assert kube.stored("v1/secrets", NAMESPACE, "quiet-sparkglass-control") is None
    assert driver.calls == {}


async def test_the_other_operator_s_application_of_the_same_name_is_told_to_rename(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    foreign: ForeignOperator,
) -> None:
    """A Kubeflow and an Apache Spark application of one name in one namespace would share
    the control Secret's name. The first one's Secret is never used for the second (it is
    owned by the first): the second's DataSample fails saying to rename one of the two, and
    its driver is never sent a token."""
    other = next(op for op in OPERATORS if op is not foreign)
    resp = await kube.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=other.crd
    )
    assert resp.status in (200, 201), await resp.text()
    name = "twin"
    await foreign.create_app(kube, foreign.example_app(name))
    first = await control_secret(kube, name, operator)
    app = await other.create_app(kube, other.example_app(name))
    await start_pod(kube, other.driver_pod(app, driver.port))
    await other.set_state(kube, name, other.running_state)
    await post_sample(kube, other.sample("twin-parse", app=name, backoffLimit=0))
    assert await wait_final(kube, "twin-parse", operator) == "Failed"
    assert ready(kube, "twin-parse")["reason"] == "ControlTokenMissing"
    assert "rename one of the two" in status(kube, "twin-parse")["message"]
    assert driver.calls == {}
    # The first application's Secret is as it was: not taken over, not rewritten.
    now = kube.stored("v1/secrets", NAMESPACE, f"{name}-sparkglass-control")
    assert now is not None and now["metadata"]["uid"] == first["metadata"]["uid"]
    assert now["metadata"]["ownerReferences"] == first["metadata"]["ownerReferences"]

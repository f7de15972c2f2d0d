"""DataSamples against Apache Spark Kubernetes operator SparkApplications, with the real
operator process.

The strict stand-in API server plays the cluster and ``tests/support/apache_spark_apps.py``
plays the Apache operator: it creates the ``spark.apache.org/v1`` SparkApplication (the
example, under a minimal structural CRD of our own), starts its driver Pod the way that
operator does (Spark's ``spark-role`` label, the operator's ``spark.operator/spark-app-name``
label, an owner reference to the application's uid without ``controller``, the pod
template's ``sg-control`` port) and writes ``status.currentState.currentStateSummary``. The
driver is the ``ScriptedDriver`` of ``tests/support/datasamples.py`` over real HTTPS on
127.0.0.1, serving the certificate of the Secret the operator created for the application.

What the stand-in does not do (no RBAC, no admission webhook) is covered without a server in
``test_apache_spark_units.py``: the 403 of an operator without
``apacheSparkOperator.enabled``, the webhook's verdicts, the owner-reference rule's cases.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from cryptography import x509

from tests.support.apache_spark_apps import (
    APP,
    apache_app,
    apache_sample,
    create_apache_app,
    driver_pod,
    set_state,
)
from tests.support.apache_spark_apps import crds_applied as crds_applied  # the fixture, by name
from tests.support.datasamples import (
    SAMPLES,
    ScriptedDriver,
    phase,
    status,
    wait_final,
)
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.datasamples import store_url as store_url
from tests.support.kubeflow_apps import (
    control_secret,
    post_sample,
    ready,
    serve_as_driver,
    start_pod,
)

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1 standing for a Pod that is not the driver: counts
    connections, answers nothing."""

    port: int = 0
    connections: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)


@pytest.fixture()
async def listener() -> AsyncIterator[Listener]:
    found = Listener()

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections += 1
        writer.close()

    found.server = await asyncio.start_server(accept, "127.0.0.1", 0)
    found.port = found.server.sockets[0].getsockname()[1]
    yield found
    found.server.close()
    await found.server.wait_closed()


# --------------------------------------------------------------------------- tests
async def test_a_datasample_against_an_apache_spark_application_completes(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, store_url: str
) -> None:
    # The operator found at start that it may list these applications, so it watches them.
    await eventually(
        lambda: any(
            '"apache spark operator applications"' in line and '"watched": true' in line
            for line in operator.output().splitlines()
        ),
        what="the operator to watch Apache Spark operator applications",
        operator=operator,
    )
    app = await create_apache_app(kube, apache_app())
    # The control Secret is made as soon as the operator sees the application (its driver
    # reads the token from it), labelled and owned by the application as controller.
    secret = await control_secret(kube, APP, operator)
    meta = secret["metadata"]
    assert meta["labels"] == {
        "sparkglass.io/application": APP,
        "sparkglass.io/role": "control-token",
        "app.kubernetes.io/managed-by": "sparkglass-operator",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "spark.apache.org/v1",
            "kind": "SparkApplication",
            "name": APP,
            "uid": app["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{APP}-sparkglass-control.{NAMESPACE}.svc" in sans.get_values_for_type(x509.DNSName)

    # A DataSample made while the driver is only requested waits for it.
    await set_state(kube, APP, "DriverRequested")
    await post_sample(kube, apache_sample("as-parse"))
    await eventually(
        lambda: ready(kube, "as-parse").get("reason") == "WaitingForApplication",
        what="the DataSample to wait",
        operator=operator,
    )
    assert phase(kube, "as-parse") == "Pending" and driver.calls == {}

    # The Apache operator's driver starts; the DataSample completes on it.
    await serve_as_driver(kube, driver, APP, operator)
    await start_pod(kube, driver_pod(app, driver.port))
    await set_state(kube, APP, "RunningHealthy")
    assert await wait_final(kube, "as-parse", operator) == "Complete"
    st = status(kube, "as-parse")
    assert st["totalRecordCount"] == 6 and st["roundId"] == "r1-parse"
    assert (ready(kube, "as-parse")["status"], ready(kube, "as-parse")["reason"]) == (
        "True",
        "RoundComplete",
    )
    # One round, with the Secret's token, over TLS pinned to the Secret's certificate.
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0
    assert set(driver.handshakes) == {f"{APP}-sparkglass-control.{NAMESPACE}.svc"}
    (token,) = driver.tokens
    assert token not in json.dumps(kube.stored(SAMPLES, NAMESPACE, "as-parse"))
    assert token not in operator.output()
    uid = kube.stored(SAMPLES, NAMESPACE, "as-parse")["metadata"]["uid"]
    from sparkglass.service.store import finished_result, open_store

    with open_store(store_url).begin() as session:
        result = finished_result(session, uid)
        assert result is not None and sum(len(s.records) for s in result.samples) == 6

    # Once the Apache operator released the application's resources, a new DataSample is
    # abandoned at once rather than left waiting.
    await set_state(kube, APP, "ResourceReleased")
    await post_sample(kube, apache_sample("as-late"))
    assert await wait_final(kube, "as-late", operator) == "Abandoned"
    assert ready(kube, "as-late")["reason"] == "ApplicationNotRunning"
    assert driver.calls["open:parse"] == 1


async def test_an_application_without_sampling_gets_no_secret_and_a_disabled_datasample(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    app = await create_apache_app(kube, apache_app("quiet", sampling=False))
    await start_pod(kube, driver_pod(app, driver.port))
    await set_state(kube, "quiet", "RunningHealthy")
    await post_sample(kube, apache_sample("quiet-parse", app="quiet"))
    assert await wait_final(kube, "quiet-parse", operator) == "Disabled"
    assert ready(kube, "quiet-parse")["reason"] == "SamplingDisabled"
    message = status(kube, "quiet-parse")["message"]
    assert "spec.sparkConf spark.sparkglass.sampling.enabled is not true" in message, message
    # An application created after it gets its Secret; the one with sampling off never does.
    await create_apache_app(kube, apache_app("loud"))
    await control_secret(kube, "loud", operator)
    assert kube.stored("v1/secrets", NAMESPACE, "quiet-sparkglass-control") is None
    assert driver.calls == {}


async def test_pods_with_the_driver_labels_but_not_owned_by_the_application_get_nothing(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    listener: Listener,
) -> None:
    app = await create_apache_app(kube, apache_app())
    # A live object of another uid for the reference (as an application of the same name,
    # deleted and made again, leaves behind; a dead uid's Pod the garbage collector takes).
    decoy = await create_apache_app(kube, apache_app("decoy", sampling=False))
    await serve_as_driver(kube, driver, APP, operator)
    for owner in ("none", "other-uid"):
        pod = driver_pod(
            app,
            listener.port,
            name=f"fake-{owner}",
            owner=owner,
            other_uid=decoy["metadata"]["uid"],
        )
        await start_pod(kube, pod)
    await set_state(kube, APP, "RunningHealthy")
    await post_sample(kube, apache_sample("lured", applicationStartTimeout="4s"))
    assert await wait_final(kube, "lured", operator) == "Abandoned"
    assert ready(kube, "lured")["reason"] == "ApplicationNotRunning"
    assert "no Running driver Pod" in status(kube, "lured")["message"]
    assert listener.connections == 0 and driver.calls == {}
    # The application's own driver Pod, once it runs, is found among the impostors.
    await start_pod(kube, driver_pod(app, driver.port))
    await post_sample(kube, apache_sample("owned"))
    assert await wait_final(kube, "owned", operator) == "Complete"
    assert listener.connections == 0
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0

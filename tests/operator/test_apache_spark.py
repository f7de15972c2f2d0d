"""DataSamples against Apache Spark Kubernetes operator SparkApplications, with the real
operator process: what only this operator's applications are tested for.

What both operators' applications share (a DataSample completes, sampling off) is
``test_foreign_apps.py``'s, which also says how the stand-in API server and
``tests/support/foreign_apps.py`` play the cluster and the Apache operator (here
:data:`~tests.support.foreign_apps.APACHE_SPARK`: the example under a minimal structural CRD,
a driver Pod with Spark's ``spark-role`` label, the operator's
``spark.operator/spark-app-name`` label and an owner reference to the application's uid
without ``controller``, ``status.currentState.currentStateSummary``). The operator's rules
without a server: ``test_apache_spark_units.py`` and ``test_foreign_apps_units.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.support.datasamples import ScriptedDriver, status, wait_final
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.foreign_apps import (
    APACHE_SPARK,
    ForeignOperator,
    post_sample,
    ready,
    serve_as_driver,
    start_pod,
)
from tests.support.foreign_apps import crds_applied as crds_applied  # the fixture, by name

from .conftest import OperatorProcess, StrictApiServer

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

APP = APACHE_SPARK.app


@pytest.fixture()
def foreign() -> ForeignOperator:
    """The Apache operator's applications only (``crds_applied`` applies their CRD)."""
    return APACHE_SPARK


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
async def test_pods_with_the_driver_labels_but_not_owned_by_the_application_get_nothing(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    listener: Listener,
) -> None:
    """The Kubeflow twin of this test is tests/security/test_operator_kubeflow_trust.py's
    (with a non-controller reference too, which the Apache operator's rule accepts)."""
    app = await APACHE_SPARK.create_app(kube, APACHE_SPARK.example_app())
    # A live object of another uid for the reference (as an application of the same name,
    # deleted and made again, leaves behind; a dead uid's Pod the garbage collector takes).
    decoy = await APACHE_SPARK.create_app(kube, APACHE_SPARK.example_app("decoy", sampling=False))
    await serve_as_driver(kube, driver, APP, operator)
    for owner in ("none", "other-uid"):
        pod = APACHE_SPARK.driver_pod(
            app,
            listener.port,
            name=f"fake-{owner}",
            owner=owner,
            other_uid=decoy["metadata"]["uid"],
        )
        await start_pod(kube, pod)
    await APACHE_SPARK.set_state(kube, APP, "RunningHealthy")
    await post_sample(kube, APACHE_SPARK.sample("lured", applicationStartTimeout="4s"))
    assert await wait_final(kube, "lured", operator) == "Abandoned"
    assert ready(kube, "lured")["reason"] == "ApplicationNotRunning"
    assert "no Running driver Pod" in status(kube, "lured")["message"]
    assert listener.connections == 0 and driver.calls == {}
    # The application's own driver Pod, once it runs, is found among the impostors.
    await start_pod(kube, APACHE_SPARK.driver_pod(app, driver.port))
    await post_sample(kube, APACHE_SPARK.sample("owned"))
    assert await wait_final(kube, "owned", operator) == "Complete"
    assert listener.connections == 0
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0

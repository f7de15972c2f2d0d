"""DataSamples against Kubeflow spark-operator SparkApplications, with the real operator
process: what only this operator's applications are tested for.

What both operators' applications share (a DataSample completes, sampling off) is
``test_foreign_apps.py``'s, which also says how the stand-in API server and
``tests/support/foreign_apps.py`` play the cluster and the spark-operator (here
:data:`~tests.support.foreign_apps.KUBEFLOW`: the example under a minimal CRD, a driver Pod
with Spark's and the spark-operator's labels and a controller owner reference to the
application's uid, ``status.applicationState.state``). The operator's rules without a server:
``test_kubeflow_units.py`` and ``test_foreign_apps_units.py``.
"""

from __future__ import annotations

import pytest

from tests.support.datasamples import (
    ScriptedDriver,
    patch_status,
    phase,
    status,
    wait_final,
)
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service
from tests.support.foreign_apps import KUBEFLOW, ForeignOperator, post_sample, ready, start_pod
from tests.support.foreign_apps import crds_applied as crds_applied  # the fixture, by name

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

APP = KUBEFLOW.app


@pytest.fixture()
def foreign() -> ForeignOperator:
    """Kubeflow's applications only (``crds_applied`` applies their CRD)."""
    return KUBEFLOW


# --------------------------------------------------------------------------- tests
async def test_a_round_is_abandoned_when_the_kubeflow_driver_pod_fails(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await KUBEFLOW.running_app(kube, operator, driver)
    driver.behaviour["parse"] = "hold"
    await post_sample(kube, KUBEFLOW.sample("held"))
    await eventually(lambda: phase(kube, "held") == "InProgress", operator=operator)
    # The kubelet reports the driver's end before the spark-operator's status does.
    await patch_status(
        kube, f"/api/v1/namespaces/{NAMESPACE}/pods/{APP}-driver/status", {"phase": "Failed"}
    )
    assert await wait_final(kube, "held", operator) == "Abandoned"
    assert ready(kube, "held")["reason"] == "ApplicationNotRunning"
    assert "r-1" in status(kube, "held")["message"]


async def test_a_driver_pod_without_the_control_port_fails_naming_the_field(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    app = await KUBEFLOW.create_app(kube, KUBEFLOW.example_app())
    await start_pod(kube, KUBEFLOW.driver_pod(app, None))
    await KUBEFLOW.set_state(kube, APP, "RUNNING")
    await post_sample(kube, KUBEFLOW.sample("no-port"))
    assert await wait_final(kube, "no-port", operator) == "Failed"
    assert ready(kube, "no-port")["reason"] == "ControlPortMissing"
    message = status(kube, "no-port")["message"]
    assert "sg-control" in message and "spec.driver.ports" in message
    assert driver.calls == {}


async def test_an_application_that_ended_abandons_the_datasample(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await KUBEFLOW.create_app(kube, KUBEFLOW.example_app())
    await KUBEFLOW.set_state(kube, APP, "COMPLETED")
    await post_sample(kube, KUBEFLOW.sample("late"))
    assert await wait_final(kube, "late", operator) == "Abandoned"
    assert ready(kube, "late")["reason"] == "ApplicationNotRunning"
    assert driver.calls == {}

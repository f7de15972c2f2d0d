"""The operator through the API server's own failures: bursts of 5xx (an API server
restarting, etcd changing leader) and answers slowed by seconds, on the writes that matter.
A DataSample still reaches one terminal phase with one round at the driver; an application
is still submitted. The stand-in answers as the API server does (``StrictApiServer.fail``,
``slow``)."""

from __future__ import annotations

import pytest

from tests.operator import conftest as operator_tests
from tests.support import datasamples
from tests.support.datasamples import (
    ScriptedDriver,
    patch_status,
    post,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.kube_apiserver import StrictApiServer
from tests.support.sparkapplications import create_app, example_app, set_pod_phase, state

from .conftest import NAMESPACE, OperatorProcess, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

operator = operator_tests.operator
driver = datasamples.driver
result_service = datasamples.result_service
operator_args = datasamples.operator_args

SAMPLES_PATH = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples"


@pytest.mark.parametrize("code", [500, 503, 504])
async def test_a_burst_of_server_errors_on_the_status_write_costs_no_second_round(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, code: int
) -> None:
    await running_app(kube, operator, driver)
    name = f"burst-{code}"
    path = f"{SAMPLES_PATH}/{name}/status"
    kube.fail("PATCH", path, times=3, code=code)
    await post(kube, "datasamples", sample_body(name, "parse"))
    assert await wait_final(kube, name, operator) == "Complete", status(kube, name)
    assert kube.failing["PATCH", path][0] == 0  # the whole burst was answered
    # One round at the driver: a retried write never opens another.
    assert len(driver.rounds) == 1, driver.rounds
    assert status(kube, name)["totalRecordCount"] > 0


async def test_slow_answers_on_the_status_write_cost_no_second_round(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    path = f"{SAMPLES_PATH}/slow/status"
    kube.slow("PATCH", path, times=2, seconds=3)
    await post(kube, "datasamples", sample_body("slow", "parse"))
    assert await wait_final(kube, "slow", operator) == "Complete", status(kube, "slow")
    assert kube.slowed["PATCH", path][0] == 0
    assert len(driver.rounds) == 1, driver.rounds


async def test_a_burst_of_server_errors_on_the_driver_pod_create_still_submits(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    kube.fail("POST", pods, times=3, code=503)
    body = example_app()
    body["metadata"]["name"] = "after-5xx"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "after-5xx") == "SUBMITTED", timeout=60, operator=operator)
    assert kube.failing["POST", pods][0] == 0
    assert kube.stored("v1/pods", NAMESPACE, "after-5xx-driver") is not None


async def test_a_status_write_held_up_past_another_writer_is_refused_not_applied(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """Fencing: a status write carries the version it was computed from, so one held up in
    flight (an operator that lost its Lease while the call was on the wire) cannot overwrite
    what another writer (the new leader) wrote meanwhile; it is refused, and the writer still
    in charge goes on from the object as it now is."""
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "hold"
    await post(kube, "datasamples", sample_body("fenced", "parse"))
    await eventually(lambda: status(kube, "fenced").get("phase") == "InProgress", operator=operator)
    path = f"{SAMPLES_PATH}/fenced/status"
    kube.slow("PATCH", path, times=1, seconds=3)
    driver.release()  # the operator's next status write is the one held up
    await eventually(lambda: kube.slowed["PATCH", path][0] == 0, operator=operator)
    await patch_status(kube, path, {"message": "written by the new leader"})
    await eventually(
        lambda: any(r[1] == path and r[2] == 409 for r in kube.refused),
        what="the held-up write refused on its stale version",
        operator=operator,
    )
    assert await wait_final(kube, "fenced", operator) == "Complete", status(kube, "fenced")
    assert len(driver.rounds) == 1, driver.rounds


async def test_an_application_status_write_held_up_past_another_writer_is_refused(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """The SparkApplication's status is fenced the same way: the write of a pass held up in
    flight is refused (409) once another writer changed the application, and the operator
    goes on from the application as it now is, to the state its driver Pod shows."""
    body = example_app()
    body["metadata"]["name"] = "fenced-app"
    await create_app(kube, body)
    await eventually(
        lambda: state(kube, "fenced-app") == "SUBMITTED", timeout=60, operator=operator
    )
    app_path = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/fenced-app"
    path = f"{app_path}/status"
    kube.slow("PATCH", path, times=1, seconds=3)
    await set_pod_phase(kube, "fenced-app-driver", "Running")  # the pass writes RUNNING
    await eventually(lambda: kube.slowed["PATCH", path][0] == 0, operator=operator)
    # Another writer (a new leader) writes the status while the write is on the wire.
    await patch_status(kube, path, {"sparkApplicationId": "spark-written-by-the-new-leader"})
    await eventually(
        lambda: any(r[1] == path and r[2] == 409 for r in kube.refused),
        what="the held-up application status write refused on its stale version",
        operator=operator,
    )
    await eventually(lambda: state(kube, "fenced-app") == "RUNNING", timeout=60, operator=operator)


async def test_a_failed_write_of_the_final_phase_costs_no_further_attempt(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "busy"  # every open answers 429: a transient failure
    await post(kube, "datasamples", sample_body("gave-up", "parse", backoffLimit=1))
    await eventually(
        lambda: (status(kube, "gave-up").get("retries") or 0) >= 1,
        what="the first retry",
        operator=operator,
    )
    # The next status write is the one that gives up (the retry is 1 s away): it fails once.
    path = f"{SAMPLES_PATH}/gave-up/status"
    kube.fail("PATCH", path, times=1, code=503)
    assert await wait_final(kube, "gave-up", operator) == "Failed", status(kube, "gave-up")
    assert kube.failing["PATCH", path][0] == 0
    # The open and one retry: the failed write was written again, not decided again.
    assert driver.calls["open:parse"] == 2, driver.calls
    assert "gave up after 1 retries" in status(kube, "gave-up")["message"]

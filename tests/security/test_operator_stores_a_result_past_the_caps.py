"""Attack on the shared store through the operator: a driver's result past the caps.

The contract caps a result at 5000 records, 1000 per subtask. The service checks a driver's
answer against the caps before it stores anything (``service/execution/local.py``,
``ResultCaps``), but the operator saves whatever the driver answers into the store the
service reads (``operator/results.py`` → ``save_round``), and the driver is the
application's own code: whoever may create a SparkApplication can have the operator write
any number of records into the one database every namespace shares (and hold them all in
the operator's memory first). Here a driver answers 2 subtasks of 3000 records each.

Expected: the operator applies the same caps (the round fails, or is cut to them) and the
store holds at most 1000 records per subtask and 5000 in all. Fixed: the operator checks
``runtime/contract/result_caps.py`` before it saves and fails the DataSample
(``ResultPastCaps``). The real operator process against the kmock API server, the
scripted driver over HTTPS on 127.0.0.1, a SQLite store file.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from sparkglass.service.store import open_store
from tests.operator import conftest as operator_tests
from tests.operator.conftest import OperatorProcess, StrictApiServer
from tests.support import datasamples
from tests.support.datasamples import (
    SERVICE_URL,
    ScriptedDriver,
    post,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.result_service import ResultService
from tests.support.scripted_driver import Call, Reply

pytestmark = pytest.mark.timeout(180)

operator = operator_tests.operator
driver = datasamples.driver
result_service = datasamples.result_service


def past_the_caps(driver: ScriptedDriver) -> Callable[[Call], Reply | None]:
    """A finished round answered whole, past the caps: every record captured (no 1000 per
    subtask, as the driver plugin keeps), ``subtaskIndex`` and ``maxRecords`` ignored."""

    def answer(call: Call) -> Reply | None:
        if driver.round_vertex(call.path) is None or not driver.authorized(call):
            return None
        body = driver.real_answer(call.path.rsplit("/", 1)[1])
        if body["status"] == "PENDING":
            return None
        samples = [
            {
                "subtaskIndex": part["subtaskIndex"],
                "records": [{**r, "dataType": "string"} for r in part["records"]],
            }
            for part in driver.script("parse").partitions()
        ]
        total = sum(len(s["records"]) for s in samples)
        limit = int(call.query.get("maxRecords", "5000"))
        body.update(
            samples=samples, totalRecordCount=min(total, limit), totalTruncated=total > limit
        )
        return Reply(200, body)

    return answer


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    return ["--service-url", SERVICE_URL, *result_service.operator_args()]


async def test_the_operator_keeps_a_drivers_result_within_the_caps(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    driver.records = 3000  # per subtask, 2 subtasks
    driver.override = past_the_caps(driver)
    await running_app(kube, operator, driver)
    await post(kube, "datasamples", sample_body("flood", "parse", backoffLimit=0))
    assert await wait_final(kube, "flood", operator) == "Failed"
    assert "broke the contract" in status(kube, "flood")["message"]
    with open_store(store_url).begin() as session:
        per_subtask = dict(
            session.execute(
                text("SELECT subtask_index, COUNT(*) FROM sample_records GROUP BY subtask_index")
            ).all()
        )
    assert sum(per_subtask.values()) <= 5000, per_subtask
    assert all(n <= 1000 for n in per_subtask.values()), per_subtask

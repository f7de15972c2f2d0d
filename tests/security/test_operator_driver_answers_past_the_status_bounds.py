"""A driver's answer cannot make a DataSample's status unwritable.

The attack: the driver is the application's own code, so its answers are untrusted. A final
result with a negative counter (or a subtask index past a Java int, or more than 10,000 failed
subtasks) passed the contract model, the operator copied it into the DataSample's status, and
the API server refused every status write (``minimum: 0``): the DataSample stayed
``InProgress`` and was polled forever. The contract model bounds every number as its status
field is, so such an answer is a driver answering an unexpected body: retried within the
DataSample's backoffLimit, then Failed, with no write the API server refuses.
"""

from __future__ import annotations

import pytest

from tests.operator import conftest as operator_tests
from tests.support import datasamples
from tests.support.datasamples import (
    ScriptedDriver,
    post,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.kube_apiserver import StrictApiServer

pytestmark = pytest.mark.timeout(300)

operator = operator_tests.operator
driver = datasamples.driver
result_service = datasamples.result_service
operator_args = datasamples.operator_args


async def test_a_negative_counter_ends_the_datasample_failed_without_a_refused_write(
    kube: StrictApiServer, operator: operator_tests.OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "negative"
    await post(kube, "datasamples", sample_body("negative", "parse", backoffLimit=0))
    assert await wait_final(kube, "negative", operator) == "Failed"
    assert "unexpected body" in status(kube, "negative")["message"]
    refused = [r for r in kube.refused if "/datasamples/negative" in r[1] and "minimum" in r[3]]
    assert not refused, refused

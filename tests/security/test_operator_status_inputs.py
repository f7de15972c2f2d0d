"""Security A7/A8: a DataSample's status is output; writing it steers nothing.

Whoever may patch ``datasamples/status`` (not the operator) tries three things, each against
the real operator process on the kmock API server and a scripted driver:

1. keep a finished DataSample's records in etcd past its TTL by pushing
   ``status.completionTime`` into the future (or removing it);
2. retry a failing round for ever by resetting ``status.retries`` / ``nextAttemptTime``;
3. make a DataSample read (and store) another DataSample's round by planting its
   ``status.roundId``: while the operator is down (so that a restarted process meets it, as
   after any restart or failover), and while it runs.

The operator keeps its own record per DataSample uid and asks the driver which round the
DataSample's uid opened; see ``operator/datasample.py`` ("Status is output"). Deadlines in the
waits are generous for a loaded machine; none is a bare sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.support import datasamples
from tests.support.datasamples import (
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    patch_status,
    phase,
    post,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.result_service import ResultService

pytestmark = pytest.mark.timeout(300)

operator = operator_tests.operator
driver = datasamples.driver


result_service = datasamples.result_service


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    # Records in status (opt-in): what the TTL must remove from etcd.
    return ["--service-url", SERVICE_URL, *result_service.operator_args(), "--records-in-status"]


def status_path(name: str) -> str:
    return f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples/{name}/status"


@contextlib.asynccontextmanager
async def rewriting(
    kube: StrictApiServer, name: str, fields: Callable[[], dict[str, Any]]
) -> AsyncIterator[list[int]]:
    """Keep writing ``fields()`` into the DataSample's status (every operator write, and each
    of these, is a watch event: a single write could be overwritten before it is read).
    Yields a one-item list counting the writes that landed."""
    stop = asyncio.Event()
    writes = [0]

    async def loop() -> None:
        while not stop.is_set():
            if kube.stored(SAMPLES, NAMESPACE, name) is None:
                return
            resp = await kube.patch(
                status_path(name),
                json={"status": fields()},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            writes[0] += resp.status == 200
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)

    task = asyncio.create_task(loop())
    try:
        yield writes
    finally:
        stop.set()
        await task


async def test_a_completion_time_in_the_future_does_not_keep_the_records(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    # 10 s: both must still be there, Complete, when the rewriting starts, however loaded the
    # machine; the deletion is awaited for up to 60 s below.
    await post(kube, "datasamples", sample_body("kept", "parse", ttlSecondsAfterFinished=10))
    await post(kube, "datasamples", sample_body("bare", "parse", ttlSecondsAfterFinished=10))
    assert await wait_final(kube, "kept", operator) == "Complete"
    assert await wait_final(kube, "bare", operator) == "Complete"
    assert status(kube, "kept")["samples"]  # records in etcd: what the TTL must remove
    far = "2999-01-01T00:00:00Z"
    async with (
        rewriting(kube, "kept", lambda: {"completionTime": far}) as pushed,
        rewriting(kube, "bare", lambda: {"completionTime": None}) as removed,
    ):
        started = time.monotonic()
        await eventually(
            lambda: (
                kube.stored(SAMPLES, NAMESPACE, "kept") is None
                and kube.stored(SAMPLES, NAMESPACE, "bare") is None
            ),
            timeout=60,
            what="both deleted at their TTL despite the rewritten completionTime",
            operator=operator,
        )
    assert pushed[0] >= 1 and removed[0] >= 1, "the attack wrote nothing"
    assert time.monotonic() - started < 60


async def test_resetting_retries_does_not_retry_for_ever(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "busy"  # every open answers 429: a transient failure
    await post(kube, "datasamples", sample_body("stubborn", "parse", backoffLimit=2))
    await eventually(
        lambda: (status(kube, "stubborn").get("retries") or 0) >= 1,
        what="the first retry",
        operator=operator,
    )
    async with rewriting(
        kube, "stubborn", lambda: {"retries": 0, "nextAttemptTime": "2000-01-01T00:00:00Z"}
    ) as writes:
        final = await eventually(
            lambda: phase(kube, "stubborn") == "Failed",
            timeout=60,
            what="Failed after backoffLimit retries, whatever status.retries says",
            operator=operator,
        )
    assert final and writes[0] >= 1
    # One open and exactly backoffLimit retries: the reset counter bought no extra attempt.
    assert driver.calls["open:parse"] == 3, driver.calls


async def test_a_planted_round_id_is_never_read_nor_stored(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "hold"
    # The victim's round: open on the driver, its records about to come.
    await post(kube, "datasamples", sample_body("victim", "parse"))
    await eventually(
        lambda: status(kube, "victim").get("roundId"), what="the victim's round", operator=operator
    )
    victim_round = status(kube, "victim")["roundId"]

    # 1. While the operator is down: a DataSample it never saw, with the victim's round id in
    #    its status, as if a predecessor had opened that round for it. The restarted process
    #    asks the driver which round the thief's uid opened: none, so the claim is refused.
    operator.kill()
    await post(kube, "datasamples", sample_body("thief", "parse", maxRecords=5000))
    await patch_status(
        kube,
        status_path("thief"),
        {"phase": "InProgress", "roundId": victim_round, "startTime": "2999-01-01T00:00:00Z"},
    )
    driver.release()
    operator.start()
    assert await wait_final(kube, "victim", operator) == "Complete", status(kube, "victim")
    assert await wait_final(kube, "thief", operator) == "Abandoned", status(kube, "thief")
    thief = status(kube, "thief")
    ready = {c["type"]: c for c in thief["conditions"]}["Ready"]
    assert ready["reason"] == "RoundLost" and victim_round in thief["message"]
    assert not thief.get("samples") and not thief.get("resultsURL"), thief

    # 2. While the operator runs: a round id written over a DataSample's own is not read.
    driver.held = True
    await post(kube, "datasamples", sample_body("thief-live", "parse", columns=["carrier"]))
    await eventually(
        lambda: status(kube, "thief-live").get("roundId") not in (None, victim_round),
        what="the live thief's own round",
        operator=operator,
    )
    own_round = status(kube, "thief-live")["roundId"]
    await patch_status(kube, status_path("thief-live"), {"roundId": victim_round})
    driver.release()
    assert await wait_final(kube, "thief-live", operator) == "Complete", status(kube, "thief-live")
    # It finished its own round; the planted id was overwritten with it.
    live = status(kube, "thief-live")
    live_uid = kube.stored(SAMPLES, NAMESPACE, "thief-live")["metadata"]["uid"]
    assert live["roundId"] == own_round and live["resultsURL"].endswith(f"/rounds/{live_uid}")

    # The victim's round in the store is the victim's (its uid), saved by its own DataSample.
    from sparkglass.service.store import get_round, open_store

    victim_uid = kube.stored(SAMPLES, NAMESPACE, "victim")["metadata"]["uid"]
    with open_store(store_url).begin() as session:
        row = get_round(session, victim_uid)
        assert row is not None and row.external_ref == "victim", row and row.external_ref
        own = get_round(session, live_uid)
        assert own is not None and own.external_ref == "thief-live"
        assert get_round(session, victim_round) is None  # no row under the driver's id
    assert status(kube, "victim")["resultsURL"].endswith(f"/rounds/{victim_uid}")
    assert status(kube, "victim")["totalRecordCount"] == 6

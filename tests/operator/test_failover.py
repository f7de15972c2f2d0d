"""Failover: two operator processes against the emulator, the leader killed mid-round.

The emulator stands in for the API server's side of leader election: it enforces the
``resourceVersion`` precondition of a PATCH (``conftest.StrictApiServer``), which is all
the Lease protocol needs from it; Lease expiry is the candidates' own clock, not the server's.
``test_leader_election.py`` covers the protocol's decisions without a server.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.datasamples import (  # noqa: F401  (fixtures: driver, result_service)
    SERVICE_URL,
    ScriptedDriver,
    driver,
    phase,
    post,
    result_service,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.result_service import ResultService

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)

LEASES = "coordination.k8s.io/v1/leases"
FAST_LEASE = [
    "--lease-duration-seconds", "4",
    "--lease-renew-deadline-seconds", "3",
    "--lease-retry-period-seconds", "0.5",
]  # fmt: skip


def leading(proc: OperatorProcess) -> bool:
    return "leader election: leading" in proc.output()


async def test_the_other_replica_takes_over_a_round_when_the_leader_is_killed(
    kube: StrictApiServer,
    kubeconfig: Path,
    crds_applied: None,
    tmp_path: Path,
    driver: ScriptedDriver,  # noqa: F811
    store_url: str,
    result_service: ResultService,  # noqa: F811
) -> None:
    args = [*result_service.operator_args(), "--service-url", SERVICE_URL, *FAST_LEASE]
    first = OperatorProcess(kubeconfig, tmp_path / "first.log", args, standalone=False)
    second = OperatorProcess(kubeconfig, tmp_path / "second.log", args, standalone=False)
    first.start()
    try:
        await eventually(lambda: leading(first), what="the first replica to lead", operator=first)
        second.start()
        await eventually(
            lambda: "leader election: waiting" in second.output(),
            what="the second replica waiting",
            operator=second,
        )
        await running_app(kube, first, driver)
        driver.behaviour["parse"] = "hold"
        await post(kube, "datasamples", sample_body("failover", "parse"))
        await eventually(
            lambda: phase(kube, "failover") == "InProgress", what="round open", operator=first
        )
        assert not leading(second)
        first.kill()  # the leader dies in the middle of the round
        killed = time.monotonic()
        await eventually(
            lambda: leading(second), timeout=15, what="the takeover within 15 s", operator=second
        )
        took = time.monotonic() - killed
        driver.release()
        assert await wait_final(kube, "failover", second) == "Complete", status(kube, "failover")
        # The new leader asked the driver again with the DataSample's uid and got the same
        # round (status is not input): asked twice, opened once.
        assert driver.calls["open:parse"] == 2 and list(driver.rounds) == ["r-1"]
        assert status(kube, "failover")["roundId"] == "r-1"
        spec = (kube.stored(LEASES, NAMESPACE, "sparkglass-operator") or {})["spec"]
        assert spec["leaseTransitions"] == 1 and took < 15
        from sparkglass.service.store import count_rounds, open_store

        with open_store(store_url).begin() as session:
            assert count_rounds(session) == 1
    finally:
        first.stop()
        second.stop()

"""The Lease protocol's decisions, without a server: a store of Leases that enforces
``resourceVersion`` like the API server, and a clock the test moves.

Covers what the emulator-based tests (``test_failover.py``, ``test_process.py``) cannot pin
down: two candidates writing at the same moment, expiry measured on the candidate's own clock,
the renew deadline, and the timing bounds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkglass.operator.kube.cluster import Conflict, NotFound
from sparkglass.operator.kube.leader_election import ElectionConfig, LeaderElector


class Leases:
    """Leases by name with API-server semantics for create (409 if present) and merge patch
    (409 unless ``metadata.resourceVersion`` is the stored one)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.down = False
        #: Called after a GET answers and before the caller writes (a racing candidate).
        self.between: Any = None

    async def get(self, kind: Any, namespace: str, name: str) -> dict[str, Any]:
        if self.down:
            raise ConnectionError("API server unreachable")
        if name not in self.objects:
            raise NotFound(404, "no lease")
        found = copy.deepcopy(self.objects[name])
        if self.between is not None:
            hook, self.between = self.between, None
            await hook()
        return found

    async def create(self, kind: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.objects:
            raise Conflict(409, "exists")
        self.rv += 1
        self.objects[name] = {
            **copy.deepcopy(body),
            "metadata": {"name": name, "resourceVersion": str(self.rv)},
        }
        return copy.deepcopy(self.objects[name])

    async def patch(
        self, kind: Any, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        if self.down:
            raise ConnectionError("API server unreachable")
        obj = self.objects[name]
        if patch["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise Conflict(409, "the object has been modified")
        self.rv += 1
        obj["spec"].update(patch["spec"])
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CONFIG = ElectionConfig(namespace="ops", lease_duration=15, renew_deadline=10, retry_period=2)


def candidate(leases: Leases, clock: Clock, name: str) -> LeaderElector:
    return LeaderElector(leases, ElectionConfig(namespace="ops", identity=name), clock=clock)  # type: ignore[arg-type]


def holder(leases: Leases) -> str:
    return leases.objects["sparkglass-operator"]["spec"]["holderIdentity"]


async def test_one_leader_and_takeover_only_after_the_duration_on_the_candidates_clock() -> None:
    leases, clock = Leases(), Clock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    assert await a.try_acquire_or_renew() and holder(leases) == "a"
    assert not await b.try_acquire_or_renew()  # held and fresh
    clock.now += 10
    assert await a.try_acquire_or_renew()  # renewed
    assert not await b.try_acquire_or_renew()  # b sees the change: its observation restarts
    clock.now += 14
    assert not await b.try_acquire_or_renew()  # 14 s since b saw the last change
    clock.now += 2
    assert await b.try_acquire_or_renew() and holder(leases) == "b"  # a went silent > 15 s
    spec = leases.objects["sparkglass-operator"]["spec"]
    assert spec["leaseTransitions"] == 1 and spec["acquireTime"] == spec["renewTime"]
    # a comes back: the Lease names b and is fresh, so a does not lead.
    assert not await a.try_acquire_or_renew() and not a.is_leader


async def test_two_candidates_taking_over_at_once_yield_one_leader() -> None:
    leases, clock = Leases(), Clock()
    a, b, c = (candidate(leases, clock, n) for n in "abc")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew() and not await c.try_acquire_or_renew()
    clock.now += 16  # a is dead; b and c both see it expired

    async def c_writes_first() -> None:
        assert await c.try_acquire_or_renew()

    leases.between = c_writes_first  # c writes between b's read and b's write
    assert not await b.try_acquire_or_renew()  # b's write names a stale resourceVersion: 409
    assert holder(leases) == "c" and c.is_leader and not b.is_leader


async def test_a_released_lease_is_taken_at_once_and_creation_races_are_409() -> None:
    leases, clock = Leases(), Clock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    assert await a.try_acquire_or_renew()
    await a.release()
    assert holder(leases) == "" and not a.is_leader
    assert await b.try_acquire_or_renew() and holder(leases) == "b"  # no 15 s wait
    # Created by another candidate between our GET (404) and our create: 409, we do not lead.
    empty = Leases()
    loser = candidate(empty, clock, "x")

    async def created_meanwhile(kind: Any, namespace: str, body: dict[str, Any]) -> Any:
        await Leases.create(empty, kind, namespace, {**body, "spec": {"holderIdentity": "y"}})
        return await Leases.create(empty, kind, namespace, body)

    empty.create = created_meanwhile  # type: ignore[method-assign]
    assert not await loser.try_acquire_or_renew() and not loser.is_leader
    assert holder(empty) == "y"


async def test_a_leader_that_cannot_renew_for_the_deadline_stops() -> None:
    leases, clock = Leases(), Clock()
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:  # the test's clock moves instead of waiting
        sleeps.append(seconds)
        clock.now += seconds

    # The elector's own sleep, not a patched asyncio.sleep: that one is shared by every thread
    # of the test process (a server thread's 0.1 s polls once counted as the elector's waits).
    a = LeaderElector(leases, CONFIG, clock=clock, sleep=sleep)  # type: ignore[arg-type]
    assert await a.acquire() is None and a.is_leader
    leases.down = True
    await a.hold()  # returns: leadership lost
    assert not a.is_leader and sum(sleeps) >= CONFIG.renew_deadline
    assert sum(sleeps) < CONFIG.lease_duration  # stops before another may take over


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"retry_period": 0}, "retry period"),
        ({"renew_deadline": 20}, "renew deadline"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_timing_out_of_range_is_named(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ElectionConfig(**{"namespace": "ops", **kwargs})

"""Unit tests of the DataSample engine's parts: the object cache, the work queue, the API
request labels, and when a DataSample needs its next step (no API server, no process).

The process-level behaviour (steps driven by watch events, no API request for finished
DataSamples, pickup latency) is in ``test_datasample.py`` and ``bench/operator_bench.py``;
the ordering by ``resourceVersion`` is covered here because the emulator's versions are
always delivered in order, so a late watch event never happens there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sparkglass.operator import datasample
from sparkglass.operator.context import OperatorContext
from sparkglass.operator.kube.cluster import request_labels
from sparkglass.operator.kube.object_cache import ObjectCache, newer
from sparkglass.operator.kube.work_queue import WorkQueue
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.timestamps import rfc3339


def obj(name: str, rv: str | None, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"metadata": meta, "status": status}


def test_cache_never_replaces_a_newer_version_by_a_late_event() -> None:
    cache = ObjectCache()
    assert cache.observe(obj("a", "10", phase="Pending"))
    # The operator's own write answered version 12 (status.roundId written)...
    assert cache.observe(obj("a", "12", phase="InProgress", roundId="r1"))
    # ...and the watch delivers version 11 (an older change) afterwards: kept out.
    assert not cache.observe(obj("a", "11", phase="Pending"))
    assert not cache.observe(obj("a", "12", phase="InProgress", roundId="r1"))  # no news
    assert cache.get("ns", "a")["status"]["roundId"] == "r1"
    assert cache.observe(obj("a", "13", phase="Complete"))
    cache.remove("ns", "a")
    assert cache.get("ns", "a") is None and len(cache) == 0


def test_non_integer_versions_follow_the_last_delivery() -> None:
    assert newer(obj("a", "x2"), obj("a", "x1")) and newer(obj("a", "1"), obj("a", None))
    assert newer(obj("a", "5"), None) and not newer(obj("a", "5"), obj("a", "9"))


def test_cache_hands_out_copies_of_what_it_was_given() -> None:
    cache = ObjectCache()
    given = obj("a", "1", phase="Pending")
    cache.observe(given)
    given["status"]["phase"] = "Complete"  # the caller's dict changes later
    assert cache.get("ns", "a")["status"]["phase"] == "Pending"


@pytest.mark.parametrize(
    ("method", "path", "query", "want"),
    [
        (
            "GET",
            "/apis/sparkglass.io/v1alpha1/namespaces/n/datasamples/x",
            None,
            ("get", "datasamples"),
        ),
        ("GET", "/api/v1/namespaces/n/pods", None, ("list", "pods")),
        ("GET", "/api/v1/namespaces/n/pods", [("watch", "true")], ("watch", "pods")),
        (
            "PATCH",
            "/apis/sparkglass.io/v1alpha1/namespaces/n/datasamples/x/status",
            None,
            ("patch", "datasamples/status"),
        ),
        ("POST", "/api/v1/namespaces/n/events", None, ("create", "events")),
        ("DELETE", "/api/v1/namespaces/n/secrets/s", None, ("delete", "secrets")),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l", None, ("update", "leases")),
    ],
)
def test_request_labels_name_verb_and_resource(
    method: str, path: str, query: Any, want: tuple[str, str]
) -> None:
    assert request_labels(method, path, query) == want


async def test_work_queue_delays_deduplicates_and_never_runs_a_key_twice_at_once() -> None:
    runs: list[tuple[str, float]] = []
    active: set[str] = set()
    overlaps = 0
    t0 = time.monotonic()

    async def handle(key: Any) -> float | None:
        nonlocal overlaps
        overlaps += key in active
        active.add(key)
        runs.append((key, time.monotonic() - t0))
        await asyncio.sleep(0.05)
        active.discard(key)
        if key == "poll" and sum(k == "poll" for k, _ in runs) < 3:
            return 0.1  # in flight: come back
        if key == "boom":
            raise RuntimeError("one object's trouble")
        return None

    queue = WorkQueue(handle, workers=4, error_delay=0.2)
    task = asyncio.create_task(queue.run())
    try:
        queue.add("poll")
        queue.add("later", 0.3)
        queue.add("later", 5.0)  # a later due time does not postpone the earlier one
        queue.add("boom")
        for _ in range(5):  # many events of one object while it is processed: one more pass
            queue.add("poll")
            await asyncio.sleep(0.01)
        deadline = time.monotonic() + 10
        while not (
            sum(k == "poll" for k, _ in runs) >= 3
            and any(k == "later" for k, _ in runs)
            and sum(k == "boom" for k, _ in runs) >= 2
        ):
            assert time.monotonic() < deadline, runs
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert overlaps == 0
    later = [t for k, t in runs if k == "later"]
    # Due at 0.3 s, not postponed to 5 s by the later add (a busy machine adds seconds).
    assert len(later) == 1 and 0.25 <= later[0] < 4.0, runs
    boom = [t for k, t in runs if k == "boom"]
    assert boom[1] - boom[0] >= 0.15  # the failed key came back after error_delay
    assert queue.pending() >= 0


async def test_forgotten_key_is_not_processed() -> None:
    seen: list[Any] = []

    async def handle(key: Any) -> None:
        seen.append(key)

    queue = WorkQueue(handle, workers=1)
    queue.add("gone", 0.1)
    queue.forget("gone")
    queue.add("kept", 0.15)
    task = asyncio.create_task(queue.run())
    try:
        deadline = time.monotonic() + 10
        while not seen:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen == ["kept"]
    with pytest.raises(ValueError, match="workers=0"):
        WorkQueue(handle, workers=0)


def step_with(status: dict[str, Any], spec: dict[str, Any] | None = None) -> Any:
    ctx = OperatorContext(
        config=OperatorConfig(poll_seconds=0.5, default_ttl_seconds_after_finished=600),
        cluster=None,  # type: ignore[arg-type]  # next_step_in makes no call
    )
    step = datasample._Step(ctx, "ns", "x")
    step.body = {
        "metadata": {"name": "x"},
        "spec": spec or {"applicationRef": {"name": "a"}, "vertex": "v"},
        "status": status,
    }
    step.status = status
    return step


def rfc(epoch: float) -> str:
    return rfc3339(epoch, "milliseconds")


def test_next_step_only_polls_rounds_in_flight_and_expires_finished_ones() -> None:
    now = time.time()
    assert step_with({"phase": "InProgress", "roundId": "r"}).next_step_in() == 0.5
    retry = step_with({"phase": "Pending", "nextAttemptTime": rfc(now + 4)}).next_step_in()
    assert 3.0 < retry <= 4.0
    done = step_with({"phase": "Complete", "completionTime": rfc(now - 100)}).next_step_in()
    assert 490 < done <= 500  # the default TTL (600 s) after completion: its deletion
    own_ttl = step_with(
        {"phase": "NoData", "completionTime": rfc(now)},
        {"applicationRef": {"name": "a"}, "vertex": "v", "ttlSecondsAfterFinished": 5},
    ).next_step_in()
    assert 4.0 < own_ttl <= 5.0
    # No completion time in the status: the TTL counts from when this process first saw it
    # finished (a status without one must not keep its records forever).
    unknown = step_with({"phase": "Failed"}).next_step_in()
    assert 599 < unknown <= 601
    waiting = step_with({"phase": "Pending"})
    waiting.wait_for = 3.0
    assert waiting.next_step_in() == 3.0
    gone = step_with({"phase": "InProgress"})
    gone.gone = True
    assert gone.next_step_in() is None


def test_pod_watch_selects_the_applications_pods_server_side() -> None:
    from kopf import Resource

    from sparkglass.operator.app import build_settings

    settings = build_settings(OperatorConfig(namespaces=("spark-jobs",), standalone=True))
    # What kopf's watcher sends as labelSelector for the Pod watch (its own lookup), and
    # nothing for other resources.
    pods = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    # Driver and executor Pods alike carry the application label (one watch per resource).
    assert settings.watching.label_selectors.collect(pods) == ["sparkglass.io/application"]
    services = Resource(group="", version="v1", plural="services", kind="Service")
    assert settings.watching.label_selectors.collect(services) == []


def test_cache_drops_the_records_of_a_datasample_status() -> None:
    cache = ObjectCache(drop=(("status", "samples"),))
    big = obj("a", "3", phase="Complete", samples=[{"records": ["x" * 1000] * 60}])
    assert cache.observe(big)
    kept = cache.get("ns", "a")
    assert kept["status"] == {"phase": "Complete"} and big["status"]["samples"]  # caller's intact
    assert OperatorContext(config=OperatorConfig(), cluster=None).samples.observe(big)  # type: ignore[arg-type]


def test_status_read_at_first_sight_can_end_a_datasample_sooner_never_later() -> None:
    """A process meeting a DataSample mid-flight (a restart) takes the status' bookkeeping
    once, within bounds: a TTL counts at the latest from now, a back-off waits at most 60 s,
    a round's start is not later than now, and a roundId is only a claim."""
    now = time.time()
    created = {"creationTimestamp": rfc(now - 3600).split(".")[0] + "Z", "uid": "u1"}

    def adopted(status: dict[str, Any]) -> Any:
        step = step_with(status)
        step.body["metadata"].update(created)
        return step.record

    future = rfc(now + 10 * 365 * 86400)
    assert (
        now - 1 <= adopted({"phase": "Complete", "completionTime": future}).finished_at <= now + 1
    )
    assert now - 1 <= adopted({"phase": "Complete"}).finished_at <= now + 1
    before_creation = adopted({"phase": "Complete", "completionTime": "1970-01-01T00:00:01Z"})
    assert abs(before_creation.finished_at - (now - 3600)) < 2
    assert adopted({"phase": "Complete", "completionTime": "not a time"}).finished_at >= now - 1
    waiting = adopted({"phase": "Pending", "retries": 2, "nextAttemptTime": future})
    assert waiting.retries == 2 and waiting.next_attempt_at <= now + 61
    assert adopted({"phase": "Pending", "retries": -5}).retries == 0
    open_ = adopted({"phase": "InProgress", "roundId": "r7", "startTime": future})
    assert open_.round_id is None and open_.claimed_round_id == "r7"  # read only once confirmed
    assert now - 1 <= open_.opened_at <= now + 1
    assert adopted({"phase": "InProgress", "roundId": 42}).claimed_round_id is None


def test_the_record_is_kept_per_uid_and_status_changes_after_first_sight_are_not_read() -> None:
    step = step_with({"phase": "InProgress", "roundId": "r1"})
    step.body["metadata"]["uid"] = "u1"
    record = step.record
    record.round_id, record.finished_at = "r1", None
    # The next step of the same DataSample, with a status someone else rewrote.
    again = datasample._Step(step.ctx, "ns", "x")
    again.body = {**step.body, "status": {"phase": "Complete", "roundId": "r-other"}}
    again.status = again.body["status"]
    assert again.record is record and again.record.round_id == "r1"
    assert again.next_step_in() == 0.5  # still polled: not finished by a written phase
    # A DataSample re-created under the same name is another uid: a fresh record.
    other = datasample._Step(step.ctx, "ns", "x")
    other.body = {"metadata": {"name": "x", "uid": "u2"}, "spec": step.body["spec"], "status": {}}
    assert other.record is not record


@pytest.mark.parametrize(
    ("patterns", "namespace", "watched"),
    [
        ((), "anything", True),
        (("spark-jobs",), "spark-jobs", True),
        (("spark-jobs",), "other", False),
        (("team-*",), "team-a", True),
        (("myapp-*, !*-pr-*, *pr-123",), "myapp-live", True),
        (("myapp-*, !*-pr-*, *pr-123",), "myapp-pr-123", True),
        (("myapp-*, !*-pr-*, *pr-123",), "myapp-pr-456", False),
        (("myapp-*, !*-pr-*, *pr-123",), "otherapp-pr-123", False),
        (("!*-pr-*, *pr-123",), "otherapp-pr-123", True),
        (("!*-pr-*",), "myapp-pr-456", False),
        (("a", "b"), "b", True),
    ],
)
def test_watched_namespaces_follow_kopfs_pattern_syntax(
    patterns: tuple[str, ...], namespace: str, watched: bool
) -> None:
    """The admission webhook answers only for namespaces the operator watches; it must read
    ``--namespace`` as kopf does (the examples of kopf's documentation)."""
    assert OperatorConfig(namespaces=patterns).watches(namespace) is watched

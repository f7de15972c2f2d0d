"""Cost follows live work: a running SparkApplication costs (almost) no API request once it
settles, while every change to it is still acted on within seconds.

Each resync used to read the application, its ConfigMap, Secret, Service and driver Pod
from the API (5 GETs a pass, about 30 requests a minute per running application at the
default 10 s, 300 at the tests' 1 s; each progress read added 2 more). Now a resync
decides from the watches (a memory pass) and reads everything only every
``--full-resync-seconds`` (default 300), while the operator's watches of its driver Pods,
ConfigMaps and Services bring a full pass at once when one of them changes or goes.

A driver that answers its metrics costs a status write only when they changed, at most every
``--progress-seconds`` (default 60: about one a minute for a streaming pipeline); a
submission is one full pass; a finished application costs nothing when the operator restarts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import attrs
import kmock
import pytest

from sparkglass.operator.settings import DEFAULT_PROGRESS_SECONDS
from tests.support.datasamples import APPS, ScriptedDriver, running_app, serve_driver
from tests.support.datasamples import driver as driver
from tests.support.sparkapplications import (
    create_app,
    example_app,
    patch,
    set_pod_phase,
    state,
)

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

#: The measured window, seconds: at least 30 (with the tests' --resync-seconds 1, thirty
#: resyncs of the application happen in it; the old code made about 5 requests each).
WINDOW_S = 30.0
#: The target: requests per minute of a running application that nothing changes.
MAX_PER_MINUTE = 2.0
#: How soon a change is acted on.
REACTION_S = 5.0
#: The memory pass's witness: a running driver's progress is asked for at every resync
#: (``--progress-seconds 1``); the Pod's address, 127.0.0.1, refuses at once, and the
#: operator logs each refused read.
PROGRESS_UNAVAILABLE = "driver progress unavailable"

#: The window of a driver answering changing metrics at the default --progress-seconds:
#: longer than one interval, so that a publish is due in it.
PUBLISHING_WINDOW_S = DEFAULT_PROGRESS_SECONDS + 5

CONFIG_MAPS_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
SERVICES_PATH = f"/api/v1/namespaces/{NAMESPACE}/services"
SECRETS_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets"
PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


@attrs.define(kw_only=True)
class WatchRecordingApiServer(StrictApiServer):
    """The stand-in, keeping the query of every list and watch of ConfigMaps and Services."""

    child_streams: list[tuple[str, dict[str, str]]] = attrs.field(factory=list, init=False)

    async def __call__(self, raw_request: Any) -> Any:
        if raw_request.method == "GET" and raw_request.path.endswith(("configmaps", "services")):
            self.child_streams.append((raw_request.path, dict(raw_request.query)))
        return await super().__call__(raw_request)


@pytest.fixture()
async def kube() -> AsyncIterator[WatchRecordingApiServer]:
    emulator = WatchRecordingApiServer()
    emulator.resources.load_bundled()
    async with emulator, kmock.Server(emulator):
        yield emulator


def is_stream(method: str, path: str) -> bool:
    """A list or watch of a collection (kopf's watches: open for minutes, not per pass)."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]  # after /api/v1, /apis/<g>/<v>
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return method == "GET" and len(rest) == 1


def requests(kube: StrictApiServer) -> Counter[tuple[str, str]]:
    """Every request the stand-in served but the watches' (and lists'), by method and path."""
    return Counter({k: n for k, n in kube.served.items() if not is_stream(*k)})


async def settle(kube: StrictApiServer, quiet_s: float = 3.0, timeout: float = 15.0) -> None:
    """Wait (up to ``timeout``) for ``quiet_s`` without a request: the operator's own writes
    and the passes their events bring are over. Gives up quietly: code that never settles
    then shows it in the measured window."""
    deadline = time.monotonic() + timeout
    last, since = sum(requests(kube).values()), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        now = sum(requests(kube).values())
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


def uid(kube: StrictApiServer, plural: str, name: str) -> str | None:
    obj = kube.stored(f"v1/{plural}", NAMESPACE, name)
    return obj["metadata"]["uid"] if obj else None


async def recreated(
    kube: StrictApiServer, operator: OperatorProcess, plural: str, path: str, name: str
) -> float:
    """Delete child ``name`` (as someone would); seconds until the operator made it again."""
    old = uid(kube, plural, name)
    assert old is not None, (plural, name)
    resp = await kube.delete(f"{path}/{name}")
    assert resp.status == 200, await resp.text()
    started = time.monotonic()
    await eventually(
        lambda: uid(kube, plural, name) not in (None, old),
        timeout=REACTION_S,
        what=f"{plural}/{name} recreated",
        operator=operator,
    )
    return time.monotonic() - started


async def running(kube: StrictApiServer, operator: OperatorProcess, name: str) -> None:
    body = example_app()
    body["metadata"]["name"] = name
    body["spec"]["restartPolicy"] = {"type": "Never"}
    await create_app(kube, body)
    await eventually(lambda: state(kube, name) == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, f"{name}-driver", "Running", podIP="127.0.0.1")
    await eventually(lambda: state(kube, name) == "RUNNING", operator=operator)


@pytest.mark.parametrize("operator_args", [["--progress-seconds", "1"]])
async def test_a_running_application_costs_no_request_per_resync_and_still_reacts(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    await running(kube, operator, "steady")
    await settle(kube)

    # The window: thirty resyncs (each asks the driver for its progress: the witness that
    # passes ran, as none reads the API any more), and events that change nothing the
    # operator keeps (someone annotates the driver Pod and the ConfigMap; a watch that
    # reconnects and is sent the objects again looks the same): none costs a request.
    before, asked = requests(kube), operator.output().count(PROGRESS_UNAVAILABLE)
    started = time.monotonic()
    touched = Counter[tuple[str, str]]()
    for path in (f"{PODS_PATH}/steady-driver", f"{CONFIG_MAPS_PATH}/steady-sparkglass"):
        await patch(kube, path, {"metadata": {"annotations": {"example.com/seen": "yes"}}})
        touched["PATCH", path] += 1
    await eventually(
        lambda: (
            time.monotonic() - started >= WINDOW_S
            and operator.output().count(PROGRESS_UNAVAILABLE) >= asked + 20
        ),
        timeout=WINDOW_S + 30,
        interval=0.5,
        what=f"{WINDOW_S:.0f} s with resyncs running",
        operator=operator,
    )
    elapsed = time.monotonic() - started
    served = requests(kube) - before - touched
    per_minute = sum(served.values()) * 60 / elapsed
    print(f"running application: {per_minute:.1f} requests/min over {elapsed:.1f} s: {served}")
    assert per_minute <= MAX_PER_MINUTE, (per_minute, elapsed, served)
    assert state(kube, "steady") == "RUNNING"

    # Every change is still acted on at once: a child deleted by someone comes back...
    took = {
        "configmap": await recreated(
            kube, operator, "configmaps", CONFIG_MAPS_PATH, "steady-sparkglass"
        ),
        "service": await recreated(kube, operator, "services", SERVICES_PATH, "steady-driver"),
    }
    # ... a child changed by someone is put back ...
    await patch(kube, f"{CONFIG_MAPS_PATH}/steady-sparkglass", {"data": {"pipeline.json": "{}"}})
    await eventually(
        lambda: (
            (kube.stored("v1/configmaps", NAMESPACE, "steady-sparkglass") or {})
            .get("data", {})
            .get("pipeline.json", "{}")
            != "{}"
        ),
        timeout=REACTION_S,
        what="the ConfigMap put back",
        operator=operator,
    )
    # ... and a driver that fails ends the run (restartPolicy Never).
    started = time.monotonic()
    await set_pod_phase(kube, "steady-driver", "Failed")
    await eventually(
        lambda: state(kube, "steady") == "FAILED",
        timeout=REACTION_S,
        what="FAILED after the driver failed",
        operator=operator,
    )
    took["driver failed"] = time.monotonic() - started
    print("reactions (s):", {k: round(v, 2) for k, v in took.items()})


@pytest.mark.parametrize("operator_args", [["-A", "--full-resync-seconds", "2"]])
async def test_cluster_wide_children_are_watched_and_the_secret_comes_back_at_a_full_pass(
    kube: WatchRecordingApiServer, operator: OperatorProcess
) -> None:
    """Watching every namespace, the ConfigMap and Service watches work the same (selected
    by the API server: the operator's own children, not every ConfigMap and Service); the
    Secret, which the operator may not watch, is made again by the next full pass."""
    await running(kube, operator, "wide")
    watched = {path: query for path, query in kube.child_streams if query.get("watch")}
    assert set(watched) == {"/api/v1/configmaps", "/api/v1/services"}, kube.child_streams
    for path, query in kube.child_streams:
        assert "app.kubernetes.io/managed-by=sparkglass-operator" in query["labelSelector"], path
    await recreated(kube, operator, "configmaps", CONFIG_MAPS_PATH, "wide-sparkglass")
    await recreated(kube, operator, "services", SERVICES_PATH, "wide-driver")
    await recreated(kube, operator, "secrets", SECRETS_PATH, "wide-control-token")
    assert state(kube, "wide") == "RUNNING"


def test_streams_are_told_from_requests() -> None:
    assert is_stream("GET", "/api/v1/namespaces/spark-jobs/pods")
    assert is_stream("GET", "/apis/sparkglass.io/v1alpha1/namespaces/spark-jobs/datasamples")
    assert is_stream("GET", "/api/v1/pods")
    assert is_stream("GET", "/apis/sparkglass.io/v1alpha1/sparkapplications")
    assert not is_stream("GET", "/api/v1/namespaces/spark-jobs/pods/steady-driver")
    assert not is_stream(
        "GET", "/apis/sparkglass.io/v1alpha1/namespaces/spark-jobs/sparkapplications/steady"
    )
    assert not is_stream("PATCH", "/api/v1/namespaces/spark-jobs/configmaps")


def app_status_path(name: str) -> str:
    return f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/{name}/status"


def published(kube: StrictApiServer, name: str) -> dict[str, Any]:
    return ((kube.stored(APPS, NAMESPACE, name) or {}).get("status") or {}).get("progress") or {}


@dataclass
class IdleDriver(ScriptedDriver):
    """A driver whose pipeline does nothing: the same counts on every answer (``batches``
    micro-batches), only its clock (``observedAt``) moves, as a real idle driver's does."""

    batches: int = 3

    def progress(self) -> dict[str, Any]:
        return {
            "state": "ACTIVE",
            "activeQueries": 1,
            "microBatches": self.batches,
            "observedAt": 1_700_000_000_000 + self.calls["progress"],
            "vertices": {
                "parse": {
                    "rowsLastMicroBatch": 5,
                    "rowsPerSecond": 0.0,
                    "rowsTotal": 5 * self.batches,
                }
            },
        }


@pytest.fixture()
async def idle_driver() -> AsyncIterator[IdleDriver]:
    d = IdleDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


@pytest.mark.parametrize("operator_args", [["--progress-seconds", "1"]])
async def test_metrics_that_did_not_change_are_not_written_again(
    kube: StrictApiServer, operator: OperatorProcess, idle_driver: IdleDriver
) -> None:
    """An idle pipeline's driver answers the same counts at every read, with a new
    observedAt: a read every second, and no status write until the counts change."""
    await running_app(kube, operator, idle_driver, "idle")
    first = await eventually(lambda: published(kube, "idle"), what="status.progress")
    await settle(kube)

    before, reads = requests(kube), idle_driver.calls["progress"]
    started = time.monotonic()
    await eventually(
        lambda: (
            time.monotonic() - started >= WINDOW_S / 2
            and idle_driver.calls["progress"] >= reads + 10
        ),
        timeout=WINDOW_S + 30,
        interval=0.5,
        what="reads of the idle driver",
        operator=operator,
    )
    elapsed = time.monotonic() - started
    served = requests(kube) - before
    print(
        f"idle driver: {idle_driver.calls['progress'] - reads} reads, "
        f"{sum(served.values()) * 60 / elapsed:.1f} requests/min over {elapsed:.1f} s: {served}"
    )
    assert served["PATCH", app_status_path("idle")] == 0, served
    assert published(kube, "idle")["publishedAt"] == first["publishedAt"]

    # The first change is written at the next read.
    idle_driver.batches += 1
    await eventually(
        lambda: published(kube, "idle").get("microBatches") == idle_driver.batches,
        timeout=REACTION_S,
        what="the changed counts published",
        operator=operator,
    )


@pytest.mark.parametrize("operator_args", [["--progress-seconds", f"{DEFAULT_PROGRESS_SECONDS:g}"]])
async def test_a_running_application_whose_driver_answers_costs_at_most_two_requests_a_minute(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """A streaming driver's counts change with every micro-batch (the scripted driver's
    grow with every answer), so every read is a change: at the default interval that is
    one status write a minute, read once, within the budget of a running application."""
    await running_app(kube, operator, driver, "stream")
    first = await eventually(lambda: published(kube, "stream"), what="status.progress")
    await settle(kube)

    before, reads = requests(kube), driver.calls["progress"]
    started = time.monotonic()
    await eventually(
        lambda: (
            time.monotonic() - started >= PUBLISHING_WINDOW_S
            and published(kube, "stream").get("microBatches", 0) > first["microBatches"]
        ),
        timeout=PUBLISHING_WINDOW_S + 30,
        interval=0.5,
        what=f"{PUBLISHING_WINDOW_S:.0f} s with a publish in them",
        operator=operator,
    )
    elapsed = time.monotonic() - started
    served = requests(kube) - before
    per_minute = sum(served.values()) * 60 / elapsed
    print(
        f"driver answering: {driver.calls['progress'] - reads} reads, "
        f"{per_minute:.2f} requests/min over {elapsed:.1f} s: {served}"
    )
    assert per_minute <= MAX_PER_MINUTE, (per_minute, elapsed, served)
    assert served["PATCH", app_status_path("stream")] >= 1, served
    # Read when due, not at every resync (each of which could have asked it).
    assert driver.calls["progress"] - reads <= 2, driver.calls


def app_paths(name: str) -> set[str]:
    """The paths of ``name``'s objects: the application (and its status) and its children."""
    apps = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/{name}"
    return {
        apps,
        f"{apps}/status",
        f"{CONFIG_MAPS_PATH}/{name}-sparkglass",
        f"{SECRETS_PATH}/{name}-control-token",
        f"{SERVICES_PATH}/{name}-driver",
        f"{PODS_PATH}/{name}-driver",
    }


def requests_for(kube: StrictApiServer, name: str) -> Counter[tuple[str, str]]:
    """The requests :func:`requests` counts that were about ``name`` or one of its children
    (creates, POSTs to a collection, are not told apart by name)."""
    paths = app_paths(name)
    return Counter({(m, p): n for (m, p), n in requests(kube).items() if p in paths})


def one_app(name: str) -> dict[str, Any]:
    body = example_app()
    body["metadata"]["name"] = name
    body["spec"]["restartPolicy"] = {"type": "Never"}
    return body


async def test_a_submission_reads_each_child_once_and_makes_one_pass(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """From created to SUBMITTED: one full pass (the application, its ConfigMap, Secret,
    Service and driver Pod read once each, then created, the status written once), though
    both kopf's create handler and the resync timer's first run ask for one; the driver
    Pod's event that follows is settled from memory (the Ready condition it would write
    is the one written), and the Secret the pass just read or created is not read again
    before the driver Pod is created."""
    await create_app(kube, one_app("submit"))
    await eventually(lambda: state(kube, "submit") == "SUBMITTED", operator=operator)
    await settle(kube)
    served = requests_for(kube, "submit")
    print(f"one submission: {sum(served.values())} requests: {served}")
    for path in app_paths("submit") - {app_status_path("submit")}:
        assert served["GET", path] <= 1, (path, served)
    assert served["GET", f"{SECRETS_PATH}/submit-control-token"] == 1, served
    # One write; a second only when kopf's first change (its finalizer) fenced it out.
    assert served["PATCH", app_status_path("submit")] <= 2, served
    children = (CONFIG_MAPS_PATH, SECRETS_PATH, SERVICES_PATH, PODS_PATH)
    creates = {path: kube.served["POST", path] for path in children}
    assert set(creates.values()) == {1}, creates
    ready = [
        c
        for c in (kube.stored(APPS, NAMESPACE, "submit") or {})["status"]["conditions"]
        if c["type"] in ("Ready", "Submitted")
    ]
    assert {c["type"]: c["reason"] for c in ready} == {
        "Ready": "DriverPending",
        "Submitted": "DriverPodCreated",
    }, ready


async def test_a_finished_application_costs_no_request_when_the_operator_restarts(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """A COMPLETED application (its driver Pod still there, Succeeded) is neither read nor
    written by a restarted operator: its resume, and its driver Pod's event from the first
    listing, are settled from what the watches list. A running one is still resumed."""
    await create_app(kube, one_app("finished"))
    await eventually(lambda: state(kube, "finished") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "finished-driver", "Succeeded")
    await eventually(lambda: state(kube, "finished") == "COMPLETED", operator=operator)
    await running(kube, operator, "live")
    await settle(kube)

    operator.stop()
    before, before_live = requests_for(kube, "finished"), requests_for(kube, "live")
    operator.start()
    # The witness that the new process listed everything and handled what it listed: the
    # running application is resumed with a full pass, which reads it.
    await eventually(
        lambda: (
            requests_for(kube, "live")["GET", f"{PODS_PATH}/live-driver"]
            > before_live["GET", f"{PODS_PATH}/live-driver"]
        ),
        what="the running application resumed",
        operator=operator,
    )
    await settle(kube)
    served = requests_for(kube, "finished") - before
    print(f"finished application on resume: {served}")
    assert not served, served
    assert state(kube, "finished") == "COMPLETED"

    # Still acted on: a spec change runs it again.
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/finished",
        {"spec": {"arguments": ["--again"]}},
    )
    await eventually(
        lambda: state(kube, "finished") in ("INVALIDATING", "SUBMITTED"),
        timeout=REACTION_S * 3,
        what="a changed finished application run again",
        operator=operator,
    )

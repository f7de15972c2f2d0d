"""Cost follows live work: a running SparkApplication costs (almost) no API request once it
settles, while every change to it is still acted on within seconds.

Each resync used to read the application, its ConfigMap, Secret, Service and driver Pod
from the API (5 GETs a pass, about 30 requests a minute per running application at the
default 10 s, 300 at the tests' 1 s; each progress read added 2 more). Now a resync
decides from the watches (a memory pass) and reads everything only every
``--full-resync-seconds`` (default 300), while the operator's watches of its driver Pods,
ConfigMaps and Services bring a full pass at once when one of them changes or goes.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import attrs
import kmock
import pytest

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

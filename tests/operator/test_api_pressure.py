"""What the operator shows and how it paces itself when the API server pushes back.

* A driver Pod create refused for now (a full ResourceQuota, throttling past the client's
  retries) leaves the application's state alone and says why in the ``Submitted`` and
  ``Ready`` conditions, with the API server's message, until ``startTimeoutSeconds``.
* A 403 from RBAC on a child backs the application's passes off (5 s, 10 s, ... 5 min)
  instead of repeating the refused request every few seconds, naming the verb and resource.
* The client's token bucket: ``--api-burst`` requests at once, then ``--api-qps``.
* Metrics: API requests by verb, resource and code, the submission latency, the rate
  limit's waits, the work queue's depth and age.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import attrs
import httpx
import kmock
import kubernetes
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from sparkglass.operator.kube.cluster import CONFIG_MAPS, PODS, Cluster
from sparkglass.operator.kube.work_queue import WorkQueue
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.timestamps import rfc3339
from tests.support.sparkapplications import (
    APPS_PATH,
    app_status,
    create_app,
    example_app,
    patch,
    set_pod_phase,
    state,
)

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
CONFIG_MAPS_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
#: What the API server (and the stand-in, held to it) answers a create.
CREATED = "201"


@attrs.define(kw_only=True)
class RbacApiServer(StrictApiServer):
    """The stand-in with RBAC refusals, scripted: requests in :attr:`forbidden` get the
    authorizer's 403, as for a ServiceAccount whose Role lacks the verb."""

    forbidden: set[tuple[str, str]] = attrs.field(factory=set, init=False)

    async def __call__(self, raw_request: Any) -> Any:
        if (raw_request.method, raw_request.path) in self.forbidden:
            self.served[raw_request.method, raw_request.path] += 1
            await raw_request.read()
            plural = raw_request.path.rstrip("/").split("/")[-1]
            return self._status_response(
                403,
                "Forbidden",
                f'{plural} is forbidden: User "system:serviceaccount:sparkglass-system:'
                f'sparkglass-operator" cannot create resource "{plural}" in API group "" '
                f'in the namespace "{NAMESPACE}"',
            )
        return await super().__call__(raw_request)


@pytest.fixture()
async def kube(tmp_path: Path) -> AsyncIterator[RbacApiServer]:
    emulator = RbacApiServer()
    emulator.resources.load_bundled()
    async with emulator, kmock.Server(emulator):
        yield emulator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def metrics_port() -> int:
    return free_port()


@pytest.fixture()
def operator_args(metrics_port: int) -> list[str]:
    return ["--metrics-port", str(metrics_port)]


def condition(kube: StrictApiServer, name: str, type: str) -> dict[str, Any]:
    conditions = app_status(kube, name).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type), {})


async def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The operator's metrics: (sample name, labels) -> value."""
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_a_full_quota_shows_in_the_conditions_until_the_start_timeout(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    kube.pod_quota[NAMESPACE] = 1
    first = example_app()
    first["metadata"]["name"] = "first"
    await create_app(kube, first)
    await eventually(lambda: state(kube, "first") == "SUBMITTED", operator=operator)
    queued = example_app()
    queued["metadata"]["name"] = "queued"
    queued["spec"]["restartPolicy"] = {"type": "Never"}
    await create_app(kube, queued)
    submitted = await eventually(
        lambda: (
            condition(kube, "queued", "Submitted").get("reason") == "QuotaExceeded"
            and condition(kube, "queued", "Submitted")
        ),
        what="Submitted=False QuotaExceeded",
        operator=operator,
    )
    assert submitted["status"] == "False"
    # The API server's own message, and until when it is retried.
    assert "exceeded quota: compute" in submitted["message"], submitted
    assert "startTimeoutSeconds" in submitted["message"], submitted
    ready = condition(kube, "queued", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "QuotaExceeded")
    assert state(kube, "queued") in (None, "")  # not failed, not submitted: waiting
    # The wait began longer ago than startTimeoutSeconds (the test moves the condition's
    # clock back an hour): the submission fails, naming the timeout and the quota.
    conditions = app_status(kube, "queued")["conditions"]
    for c in conditions:
        if c["type"] == "Submitted":
            c["lastTransitionTime"] = rfc3339(time.time() - 3600)
    await patch(kube, f"{APPS_PATH}/queued/status", {"status": {"conditions": conditions}})
    await eventually(lambda: state(kube, "queued") == "SUBMISSION_FAILED", operator=operator)
    message = app_status(kube, "queued")["applicationState"]["errorMessage"]
    assert "startTimeoutSeconds (600 s)" in message and "exceeded quota" in message, message
    assert condition(kube, "queued", "Submitted")["reason"] == "SubmissionFailed"
    assert kube.stored("v1/pods", NAMESPACE, "queued-driver") is None


async def test_throttling_shows_in_the_conditions_and_the_metrics_count_it(
    kube: StrictApiServer, operator: OperatorProcess, metrics_port: int
) -> None:
    """A 429 storm on the driver Pod's create, past the client's retries: the application
    says Throttled, with the API server's message, and is not failed; once the storm ends
    the Pod is created. The metrics count each answer by verb, resource and code, and the
    submission's latency once the driver runs."""
    kube.throttle("POST", PODS_PATH, times=10_000, retry_after=0)
    body = example_app()
    body["metadata"]["name"] = "storm"
    await create_app(kube, body)
    submitted = await eventually(
        lambda: (
            condition(kube, "storm", "Submitted").get("reason") == "Throttled"
            and condition(kube, "storm", "Submitted")
        ),
        what="Submitted=False Throttled",
        operator=operator,
    )
    assert "Too many requests" in submitted["message"], submitted
    assert state(kube, "storm") in (None, "")
    kube.throttle("POST", PODS_PATH, times=0)
    await eventually(lambda: state(kube, "storm") == "SUBMITTED", operator=operator)
    created = condition(kube, "storm", "Submitted")
    assert (created["status"], created["reason"]) == ("True", "DriverPodCreated")
    await set_pod_phase(kube, "storm-driver", "Running", podIP="10.0.0.9")
    await eventually(lambda: state(kube, "storm") == "RUNNING", operator=operator)

    async def submission_observed() -> dict[Any, float] | None:
        samples = await scrape(metrics_port)
        return samples if sample(samples, "sparkglass_operator_submission_seconds_count") else None

    samples = await eventually(submission_observed, what="submission latency", operator=operator)
    assert sample(samples, "sparkglass_operator_submission_seconds_count") == 1
    requests = "sparkglass_operator_api_requests_total"
    # Each refused attempt counts: at least the client's 5 of the first pass.
    assert sample(samples, requests, verb="create", resource="pods", code="429") >= 5
    assert sample(samples, requests, verb="create", resource="pods", code=CREATED) == 1
    assert sample(samples, requests, verb="get", resource="sparkapplications", code="200") >= 1
    assert sample(samples, requests, verb="patch", resource="sparkapplications/status", code="200")
    assert sample(samples, "sparkglass_operator_api_request_seconds_count", verb="create") >= 6
    assert sample(samples, "sparkglass_operator_api_rate_limit_wait_seconds_count") >= 6


async def test_an_rbac_refusal_backs_off_and_names_the_verb_and_resource(
    kube: RbacApiServer, operator: OperatorProcess
) -> None:
    """A Role without ``create configmaps``: the pass is refused. It was retried every 5 s
    (and every resync) forever; now the next attempt waits 5 s, then 10 s, ... up to 5 min,
    and Ready says which verb on which resource the operator lacks. Once granted, the next
    attempt goes on."""
    kube.forbidden.add(("POST", CONFIG_MAPS_PATH))
    body = example_app()
    body["metadata"]["name"] = "norights"
    await create_app(kube, body)
    first = await eventually(
        lambda: (
            condition(kube, "norights", "Ready").get("reason") == "Forbidden"
            and condition(kube, "norights", "Ready")
        ),
        what="Ready=False Forbidden",
        operator=operator,
    )
    assert first["status"] == "False"
    assert "may not create configmaps in namespace" in first["message"], first
    assert "RBAC" in first["message"] and "next attempt in 5 s" in first["message"], first
    assert kube.served["POST", CONFIG_MAPS_PATH] == 1
    # The second refusal doubles the wait. Resyncs run every second meanwhile: without the
    # back-off each would have been refused again.
    await eventually(
        lambda: "next attempt in 10 s" in condition(kube, "norights", "Ready").get("message", ""),
        timeout=30,
        what="the second attempt, 5 s later",
        operator=operator,
    )
    assert kube.served["POST", CONFIG_MAPS_PATH] == 2
    kube.forbidden.clear()  # the Role is fixed
    await eventually(
        lambda: state(kube, "norights") == "SUBMITTED",
        timeout=30,
        what="the attempt after 10 s",
        operator=operator,
    )
    assert kube.served["POST", CONFIG_MAPS_PATH] == 3
    ready = condition(kube, "norights", "Ready")
    assert ready["reason"] == "DriverPending", ready


def client(kube: StrictApiServer, **options: Any) -> Cluster:
    """The operator's own API client, pointed at the stand-in."""
    configuration = kubernetes.client.Configuration()
    configuration.host = str(kube.url).rstrip("/")
    return Cluster(configuration, **options)


def counted(verb: str, resource: str, code: str) -> float:
    labels = {"verb": verb, "resource": resource, "code": code}
    return REGISTRY.get_sample_value("sparkglass_operator_api_requests_total", labels) or 0.0


async def test_api_requests_are_counted_by_verb_resource_and_code(kube: StrictApiServer) -> None:
    cluster = client(kube, throttled_attempts=2)
    path = f"{PODS_PATH}/none"
    before = {
        key: counted(*key)
        for key in (
            ("get", "pods", "404"),
            ("get", "pods", "429"),
            ("create", "configmaps", CREATED),
            ("create", "configmaps", "409"),
        )
    }
    kube.throttle("GET", path, times=1, retry_after=0)
    assert await cluster.find(PODS, NAMESPACE, "none") is None  # a 429, then a 404
    body = {"metadata": {"name": "counted"}, "data": {"k": "v"}}
    await cluster.create(CONFIG_MAPS, NAMESPACE, body)
    with pytest.raises(Exception, match="409"):
        await cluster.create(CONFIG_MAPS, NAMESPACE, body)
    cluster.close()
    after = {key: counted(*key) for key in before}
    assert {key: after[key] - before[key] for key in before} == {
        ("get", "pods", "404"): 1,
        ("get", "pods", "429"): 1,
        ("create", "configmaps", CREATED): 1,
        ("create", "configmaps", "409"): 1,
    }


async def test_a_burst_goes_out_at_once_and_the_rest_at_qps(kube: StrictApiServer) -> None:
    """``--api-qps 5 --api-burst 10``: of 20 requests at once, 10 take a token at once and
    10 wait for the bucket to refill at 5 per second (2 s)."""
    name = "sparkglass_operator_api_rate_limit_wait_seconds"

    def waits() -> tuple[float, float]:
        quick = REGISTRY.get_sample_value(f"{name}_bucket", {"le": "0.1"}) or 0.0
        return quick, REGISTRY.get_sample_value(f"{name}_count") or 0.0

    quick_before, count_before = waits()
    cluster = client(kube, qps=5, burst=10)
    started = time.monotonic()
    answers = await asyncio.gather(*(cluster.find(PODS, NAMESPACE, "none") for _ in range(20)))
    elapsed = time.monotonic() - started
    cluster.close()
    assert answers == [None] * 20
    quick, count = waits()
    assert (quick - quick_before, count - count_before) == (10, 20)
    assert elapsed >= 1.8, elapsed


async def test_background_requests_take_half_the_rate_and_never_hold_up_the_rest(
    kube: StrictApiServer,
) -> None:
    """``--api-qps 10 --api-burst 10``: the timer's full resyncs (background) take at most
    5 per second, in bursts of 5, so 30 of them take at least 5 s; requests someone waits on
    (a DataSample's pickup) started meanwhile get the other half and all finish first."""
    cluster = client(kube, qps=10, burst=10)
    done: list[str] = []

    async def one(c: Cluster, what: str) -> None:
        assert await c.find(PODS, NAMESPACE, "none") is None
        done.append(what)

    started = time.monotonic()
    behind = asyncio.gather(*(one(cluster.background(), "background") for _ in range(30)))
    await asyncio.sleep(0.5)  # the background burst has taken its tokens
    await asyncio.gather(*(one(cluster, "foreground") for _ in range(5)))
    assert done.count("foreground") == 5 and done.count("background") < 30, done
    await behind
    elapsed = time.monotonic() - started
    cluster.close()
    assert elapsed >= 4.5, elapsed  # 5 at once, then 25 at 5 per second


@pytest.fixture()
def probe_queue() -> Iterator[tuple[WorkQueue, asyncio.Event]]:
    release = asyncio.Event()

    async def handle(_: Any) -> float | None:
        await release.wait()
        return None

    yield WorkQueue(handle, workers=1, name="probe"), release
    release.set()


async def test_work_queue_depth_and_age_are_exported(
    probe_queue: tuple[WorkQueue, asyncio.Event],
) -> None:
    """One worker held by the first key: the next two wait (depth 2, aging), one more is
    due in a minute (delayed)."""
    queue, release = probe_queue

    def gauge(metric: str) -> float | None:
        return REGISTRY.get_sample_value(
            f"sparkglass_operator_workqueue_{metric}", {"queue": "probe"}
        )

    runner = asyncio.create_task(queue.run())
    try:
        for key in ("a", "b", "c"):
            queue.add(key)
        queue.add("later", delay=60)
        await eventually(lambda: gauge("depth") == 2, timeout=10, what="two keys waiting")
        assert gauge("delayed") == 1
        first_age = gauge("oldest_seconds") or 0.0
        await eventually(
            lambda: (gauge("oldest_seconds") or 0.0) > first_age + 0.2,
            timeout=10,
            what="the oldest key aging",
        )
        release.set()
        await eventually(lambda: gauge("depth") == 0, timeout=10, what="the queue drained")
        assert gauge("oldest_seconds") == 0 and gauge("delayed") == 1
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"api_qps": 0.5}, "api_qps=0.5 is out of range: allowed 1 to 1000 requests per second"),
        ({"api_qps": 1001}, "api_qps=1001 is out of range"),
        ({"api_burst": 0}, "api_burst=0 is out of range: allowed 1 to 5000 requests at once"),
        ({"api_burst": 5001}, "api_burst=5001 is out of range"),
    ],
)
def test_the_budget_settings_name_the_field_and_range(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        OperatorConfig(standalone=True, **options)


def test_the_burst_option_names_itself_and_its_range() -> None:
    from typer.testing import CliRunner

    from sparkglass import cli

    if not (cli.app.registered_commands or cli.app.registered_groups):
        cli._register()
    result = CliRunner().invoke(
        cli.app, ["operator", "run", "--standalone"], env={"SPARKGLASS_API_BURST": "0"}
    )
    assert result.exit_code == 2
    flat = " ".join(result.output.replace("│", " ").split())  # rich's box, unwrapped
    assert "'--api-burst'" in flat and "greater than or equal to 1" in flat, result.output


def test_only_a_full_resync_that_is_due_is_background_work() -> None:
    """A timer pass goes at half the rate only when this process made a full pass of the
    application and that one is ``full_resync_seconds`` old: never the first pass (a
    submission), never one the application's change brought. As many run at once as half
    the rate keeps busy (20 QPS: 2), so each holds its application's lock briefly."""
    from sparkglass.operator import sparkapplication
    from sparkglass.operator.context import ApplicationRecord, OperatorContext

    config = OperatorConfig(standalone=True, api_qps=20, full_resync_seconds=300)
    ctx = OperatorContext(config=config, cluster=cast(Cluster, None))
    key = ("spark-jobs", "flights")
    assert not sparkapplication._full_resync_due(ctx, key)  # never seen: its first pass
    ctx.app_records[key] = ApplicationRecord()
    assert not sparkapplication._full_resync_due(ctx, key)  # no full pass yet
    ctx.app_records[key].checked_at = time.monotonic() - 10
    assert not sparkapplication._full_resync_due(ctx, key)
    ctx.app_records[key].checked_at = time.monotonic() - 301
    assert sparkapplication._full_resync_due(ctx, key)
    gate = sparkapplication._background_passes(ctx)
    assert gate is sparkapplication._background_passes(ctx)  # one per process
    assert gate._value == 2

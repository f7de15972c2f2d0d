"""The operator under a real API server's load and faults: a 429 from API Priority and
Fairness is retried after its ``Retry-After``; a ResourceQuota with no room for the driver
Pod queues the application instead of ending it as ``SUBMISSION_FAILED`` (the stand-in
answers both as the API server does: ``StrictApiServer.throttle``, ``pod_quota``); a
DataSample deleted in a watch gap is forgotten; an ended application costs no request per
resync."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kubernetes
import pytest
import yaml

from sparkglass.operator.kube.cluster import PODS, ApiError, Cluster
from tests.support.sparkapplications import (
    APPS,
    APPS_PATH,
    app_status,
    create,
    create_app,
    example_app,
    patch,
    set_pod_phase,
    state,
)

from .conftest import EXAMPLES_DIR, NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
SAMPLES = "sparkglass.io/v1alpha1/datasamples"
SAMPLES_PATH = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples"


def pod_creates(kube: StrictApiServer) -> int:
    return kube.served["POST", PODS_PATH]


# A long resync: a create retried only by kopf (TemporaryError, delay at least the resync)
# would come a minute later, past the deadlines below.
@pytest.mark.parametrize("operator_args", [["--resync-seconds", "60"]])
async def test_a_throttled_driver_pod_create_is_retried_after_retry_after(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    kube.throttle("POST", PODS_PATH, times=2, retry_after=1)
    body = example_app()
    body["metadata"]["name"] = "throttled"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "throttled") == "SUBMITTED", timeout=30, operator=operator)
    assert kube.throttled["POST", PODS_PATH][0] == 0  # both 429s were answered
    assert pod_creates(kube) == 3  # two throttled, then the one that created the Pod
    assert kube.stored("v1/pods", NAMESPACE, "throttled-driver") is not None
    output = operator.output()
    assert "SUBMISSION_FAILED" not in output and "failed temporarily" not in output


@pytest.mark.parametrize("operator_args", [["--resync-seconds", "60"]])
async def test_a_throttled_read_is_retried_in_the_client(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """A GET answered 429 (the driver Pod's, read on every pass) is retried in the client,
    not left to a pass a resync later."""
    body = example_app()
    body["metadata"]["name"] = "read"
    kube.throttle("GET", f"{PODS_PATH}/read-driver", times=2, retry_after=1)
    await create_app(kube, body)
    await eventually(lambda: state(kube, "read") == "SUBMITTED", timeout=30, operator=operator)
    assert kube.throttled["GET", f"{PODS_PATH}/read-driver"][0] == 0
    assert "failed temporarily" not in operator.output()


async def test_a_full_quota_queues_the_driver_until_another_run_ends(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    kube.pod_quota[NAMESPACE] = 1
    first = example_app()
    first["metadata"]["name"] = "first"
    await create_app(kube, first)
    await eventually(lambda: state(kube, "first") == "SUBMITTED", operator=operator)
    queued = example_app()
    queued["metadata"]["name"] = "queued"
    await create_app(kube, queued)
    # Refused by the quota at least twice: retried, and the run is not over.
    await eventually(lambda: pod_creates(kube) >= 3, what="a second create", operator=operator)
    assert state(kube, "queued") != "SUBMISSION_FAILED"
    assert "exceeded quota" in operator.output()
    assert kube.stored("v1/pods", NAMESPACE, "queued-driver") is None
    await set_pod_phase(kube, "first-driver", "Succeeded")  # room again: the first run ended
    await eventually(lambda: state(kube, "queued") == "SUBMITTED", operator=operator)
    assert kube.stored("v1/pods", NAMESPACE, "queued-driver") is not None


async def test_a_driver_over_the_quota_on_its_own_fails_the_submission(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """Nothing else uses the quota and the driver still does not fit: waiting would never
    end, so the submission fails, naming the quota."""
    kube.pod_quota[NAMESPACE] = 0
    body = example_app()
    body["metadata"]["name"] = "toobig"
    # No re-submission (the example's two, 20 s apart, only repeat the same refusal).
    body["spec"]["restartPolicy"]["onSubmissionFailureRetries"] = 0
    await create_app(kube, body)
    await eventually(lambda: state(kube, "toobig") == "SUBMISSION_FAILED", operator=operator)
    message = app_status(kube, "toobig")["applicationState"]["errorMessage"]
    assert "exceeded quota" in message, message


async def test_a_datasample_deleted_while_the_watch_was_away_is_forgotten(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """A delete in a watch's 410 gap leaves a ghost in the operator's cache: it was stepped
    again and again, each status write a 404 turned into a retry every 2 s, forever. Now one
    404 on its own object, confirmed by a read, forgets it."""
    await create_app(kube, example_app())  # never started: the DataSample waits for it
    sample = yaml.safe_load((EXAMPLES_DIR / "flights-datasample.yaml").read_text())
    sample["metadata"]["name"] = "ghost"
    sample["spec"]["applicationRef"] = {"name": "flights"}
    await create(kube, SAMPLES_PATH, sample)
    await eventually(
        lambda: (kube.stored(SAMPLES, NAMESPACE, "ghost") or {}).get("status"),
        what="the DataSample's first status",
        operator=operator,
    )
    kube.vanish(SAMPLES, NAMESPACE, "ghost")
    writes = f"{SAMPLES_PATH}/ghost/status"
    # Woken by its application (a step is due anyway while it waits): one write, a 404.
    await patch(kube, f"{APPS_PATH}/flights", {"metadata": {"labels": {"touched": "yes"}}})
    await eventually(lambda: "datasample gone" in operator.output(), operator=operator)
    settled = kube.served["PATCH", writes]
    await asyncio.sleep(5)  # what must not happen: no condition to wait for, only a span
    assert kube.served["PATCH", writes] == settled


def requests_naming(kube: StrictApiServer, app: str) -> int:
    """Requests the stand-in served on ``app``'s objects and children (any method)."""
    return sum(
        n
        for (_, path), n in kube.served.items()
        if any(part == app or part.startswith(f"{app}-") for part in path.split("/"))
    )


# --full-resync-seconds 0: every resync of the running application reads it from the API
# (the witness below); a running one's own cost: test_api_cost.py.
@pytest.mark.parametrize("operator_args", [["--full-resync-seconds", "0"]])
async def test_an_ended_application_costs_no_request_per_resync(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """Each resync used to make the same GETs (the application, its ConfigMap, Secret,
    Service and driver Pod) for a COMPLETED application as for a running one. Now an ended
    one with its spec observed and no TTL due gets none, while a running one beside it keeps
    its passes (the witness that resyncs happened: --resync-seconds 1 in these tests)."""
    for name in ("done", "live"):
        body = example_app()
        body["metadata"]["name"] = name
        await create_app(kube, body)
        await eventually(lambda n=name: state(kube, n) == "SUBMITTED", operator=operator)
        await set_pod_phase(kube, f"{name}-driver", "Running", podIP="10.0.0.9")
        await eventually(lambda n=name: state(kube, n) == "RUNNING", operator=operator)
    await set_pod_phase(kube, "done-driver", "Succeeded")
    await eventually(lambda: state(kube, "done") == "COMPLETED", operator=operator)

    def live_gets() -> int:
        return kube.served["GET", f"{APPS_PATH}/live"]

    start_live = live_gets()
    await eventually(lambda: live_gets() >= start_live + 1, operator=operator)
    before = requests_naming(kube, "done")
    start_live = live_gets()
    await eventually(lambda: live_gets() >= start_live + 3, what="3 passes", operator=operator)
    assert requests_naming(kube, "done") == before
    assert state(kube, "done") == "COMPLETED"
    # Its events still count: a spec change brings a pass, and a TTL once due its deletion.
    await patch(kube, f"{APPS_PATH}/done", {"spec": {"timeToLiveSeconds": 1}})
    await eventually(
        lambda: kube.stored(APPS, NAMESPACE, "done") is None,
        what="TTL deletion once due",
        timeout=60,
        operator=operator,
    )


def client(kube: StrictApiServer, **options: Any) -> Cluster:
    """The operator's own API client, pointed at the stand-in."""
    configuration = kubernetes.client.Configuration()
    configuration.host = str(kube.url).rstrip("/")
    return Cluster(configuration, **options)


async def test_the_client_keeps_to_its_qps_and_bursts(kube: StrictApiServer) -> None:
    """``--api-qps``: at 10 per second, 30 requests at once take at least 2 s (10 at once
    from the full bucket, then 10 per second), and all are answered."""
    cluster = client(kube, qps=10)
    started = time.monotonic()
    answers = await asyncio.gather(*(cluster.find(PODS, NAMESPACE, "none") for _ in range(30)))
    elapsed = time.monotonic() - started
    cluster.close()
    assert answers == [None] * 30
    assert elapsed >= 1.8, elapsed  # 20 past the burst at 10/s (the bucket's leak is even)


async def test_a_429_storm_ends_after_the_attempts_with_a_transient_error(
    kube: StrictApiServer,
) -> None:
    """A call throttled past its attempts reaches the caller as a transient 429 carrying the
    Retry-After; one attempt (the Lease's client) waits for none."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/none"
    kube.throttle("GET", path, times=100, retry_after=0)
    cluster = client(kube, throttled_attempts=3)
    with pytest.raises(ApiError) as caught:
        await cluster.get(PODS, NAMESPACE, "none")
    assert caught.value.status == 429 and caught.value.transient
    assert caught.value.retry_after == 0
    assert kube.served["GET", path] == 3
    lease_like = client(kube, throttled_attempts=1)
    with pytest.raises(ApiError):
        await lease_like.get(PODS, NAMESPACE, "none")
    assert kube.served["GET", path] == 4
    cluster.close()
    lease_like.close()


@pytest.mark.parametrize(
    ("status", "message", "transient"),
    [
        (0, "connection refused", True),
        (503, "unavailable", True),
        (429, "Too many requests", True),
        (
            403,
            'pods "x" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=1, '
            "limited: pods=1",
            True,
        ),
        (
            403,
            'pods "x" is forbidden: exceeded quota: compute, requested: limits.cpu=8,pods=1, '
            "used: limits.cpu=0,pods=0, limited: limits.cpu=4,pods=10",
            False,  # the request alone is over: it never fits
        ),
        (403, 'pods "x" is forbidden: status unknown for quota: compute, resources: pods', True),
        (403, 'admission webhook "v" denied the request: exceeded quota: ours', False),
        (403, 'pods "x" is forbidden: violates PodSecurity "restricted:latest"', False),
        (403, "forbidden: User cannot create resource pods", False),
        (422, "Pod is invalid", False),
    ],
)
def test_what_is_worth_retrying(status: int, message: str, transient: bool) -> None:
    assert ApiError(status, message).transient is transient

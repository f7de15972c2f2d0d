"""The operator under a real API server's throttling and quota: a 429 from API Priority and
Fairness is retried after its ``Retry-After``, and a ResourceQuota with no room for the
driver Pod queues the application instead of ending it as ``SUBMISSION_FAILED`` (the
stand-in answers both as the API server does: ``StrictApiServer.throttle``, ``pod_quota``)."""

from __future__ import annotations

import pytest

from tests.support.sparkapplications import create_app, example_app, state

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"


def pod_creates(kube: StrictApiServer) -> int:
    return kube.served["POST", PODS_PATH]


async def test_a_throttled_driver_pod_create_is_retried_after_retry_after(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    kube.throttle("POST", PODS_PATH, times=2, retry_after=1)
    body = example_app()
    body["metadata"]["name"] = "throttled"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "throttled") == "SUBMITTED", operator=operator)
    assert kube.throttled["POST", PODS_PATH][0] == 0  # both 429s were answered
    assert pod_creates(kube) == 3  # two throttled, then the one that created the Pod
    assert kube.stored("v1/pods", NAMESPACE, "throttled-driver") is not None
    assert "SUBMISSION_FAILED" not in operator.output()


async def test_a_full_quota_queues_the_driver_instead_of_failing_the_run(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    kube.pod_quota[NAMESPACE] = 0
    body = example_app()
    body["metadata"]["name"] = "queued"
    await create_app(kube, body)
    # Refused by the quota at least twice: retried, and the run is not over.
    await eventually(lambda: pod_creates(kube) >= 2, what="a second create", operator=operator)
    assert state(kube, "queued") != "SUBMISSION_FAILED"
    assert "exceeded quota" in operator.output()
    assert kube.stored("v1/pods", NAMESPACE, "queued-driver") is None
    del kube.pod_quota[NAMESPACE]  # room again (another run ended)
    await eventually(lambda: state(kube, "queued") == "SUBMITTED", operator=operator)
    assert kube.stored("v1/pods", NAMESPACE, "queued-driver") is not None

"""The real operator process reconciling SparkApplications on the loopback API server.

No kubelet runs here: the tests play it, patching the driver Pod's ``status`` the way a
kubelet would (Pending → Running → Succeeded/Failed).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .conftest import (
    EXAMPLES_DIR,
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    SparkglassEmulator,
    eventually,
)

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

APPS = "sparkglass.io/v1alpha1/sparkapplications"


def example_app() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / "flights-sparkapplication.yaml").read_text())


async def create(kube: SparkglassEmulator, plural_path: str, body: dict[str, Any]) -> None:
    resp = await kube.post(plural_path, json=body)
    assert resp.status in (200, 201), await resp.text()


async def create_app(kube: SparkglassEmulator, body: dict[str, Any]) -> None:
    await create(
        kube, f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications", body
    )


async def patch(kube: SparkglassEmulator, path: str, body: dict[str, Any]) -> None:
    resp = await kube.patch(
        path, json=body, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert resp.status == 200, await resp.text()


async def set_pod_phase(kube: SparkglassEmulator, pod: str, phase: str, **status: Any) -> None:
    """Play the kubelet: move the driver Pod to ``phase``."""
    await patch(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/status",
        {"status": {"phase": phase, **status}},
    )


def app_status(kube: SparkglassEmulator, name: str) -> dict[str, Any]:
    obj = kube.stored(APPS, NAMESPACE, name)
    return (obj or {}).get("status") or {}


def state(kube: SparkglassEmulator, name: str) -> str | None:
    return (app_status(kube, name).get("applicationState") or {}).get("state")


def ready(kube: SparkglassEmulator, name: str) -> dict[str, Any]:
    for c in app_status(kube, name).get("conditions") or []:
        if c["type"] == "Ready":
            return c
    return {}


async def test_creates_exactly_the_children_and_follows_the_driver_pod(
    kube: SparkglassEmulator, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    await kubectl.apply(EXAMPLES_DIR / "flights-sparkapplication.yaml")
    app = kube.stored(APPS, NAMESPACE, "flights")
    assert app is not None
    await eventually(
        lambda: state(kube, "flights") == "SUBMITTED", what="SUBMITTED", operator=operator
    )

    # Exactly the four children, each owned by the application.
    assert kube.names("v1/configmaps", NAMESPACE) == {"flights-sparkglass"}
    assert kube.names("v1/secrets", NAMESPACE) == {"flights-control-token"}
    assert kube.names("v1/services", NAMESPACE) == {"flights-driver"}
    assert kube.names("v1/pods", NAMESPACE) == {"flights-driver"}
    children = {
        plural: kube.stored(f"v1/{plural}", NAMESPACE, name)
        for plural, name in [
            ("configmaps", "flights-sparkglass"),
            ("secrets", "flights-control-token"),
            ("services", "flights-driver"),
            ("pods", "flights-driver"),
        ]
    }
    for plural, child in children.items():
        assert child is not None
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["uid"] == app["metadata"]["uid"] and owner["controller"] is True, plural
        assert child["metadata"]["labels"]["sparkglass.io/application"] == "flights"
        clean = {k: v for k, v in child.items() if k != "status"}
        kubernetes_validate.validate(clean, "1.32", strict=True)

    # The driver: spark-submit in client mode against the Kubernetes master, plugin configured,
    # the token only through the Secret.
    pod, cm, secret = children["pods"], children["configmaps"], children["secrets"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["spark-submit"]
    assert container["args"][:4] == [
        "--master",
        "k8s://https://kubernetes.default.svc",
        "--deploy-mode",
        "client",
    ]
    assert container["args"][-5:] == [
        "local:///opt/sparkglass/examples/flights_job.py",
        "--days",
        "365",
        "--workdir",
        "/tmp/flights",
    ]
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) >= 32
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARKGLASS_CONTROL_TOKEN"] == {
        "name": "SPARKGLASS_CONTROL_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "flights-control-token", "key": "token"}},
    }
    conf = cm["data"]["spark-defaults.conf"]
    assert "spark.plugins=io.sparkglass.sampling.SamplingPlugin\n" in conf
    assert "spark.submit.deployMode=client\n" in conf
    assert "spark.driver.host=flights-driver.spark-jobs.svc\n" in conf
    assert "spark.sparkglass.sampling.enabled=true\n" in conf
    assert '"noOutputUntilEndOfInput":true' in conf  # the spec's attribute overrides
    assert json.loads(cm["data"]["pipeline.json"])["name"] == "flights"
    for blob in (json.dumps(pod), json.dumps(cm), json.dumps(app_status(kube, "flights"))):
        assert token not in blob
    assert token not in operator.output()
    svc = children["services"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {
        "sparkglass.io/application": "flights",
        "sparkglass.io/role": "driver",
    }

    # Status: resolved vertices and edges, attempts, Ready=False while the driver starts.
    status = app_status(kube, "flights")
    assert status["executionAttempts"] == 1
    assert status["observedGeneration"] == 1
    assert status["driverInfo"]["podName"] == "flights-driver"
    assert [v["name"] for v in status["vertices"]][:3] == ["flights", "schedule", "airports"] or {
        v["name"] for v in status["vertices"]
    } >= {"flights", "parse", "enrich-origin"}
    kinds = {(e["upstream"], e["downstream"]): e["kind"] for e in status["edges"]}
    assert kinds[("busiest-origins", "enrich-origin")] == "blocking"
    assert kinds[("flights", "parse")] == "pipelined"
    assert ready(kube, "flights")["status"] == "False"

    # Pod Running → RUNNING, the control endpoint published, Ready=True.
    await set_pod_phase(kube, "flights-driver", "Running", podIP="10.1.2.3")
    await eventually(lambda: state(kube, "flights") == "RUNNING", what="RUNNING", operator=operator)
    info = app_status(kube, "flights")["driverInfo"]
    assert info["controlEndpoint"] == "http://10.1.2.3:4045"
    assert info["webUIAddress"] == "10.1.2.3:4040"
    assert ready(kube, "flights")["status"] == "True"

    # Pod Succeeded → COMPLETED (OnFailure does not re-run a success); endpoint withdrawn.
    await set_pod_phase(kube, "flights-driver", "Succeeded")
    await eventually(
        lambda: state(kube, "flights") == "COMPLETED", what="COMPLETED", operator=operator
    )
    status = app_status(kube, "flights")
    assert "controlEndpoint" not in status["driverInfo"]
    assert status.get("terminationTime")
    assert ready(kube, "flights")["reason"] == "Completed"
    assert kube.names("v1/pods", NAMESPACE) == {"flights-driver"}  # not re-run

    # Deleting the application deletes its children (owner references).
    await kubectl("delete", "sparkapplication", "flights", "-n", NAMESPACE, "--wait=false")
    await eventually(
        lambda: (
            not any(
                kube.names(f"v1/{p}", NAMESPACE)
                for p in ("configmaps", "secrets", "services", "pods")
            )
        ),
        what="children garbage-collected",
        operator=operator,
    )


async def test_failure_reruns_with_backoff_then_fails(
    kube: SparkglassEmulator, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "retrying"
    body["spec"]["restartPolicy"] = {
        "type": "OnFailure",
        "onFailureRetries": 1,
        "onFailureRetryInterval": 1,
    }
    await create_app(kube, body)
    await eventually(lambda: state(kube, "retrying") == "SUBMITTED", operator=operator)
    first_uid = kube.stored("v1/pods", NAMESPACE, "retrying-driver")["metadata"]["uid"]
    await set_pod_phase(kube, "retrying-driver", "Running", podIP="10.0.0.9")
    await eventually(lambda: state(kube, "retrying") == "RUNNING", operator=operator)
    terminated = {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}}
    await set_pod_phase(
        kube,
        "retrying-driver",
        "Failed",
        containerStatuses=[{"name": "spark-driver", "state": terminated}],
    )
    await eventually(lambda: state(kube, "retrying") == "PENDING_RERUN", operator=operator)
    assert "exited with code 3" in app_status(kube, "retrying")["applicationState"]["errorMessage"]
    # After the 1 s back-off: a new driver Pod (attempt 2).
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "retrying-driver"))
            and p["metadata"]["uid"] != first_uid
        ),
        what="the re-run's driver Pod",
        operator=operator,
    )
    await eventually(lambda: state(kube, "retrying") == "SUBMITTED", operator=operator)
    status = app_status(kube, "retrying")
    assert (status["executionAttempts"], status["restarts"]) == (2, 1)
    pod = kube.stored("v1/pods", NAMESPACE, "retrying-driver")
    assert pod["metadata"]["annotations"]["sparkglass.io/attempt"] == "2"
    # The retry budget (1) is spent: the next failure is final.
    await set_pod_phase(kube, "retrying-driver", "Failed")
    await eventually(lambda: state(kube, "retrying") == "FAILED", operator=operator)
    assert ready(kube, "retrying")["reason"] == "Failed"


async def test_spec_change_restarts_the_driver(
    kube: SparkglassEmulator, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "changing"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "changing") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "changing-driver", "Running", podIP="10.0.0.7")
    await eventually(lambda: state(kube, "changing") == "RUNNING", operator=operator)
    old = kube.stored("v1/pods", NAMESPACE, "changing-driver")
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/changing",
        {"spec": {"arguments": ["--days", "7"]}},
    )
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "changing-driver"))
            and p["metadata"]["uid"] != old["metadata"]["uid"]
        ),
        what="a new driver Pod",
        operator=operator,
    )
    new = kube.stored("v1/pods", NAMESPACE, "changing-driver")
    assert new["spec"]["containers"][0]["args"][-2:] == ["--days", "7"]
    await eventually(
        lambda: app_status(kube, "changing").get("observedGeneration") == 2, operator=operator
    )
    await eventually(lambda: state(kube, "changing") == "SUBMITTED", operator=operator)
    assert app_status(kube, "changing")["executionAttempts"] == 2


async def test_invalid_pipeline_is_reported_not_retried(
    kube: SparkglassEmulator, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "broken"
    vertices = body["spec"]["pipeline"]["vertices"]
    # End-of-input on a stream: a plan-time error (the schema cannot see it).
    next(v for v in vertices if v["name"] == "delays-by-carrier")["attributes"] = {
        "noOutputUntilEndOfInput": True
    }
    await create_app(kube, body)
    await eventually(
        lambda: ready(kube, "broken").get("reason") == "InvalidAttributes",
        what="Ready=False InvalidAttributes",
        operator=operator,
    )
    assert ready(kube, "broken")["status"] == "False"
    assert "delays-by-carrier" in ready(kube, "broken")["message"]
    assert state(kube, "broken") == "FAILED"
    assert kube.names("v1/pods", NAMESPACE) == set()
    # Fixing the spec recovers without a restart of anything.
    fixed = copy.deepcopy(vertices)
    next(v for v in fixed if v["name"] == "delays-by-carrier")["attributes"] = {}
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/broken",
        {"spec": {"pipeline": {"vertices": fixed}}},
    )
    await eventually(lambda: state(kube, "broken") == "SUBMITTED", operator=operator)


async def test_completed_application_expires_after_its_ttl(
    kube: SparkglassEmulator, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "shortlived"
    body["spec"]["timeToLiveSeconds"] = 1
    await create_app(kube, body)
    await eventually(lambda: state(kube, "shortlived") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "shortlived-driver", "Succeeded")
    await eventually(lambda: state(kube, "shortlived") == "COMPLETED", operator=operator)
    await eventually(
        lambda: kube.stored(APPS, NAMESPACE, "shortlived") is None,
        what="TTL deletion",
        timeout=60,
        operator=operator,
    )
    await eventually(lambda: not kube.names("v1/pods", NAMESPACE), what="driver Pod collected")


async def test_a_vanished_driver_pod_is_a_failed_run(
    kube: SparkglassEmulator, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "evicted"
    body["spec"]["restartPolicy"] = {"type": "Never"}
    await create_app(kube, body)
    await eventually(lambda: state(kube, "evicted") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "evicted-driver", "Running", podIP="10.0.0.5")
    await eventually(lambda: state(kube, "evicted") == "RUNNING", operator=operator)
    resp = await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/evicted-driver")
    assert resp.status == 200
    await eventually(lambda: state(kube, "evicted") == "FAILED", operator=operator)
    status = app_status(kube, "evicted")
    assert status["applicationState"]["errorMessage"] == "the driver Pod disappeared"
    assert "controlEndpoint" not in status["driverInfo"]
    await asyncio.sleep(1.5)  # a resync later: still no new driver (restartPolicy Never)
    assert kube.stored("v1/pods", NAMESPACE, "evicted-driver") is None

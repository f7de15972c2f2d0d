"""``status.executorState`` and ``status.sparkApplicationId``.

Unit tests of :mod:`sparkglass.operator.executors`, then the real operator process against
the emulator, with the test playing Spark: it creates executor Pods the way the driver's
ExecutorPodsAllocator does (labels ``spark-role``, ``spark-app-selector``, the application's,
and an owner reference to the driver Pod) and the kubelet's phases on them. The Pod watch's
server-side selector is checked with kopf's own lookup in ``test_engine.py``; the emulator
applies ``labelSelector`` like the API server (``conftest``).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sparkglass.operator import executors as ex
from tests.support.sparkapplications import (
    app_status,
    create,
    create_app,
    example_app,
    set_pod_phase,
    state,
)

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)

APP_ID = "spark-5f2b7c1e0a9d4e6b8c3f1a2d4e6b8c0f"


def pod(
    name: str,
    phase: str | None = None,
    *,
    owner: str | None = "driver-uid",
    labels: dict[str, str] | None = None,
    executor_exit: int | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if executor_exit is not None:
        status["containerStatuses"] = [
            {"name": ex.EXECUTOR_CONTAINER, "state": {"terminated": {"exitCode": executor_exit}}},
            {"name": "log-shipper", "state": {"running": {}}},
        ]
    return {
        "metadata": {
            "name": name,
            "labels": labels or {"spark-app-selector": APP_ID, "spark-role": "executor"},
            "ownerReferences": [{"uid": owner, "kind": "Pod"}] if owner else [],
        },
        "status": status,
    }


DRIVER = {"metadata": {"name": "flights-driver", "uid": "driver-uid", "labels": {}}}


@pytest.mark.parametrize(
    ("phase", "exit_code", "state"),
    [
        ("Pending", None, "PENDING"),
        ("Running", None, "RUNNING"),
        ("Succeeded", None, "COMPLETED"),
        ("Failed", None, "FAILED"),
        (None, None, "UNKNOWN"),
        ("Unknown", None, "UNKNOWN"),
        ("Running", 0, "COMPLETED"),  # the executor ended; a sidecar keeps the Pod Running
        ("Running", 137, "FAILED"),
    ],
)
def test_pod_state(phase: str | None, exit_code: int | None, state: str) -> None:
    assert ex.pod_state(pod("e", phase, executor_exit=exit_code)) == state


def test_only_the_current_driver_pods_executors_count() -> None:
    pods = [
        pod("a-exec-1", "Running"),
        pod("b", "Running", owner="old-driver"),
        pod("c", owner=None),
    ]
    assert [p["metadata"]["name"] for p in ex.of_driver(pods, DRIVER)] == ["a-exec-1"]
    assert ex.of_driver(pods, None) == []


@pytest.mark.parametrize(
    ("driver_state", "gone_running"),
    [("RUNNING", "UNKNOWN"), ("SUCCEEDING", "COMPLETED"), ("FAILING", "FAILED")],
)
def test_gone_executors_keep_their_end_or_follow_the_driver(
    driver_state: str, gone_running: str
) -> None:
    previous = {"x-exec-1": "COMPLETED", "x-exec-2": "RUNNING", "x-exec-3": "FAILED"}
    shown = ex.executor_state([pod("x-exec-4", "Pending")], previous, driver_state=driver_state)
    assert shown == {
        "x-exec-1": "COMPLETED",
        "x-exec-2": gone_running,
        "x-exec-3": "FAILED",
        "x-exec-4": "PENDING",
    }


def test_the_map_is_capped_dropping_ended_gone_executors_first() -> None:
    previous = {f"x-exec-{i}": "COMPLETED" for i in range(1, ex.MAX_EXECUTORS + 1)}
    live = [pod(f"x-exec-{ex.MAX_EXECUTORS + i}", "Running") for i in range(1, 4)]
    shown = ex.executor_state(live, previous, driver_state="RUNNING")
    dropped = sorted(
        (k for k, v in shown.items() if v is None), key=lambda n: int(n.rsplit("-", 1)[1])
    )
    assert dropped == ["x-exec-1", "x-exec-2", "x-exec-3"]  # the oldest, numerically
    assert sum(v is not None for v in shown.values()) == ex.MAX_EXECUTORS
    assert all(shown[p["metadata"]["name"]] == "RUNNING" for p in live)


def test_application_id_from_the_driver_label_else_the_executors() -> None:
    labelled = {"metadata": {"uid": "d", "labels": {"spark-app-selector": "spark-cluster-mode"}}}
    assert ex.application_id(labelled, [pod("e", "Running")]) == "spark-cluster-mode"
    assert ex.application_id(DRIVER, [pod("e", "Running")]) == APP_ID
    assert (
        ex.application_id(DRIVER, [pod("e", "Running", labels={"spark-role": "executor"})]) is None
    )


# --------------------------------------------------------------------------- the process
async def spark_creates_executor(
    kube: StrictApiServer,
    driver: dict[str, Any],
    name: str,
    *,
    labels: dict[str, str] | None = None,
) -> None:
    """What Spark's ExecutorPodsAllocator creates (the fields the status reads)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": labels
            or {
                "spark-app-selector": APP_ID,
                "spark-role": "executor",
                "spark-exec-id": name.rsplit("-", 1)[1],
                "sparkglass.io/application": "flights",
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": driver["metadata"]["name"],
                    "uid": driver["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        # Spark builds the executor on the operator's template (its security contexts pass
        # the namespace's Pod Security), setting the image itself.
        "spec": executor_template_spec(kube, driver),
    }
    await create(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", body)


def executor_template_spec(kube: StrictApiServer, driver: dict[str, Any]) -> dict[str, Any]:
    app = driver["metadata"]["labels"]["sparkglass.io/application"]
    config = kube.stored("v1/configmaps", NAMESPACE, f"{app}-sparkglass")
    assert config is not None, "the operator writes the template before the driver starts"
    spec = yaml.safe_load(config["data"]["executor-pod-template.yaml"])["spec"]
    spec["containers"][0]["image"] = "spark"
    return spec


def executor_state(kube: StrictApiServer) -> dict[str, str]:
    return dict(app_status(kube, "flights").get("executorState") or {})


async def test_executor_pods_and_the_spark_application_id_reach_the_status(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    await create_app(kube, example_app())
    driver = await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "flights-driver"), operator=operator
    )
    await set_pod_phase(kube, "flights-driver", "Running", podIP="10.0.0.5")
    await eventually(lambda: state(kube, "flights") == "RUNNING", operator=operator)
    assert "executorState" not in app_status(kube, "flights")  # none yet: nothing written

    await spark_creates_executor(kube, driver, "flights-exec-1")
    await spark_creates_executor(kube, driver, "flights-exec-2")
    # A Pod labelled like an executor of flights, but not the driver's (hand-made).
    impostor = dict(driver, metadata={**driver["metadata"], "name": "x", "uid": "someone-else"})
    await spark_creates_executor(kube, impostor, "flights-exec-99")
    await eventually(
        lambda: executor_state(kube) == {"flights-exec-1": "PENDING", "flights-exec-2": "PENDING"},
        what="two pending executors",
        operator=operator,
    )
    assert app_status(kube, "flights")["sparkApplicationId"] == APP_ID

    await set_pod_phase(kube, "flights-exec-1", "Running")
    await set_pod_phase(kube, "flights-exec-2", "Failed")
    await eventually(
        lambda: executor_state(kube) == {"flights-exec-1": "RUNNING", "flights-exec-2": "FAILED"},
        what="the kubelet's phases",
        operator=operator,
    )
    # Spark deletes executor Pods: a running one gone while the driver runs is UNKNOWN, a
    # failed one keeps FAILED.
    for name in ("flights-exec-1", "flights-exec-2"):
        resp = await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        assert resp.status == 200, await resp.text()
    await eventually(
        lambda: executor_state(kube) == {"flights-exec-1": "UNKNOWN", "flights-exec-2": "FAILED"},
        what="gone executors",
        operator=operator,
    )

    # A new run (a spec change) starts with no executors and no application id.
    resp = await kube.patch(
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/flights",
        json={"spec": {"arguments": ["--days", "1"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert resp.status == 200, await resp.text()
    await eventually(
        lambda: (
            (kube.stored("v1/pods", NAMESPACE, "flights-driver") or {})
            .get("metadata", {})
            .get("uid")
            not in (None, driver["metadata"]["uid"])
        ),
        what="the new driver",
        operator=operator,
    )
    await eventually(
        lambda: (
            "executorState" not in app_status(kube, "flights")
            and "sparkApplicationId" not in app_status(kube, "flights")
        ),
        what="the new run's empty executor state",
        operator=operator,
    )

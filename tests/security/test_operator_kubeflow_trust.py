"""Attacks on how the operator finds a Kubeflow spark-operator application's driver.

The operator (a real process against the kmock API server) sends the control token of a
Kubeflow SparkApplication only to the driver Pod that application owns, at the Pod's IP and
its declared ``sg-control`` port (operator/kubeflow.py). Each attack below points it
elsewhere; a listener of the attacker's counts every TCP connection it gets, and must get
none:

1. Pods carrying the driver labels (``spark-role=driver``,
   ``sparkoperator.k8s.io/app-name=<app>``) but no owner reference to the application, one to
   another uid (an application of the same name deleted before), or a non-controller one.
2. The application's status naming an address: whoever may patch
   ``sparkapplications/status`` writes ``driverInfo.podName`` (an impostor Pod),
   ``webUIAddress`` and ``webUIServiceName`` (the listener).
3. A DataSample referencing a Kubeflow application of another namespace (with a cluster-wide
   operator, which can read it): by name only (looked up in the DataSample's namespace) and
   with ``applicationRef.namespace``, which the API server prunes (no such field; the
   operator's refusal of one that reaches it anyway is a unit test).

Where the test API server lacks behaviour (RBAC) the logic is covered by
``tests/operator/test_foreign_apps_units.py`` (``readable``, ``read_application``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.operator import conftest as operator_tests
from tests.operator.conftest import OperatorProcess
from tests.support.datasamples import FINAL, SAMPLES, ScriptedDriver, status, wait_final
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import result_service as result_service
from tests.support.foreign_apps import (
    KUBEFLOW,
    ForeignOperator,
    post_sample,
    ready,
    serve_as_driver,
    start_pod,
)
from tests.support.foreign_apps import crds_applied as crds_applied  # the fixture, by name
from tests.support.kube_apiserver import StrictApiServer
from tests.support.kube_fixtures import NAMESPACE, eventually
from tests.support.result_service import ResultService

pytestmark = pytest.mark.timeout(240)

# The operator tests' fixture, bound here by name so that pytest finds it in this module.
operator = operator_tests.operator

APP = KUBEFLOW.app


@pytest.fixture()
def foreign() -> ForeignOperator:
    """Kubeflow's applications only (``crds_applied`` applies their CRD before the operator
    starts: it checks once, at start, whether it may list them)."""
    return KUBEFLOW


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    # Cluster-wide: the operator may read every namespace, so attack 3 is not stopped by the
    # operator's reach but by the rule.
    return ["-A", *result_service.operator_args()]


@dataclass
class Listener:
    """A TCP listener of the attacker's on 127.0.0.1: counts connections, answers nothing."""

    port: int = 0
    connections: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)


@pytest.fixture()
async def listener() -> AsyncIterator[Listener]:
    found = Listener()

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections += 1
        writer.close()

    found.server = await asyncio.start_server(accept, "127.0.0.1", 0)
    found.port = found.server.sockets[0].getsockname()[1]
    yield found
    found.server.close()
    await found.server.wait_closed()


async def test_pods_with_the_driver_labels_but_not_owned_by_the_application_get_nothing(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    listener: Listener,
) -> None:
    app = await KUBEFLOW.create_app(kube, KUBEFLOW.example_app())
    # A live object of another uid for the reference (as an application of the same name,
    # deleted and made again, leaves behind; a dead uid's Pod the garbage collector takes).
    decoy = await KUBEFLOW.create_app(kube, KUBEFLOW.example_app("decoy", sampling=False))
    await serve_as_driver(kube, driver, APP, operator)
    for owner in ("none", "other-uid", "not-controller"):
        pod = KUBEFLOW.driver_pod(
            app,
            listener.port,
            name=f"fake-{owner}",
            owner=owner,
            other_uid=decoy["metadata"]["uid"],
        )
        await start_pod(kube, pod)
    await KUBEFLOW.set_state(kube, APP, "RUNNING")
    await post_sample(kube, KUBEFLOW.sample("lured", applicationStartTimeout="4s"))
    assert await wait_final(kube, "lured", operator) == "Abandoned"
    assert ready(kube, "lured")["reason"] == "ApplicationNotRunning"
    assert "no Running driver Pod" in status(kube, "lured")["message"]
    assert listener.connections == 0 and driver.calls == {}
    # The application's own driver Pod, once it runs, is found among the impostors.
    await start_pod(kube, KUBEFLOW.driver_pod(app, driver.port))
    await post_sample(kube, KUBEFLOW.sample("owned"))
    assert await wait_final(kube, "owned", operator) == "Complete"
    assert listener.connections == 0
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0


async def test_an_address_in_the_application_status_is_ignored(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    listener: Listener,
) -> None:
    app = await KUBEFLOW.running_app(kube, operator, driver)
    await start_pod(kube, KUBEFLOW.driver_pod(app, listener.port, name="impostor", owner="none"))
    await KUBEFLOW.set_state(
        kube,
        APP,
        "RUNNING",
        driverInfo={
            "podName": "impostor",
            "webUIAddress": f"127.0.0.1:{listener.port}",
            "webUIPort": listener.port,
            "webUIServiceName": "impostor",
        },
    )
    await post_sample(kube, KUBEFLOW.sample("by-status"))
    assert await wait_final(kube, "by-status", operator) == "Complete"
    assert listener.connections == 0
    assert set(driver.handshakes) == {f"{APP}-sparkglass-control.{NAMESPACE}.svc"}


async def test_a_kubeflow_application_in_another_namespace_cannot_be_referenced(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    # A complete, running application in "default": its own Secret, its owned driver Pod.
    await KUBEFLOW.running_app(kube, operator, driver, name="elsewhere", namespace="default")
    await post_sample(kube, KUBEFLOW.sample("by-name", app="elsewhere", backoffLimit=0))
    cross = KUBEFLOW.sample("by-namespace", app="elsewhere")
    cross["spec"]["applicationRef"]["namespace"] = "default"
    await post_sample(kube, cross)
    assert await wait_final(kube, "by-name", operator) == "Failed"
    assert ready(kube, "by-name")["reason"] == "ApplicationNotFound"
    assert f"namespace {NAMESPACE!r}" in status(kube, "by-name")["message"]
    # The API server prunes the field (the schema has none): the DataSample looks in its own
    # namespace, where there is no such application.
    stored = kube.stored(SAMPLES, NAMESPACE, "by-namespace")
    assert stored is not None and "namespace" not in stored["spec"]["applicationRef"]
    assert await wait_final(kube, "by-namespace", operator) == "Failed"
    assert ready(kube, "by-namespace")["reason"] == "ApplicationNotFound"
    # (The operator's own refusal of a namespace field, for a reader handed an unpruned
    # object: tests/operator/test_kubeflow_units.py.)
    assert driver.calls == {} and not driver.handshakes
    # The same DataSample in the application's namespace does reach it (the setup is sound).
    await post_sample(kube, KUBEFLOW.sample("same-ns", app="elsewhere"), namespace="default")

    def same_ns() -> dict[str, Any]:
        found = kube.stored("sparkglass.io/v1alpha1/datasamples", "default", "same-ns") or {}
        return found.get("status") or {}

    await eventually(
        lambda: same_ns().get("phase") in FINAL,
        what="the same-namespace DataSample",
        operator=operator,
    )
    assert same_ns()["phase"] == "Complete", same_ns()

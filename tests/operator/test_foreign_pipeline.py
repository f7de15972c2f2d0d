"""The operator publishes another operator's application's pipeline for the service: with
``--publish-foreign-pipelines``, once that application's driver runs, the operator asks the
driver it verified (pinned TLS, the Secret's token) for ``GET /api/v1/pipeline`` and writes
the answer into the ConfigMap ``<app>-sparkglass-pipeline``, owned by the application; a
ConfigMap of that name it did not make is never overwritten; without the flag the driver is
never asked. Runs for Kubeflow's and the Apache Spark operator's applications
(``operator/foreign_pipeline.py``; the service's reading of it: tests/service/
test_foreign_apps_listing.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from sparkglass.crds.datasample import FOREIGN_PIPELINE_KEY, FOREIGN_PIPELINE_SUFFIX
from sparkglass.runtime.contract.description import PipelineDescription
from tests.support.datasamples import (
    ScriptedDriver,
    operator_arguments,
    serve_driver,
    wait_final,
)
from tests.support.datasamples import result_service as result_service  # the fixtures
from tests.support.foreign_apps import (
    ForeignOperator,
    post_sample,
    serve_as_driver,
    start_pod,
)
from tests.support.foreign_apps import crds_applied as crds_applied  # the fixtures, by name
from tests.support.foreign_apps import foreign as foreign
from tests.support.result_service import ResultService

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)

CONFIG_MAPS = "v1/configmaps"
DESCRIPTION = PipelineDescription.model_validate(
    {
        "name": "flights",
        "vertices": [
            {"name": "flights", "kind": "source", "bounded": False},
            {"name": "parse", "inputs": ["flights"]},
            {"name": "enrich-origin", "inputs": ["parse"]},
        ],
    }
)


@dataclass(eq=False)
class DescribedDriver(ScriptedDriver):
    """A scripted driver that serves :data:`DESCRIPTION` at ``GET /api/v1/pipeline``."""

    def description(self) -> PipelineDescription | None:
        return DESCRIPTION


@pytest.fixture()
async def driver() -> AsyncIterator[DescribedDriver]:
    d = DescribedDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


@pytest.fixture()
def publishing() -> bool:
    return True


@pytest.fixture()
def operator_args(result_service: ResultService, publishing: bool) -> list[str]:
    args = operator_arguments(result_service)
    return [*args, "--publish-foreign-pipelines"] if publishing else args


def _configmap(kube: StrictApiServer, app: str) -> dict[str, Any] | None:
    return kube.stored(CONFIG_MAPS, NAMESPACE, f"{app}{FOREIGN_PIPELINE_SUFFIX}")


async def _run_the_application(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: DescribedDriver,
    foreign: ForeignOperator,
) -> dict[str, Any]:
    app = await foreign.create_app(kube, foreign.example_app())
    await serve_as_driver(kube, driver, foreign.app, operator)
    await start_pod(kube, foreign.driver_pod(app, driver.port))
    await foreign.set_state(kube, foreign.app, foreign.running_state)
    return app


async def test_the_running_driver_s_pipeline_is_published_owned_by_the_application(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: DescribedDriver,
    foreign: ForeignOperator,
) -> None:
    app = await _run_the_application(kube, operator, driver, foreign)
    await eventually(
        lambda: _configmap(kube, foreign.app) is not None,
        what="the pipeline ConfigMap",
        operator=operator,
    )
    cm = _configmap(kube, foreign.app)
    assert cm is not None
    published = PipelineDescription.model_validate(json.loads(cm["data"][FOREIGN_PIPELINE_KEY]))
    assert published.names() == DESCRIPTION.names()
    meta = cm["metadata"]
    assert meta["labels"]["sparkglass.io/application"] == foreign.app
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "sparkglass-operator"
    (owner,) = meta["ownerReferences"]
    assert (owner["uid"], owner["name"]) == (app["metadata"]["uid"], foreign.app)
    # Asked over the pinned TLS, with the Secret's token, and once for this driver Pod.
    assert driver.auth_failures == 0
    assert set(driver.handshakes) == {f"{foreign.app}-sparkglass-control.{NAMESPACE}.svc"}


async def test_a_configmap_of_that_name_the_operator_did_not_make_is_left_alone(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: DescribedDriver,
    foreign: ForeignOperator,
) -> None:
    planted = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{foreign.app}{FOREIGN_PIPELINE_SUFFIX}", "namespace": NAMESPACE},
        "data": {FOREIGN_PIPELINE_KEY: '{"name":"mine","vertices":[]}'},
    }
    resp = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/configmaps", json=planted)
    assert resp.status in (200, 201), await resp.text()
    await _run_the_application(kube, operator, driver, foreign)
    await eventually(
        lambda: "pipeline configmap not ours" in operator.output(),
        what="the operator to refuse the planted ConfigMap",
        operator=operator,
    )
    cm = _configmap(kube, foreign.app)
    assert cm is not None and cm["data"] == planted["data"]


@pytest.mark.parametrize("publishing", [False])
async def test_without_the_flag_the_driver_is_never_asked(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: DescribedDriver,
    foreign: ForeignOperator,
) -> None:
    await _run_the_application(kube, operator, driver, foreign)
    # A DataSample completing on the driver shows the operator handled the running
    # application's events; none of them asked for the pipeline.
    await post_sample(kube, foreign.sample("parse"))
    assert await wait_final(kube, "parse", operator) == "Complete"
    assert _configmap(kube, foreign.app) is None
    assert driver.calls["open:parse"] == 1 and "pipeline" not in driver.calls

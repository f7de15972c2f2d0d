"""Attack on etcd and the page through ``status.progress``: a driver's made-up vertices.

In Kubernetes mode the operator copies a running driver's ``GET /api/v1/progress`` into the
SparkApplication's status (``operator/driver_progress.py``). It cuts a failed query's text
to 1000 characters, but copies the ``vertices`` map as the driver sends it, and the driver is
the application's own code: it can answer thousands of made-up vertex names (of any length),
which the operator writes into the status every ``--progress-seconds``, a write of up to
etcd's object limit each time (and, past it, a failed write every pass), and which every
reader of the application and the page's graph then receives.

Expected: only the vertices of the application's own pipeline are published (what the page
can draw), so the status stays the size of the pipeline (fixed in
``operator/driver_progress.py``). The real operator process against the kmock API server and the
scripted driver over HTTPS on 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkglass.runtime.contract.pipeline_metrics import MAX_METRICS_VERTICES
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.support import datasamples
from tests.support.datasamples import APPS, ScriptedDriver, running_app

pytestmark = pytest.mark.timeout(120)

operator = operator_tests.operator
operator_args = datasamples.operator_args  # --progress-seconds 1
result_service = datasamples.result_service
driver = datasamples.driver

#: Made-up vertices a driver sends: as many as the answer's contract admits (its longest valid
#: names); more, or names that are no DNS-1123 labels, are refused before the operator sees
#: them (tests/security/test_driver_progress_answers.py).
MADE_UP = MAX_METRICS_VERTICES - 1


@pytest.fixture()
def hostile_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ScriptedDriver made after this answers progress with MADE_UP extra vertices."""

    def progress(self: ScriptedDriver) -> dict[str, Any]:
        junk = {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1}
        vertices = {f"made-up-{i:05d}-{'v' * 49}": junk for i in range(MADE_UP)}
        vertices["parse"] = junk
        return {"state": "ACTIVE", "activeQueries": 1, "microBatches": 1, "vertices": vertices}

    monkeypatch.setattr(ScriptedDriver, "progress", progress)


async def test_status_progress_holds_only_the_pipelines_vertices(
    hostile_progress: None,
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
) -> None:
    await running_app(kube, operator, driver)

    def progress() -> dict[str, Any]:
        obj = kube.stored(APPS, NAMESPACE, "flights") or {}
        return (obj.get("status") or {}).get("progress") or {}

    published = await eventually(progress, what="status.progress", operator=operator)
    app = kube.stored(APPS, NAMESPACE, "flights") or {}
    pipeline = {v["name"] for v in (app.get("status") or {}).get("vertices") or []}
    assert pipeline, app.get("status")
    extra = set(published["vertices"]) - pipeline
    assert not extra, f"{len(extra)} made-up vertices, {len(json.dumps(published))} bytes"

"""A running application's pipeline fails: the operator publishes the driver's ``failed``
reason in ``status.progress`` and posts one ``PipelineFailed`` Warning Event on the
SparkApplication with it (a failing Python vertex's reason names the row it raised on), once
per new reason, not at every read. The operator process against the strict API server, the
scripted driver answering its progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.datasamples import (
    ScriptedDriver,
    events_for,
    running_app,
    serve_driver,
)
from tests.support.sparkapplications import APPS

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines

REASON = (
    "out: vertex 'parse' raised on row {\"carrier\": \"UA\", \"dep_delay\": \"n/a\"}: "
    "ValueError: could not convert string to float: 'n/a'"
)


@dataclass
class FailingDriver(ScriptedDriver):
    """The scripted driver whose pipeline fails once :attr:`reason` is set."""

    reason: str | None = None

    def progress(self) -> dict[str, Any]:
        body = super().progress()
        if self.reason is not None:
            body.update(state="FAILED", activeQueries=0, failed=self.reason)
        return body


@pytest.fixture()
async def driver() -> AsyncIterator[FailingDriver]:
    d = FailingDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


@pytest.fixture()
def operator_args() -> list[str]:
    return ["--progress-seconds", "1"]


def published_failed(kube: StrictApiServer) -> str | None:
    app = kube.stored(APPS, NAMESPACE, "flights") or {}
    return ((app.get("status") or {}).get("progress") or {}).get("failed")


def failed_events(kube: StrictApiServer) -> list[dict[str, Any]]:
    return [e for e in events_for(kube, "flights") if e.get("reason") == "PipelineFailed"]


async def test_a_failed_pipeline_is_one_warning_event_naming_its_reason(
    kube: StrictApiServer, operator: OperatorProcess, driver: FailingDriver
) -> None:
    await running_app(kube, operator, driver)
    await eventually(
        lambda: driver.calls["progress"] >= 1, what="a progress read", operator=operator
    )
    assert failed_events(kube) == []  # a running pipeline is no Event
    driver.reason = REASON
    await eventually(
        lambda: published_failed(kube) == REASON, what="the reason published", operator=operator
    )
    (event,) = await eventually(lambda: failed_events(kube), what="the Event", operator=operator)
    assert (event["type"], event["message"]) == ("Warning", REASON)
    # Later reads find the same reason: no second Event.
    reads = driver.calls["progress"]
    await eventually(
        lambda: driver.calls["progress"] >= reads + 3, what="three more reads", operator=operator
    )
    assert len(failed_events(kube)) == 1, failed_events(kube)

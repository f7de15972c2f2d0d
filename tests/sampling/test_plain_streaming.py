"""A plain Structured Streaming job sampled by configuration (plus ``attach``), on real Spark.

The job (``plain_streaming_job.py``) runs under ``spark-submit`` in its own process, because
``spark.sql.extensions`` is a static conf the shared test session does not have. The tests
talk to its control endpoint over HTTP, as the service and the CLI do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.control.client import ControlClient
from tests.support.streaming_job import TOKEN, Job, start_job

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Job, dict[str, Any]]]:
    """The job with sampling on, and its ``ready`` event."""
    job = start_job(
        {"spark.sparkglass.sampling.enabled": "true", "spark.sparkglass.control.token": TOKEN},
        tmp_path_factory.mktemp("sampled"),
    )
    try:
        yield job, job.event("ready")
    finally:
        job.stop()


def rows(result: Any) -> list[dict[str, Any]]:
    return [json.loads(r.data) for s in result.samples for r in s.records]


def sample(client: ControlClient, vertex: str) -> Any:
    opened = client.open_round(vertex, "2s")
    assert opened.status is SampleStatus.PENDING, opened
    assert opened.round_id is not None
    return client.wait_for_round(opened.round_id, timeout_s=90, poll_interval_s=0.25)


def test_a_query_is_sampled_by_query_name_with_configuration_and_attach(
    sampled: tuple[Job, dict[str, Any]],
) -> None:
    _, ready = sampled
    assert ready["attached"] and ready["url"]
    assert not ready["dslImported"], "the job must not need the DSL"
    assert sorted(ready["taps"]) == ["query/doubler", "view/ticks"]
    # The native gate by default (test_native_gate.py: the UDF gate with nativeGate=false).
    assert "sg_tap_gate_native(query/doubler)" in ready["plan"], ready["plan"]
    with ControlClient(ready["url"], TOKEN) as client:
        description = client.pipeline()
        by_name = {v.name: v for v in description.vertices}
        assert by_name["doubler"].inputs == ["ticks"]
        assert by_name["ticks"].kind.value == "source" and not by_name["ticks"].bounded
        result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result
        got = rows(result)
        assert got and all(r["doubled"] == 2 * r["value"] for r in got)
        types = {r.data_type for s in result.samples for r in s.records}
        assert types == {"struct<value:bigint,doubled:bigint>"}
        view = sample(client, "ticks")
        assert view.status is SampleStatus.COMPLETE, view
        assert {"timestamp", "value"} == set(rows(view)[0])


def test_an_exception_in_the_tap_path_is_swallowed_and_counted(
    sampled: tuple[Job, dict[str, Any]],
) -> None:
    job, ready = sampled
    job.send("fault")
    fault = job.event("fault")
    assert fault["tapErrors"] > fault["tapErrorsBefore"], fault
    assert "program" in (fault["lastTapError"] or ""), fault
    assert fault["active"] and fault["exception"] is None, fault
    assert fault["batches"] >= 3
    with ControlClient(ready["url"], TOKEN) as client:  # and sampling still works after it
        result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result


def test_sampling_off_by_default_installs_nothing(tmp_path: Path) -> None:
    job = start_job({}, tmp_path)  # jar, plugin and extension loaded; enabled not set
    try:
        ready = job.event("ready")
    finally:
        job.stop()
    assert not ready["attached"] and ready["url"] is None
    assert ready["taps"] == []
    assert "sg_tap" not in ready["plan"], ready["plan"]

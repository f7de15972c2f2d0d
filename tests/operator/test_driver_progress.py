"""``status.progress``: the driver's metrics as the operator publishes them
(``operator/driver_progress.py``) and as the CRD keeps them.

* Expectation counts travel in ``PipelineMetrics``; the CRD's ``status.progress`` schema must
  declare ``vertices.*.expectations`` (the API server prunes fields a schema does not name).
* The status lives in etcd and the driver is the application's own code: whatever it answers,
  the published status stays within 64 vertices, 32 expectations each and a byte budget, says
  ``truncated`` when it left something out, and replaces (never accumulates) the previous one
  under the JSON merge patch the operator writes with.

Statuses are validated with ``jsonschema`` against the CRD's ``openAPIV3Schema``, as
``test_crds`` does.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sparkglass.operator import driver_progress
from sparkglass.operator.driver_access import DriverAccess
from sparkglass.operator.driver_progress import (
    MAX_PROGRESS_BYTES,
    MAX_PROGRESS_EXPECTATIONS,
    MAX_PROGRESS_VERTICES,
    bound_progress,
    progress_due,
    progress_patch,
    read_progress,
    same_progress,
)
from sparkglass.operator.timestamps import epoch_or_zero
from sparkglass.runtime.contract.pipeline_metrics import (
    ExpectationMetrics,
    PipelineMetrics,
    VertexMetrics,
)
from tests.support.crd_schema import yaml_documents

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "sparkapplication.yaml"


def status_schema() -> dict[str, Any]:
    (version,) = yaml_documents(CRD)[0]["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["status"])


def validate_status(progress: dict[str, Any]) -> None:
    """Validate ``progress`` as the API server stores it: written as a merge patch, so its
    ``None`` entries are deletions, not values (``jsonschema`` knows no ``nullable``)."""
    jsonschema.Draft7Validator(status_schema()).validate({"progress": merge({}, progress)})


def pruned_keys(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Paths in ``value`` that the API server's structural pruning would drop: keys of an
    object whose schema names ``properties`` but not that key."""
    out: list[str] = []
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        for key, child in value.items():
            if props is not None:
                if key not in props:
                    out.append(f"{path}.{key}")
                else:
                    out += pruned_keys(props[key], child, f"{path}.{key}")
            elif isinstance(extra, dict):
                out += pruned_keys(extra, child, f"{path}.{key}")
    return out


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies the operator's status writes."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def counts(action: str = "warn", n: int = 1) -> dict[str, Any]:
    return ExpectationMetrics.model_validate(
        {
            "action": action,
            "passedLastMicroBatch": n,
            "failedLastMicroBatch": 0,
            "passedTotal": 10 * n,
            "failedTotal": 2,
        }
    ).to_json_dict()


def metrics(vertices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"state": "ACTIVE", "activeQueries": 1, "microBatches": 3, "vertices": vertices}
    entry = PipelineMetrics.model_validate({**body, **extra}).to_json_dict()
    entry["publishedAt"] = "2026-11-25T10:00:00Z"
    return entry


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


# ---------------------------------------------------------------------------------- the CRD


def test_expectations_are_declared_so_the_api_server_keeps_them() -> None:
    entry = metrics(
        {
            "parse": {
                "rowsLastMicroBatch": 5,
                "rowsPerSecond": 2.5,
                "rowsTotal": 50,
                "expectations": {"valid-carrier": counts("drop"), "has-delay": counts("fail")},
            }
        }
    )
    progress = bound_progress(entry, ["flights", "parse"])
    assert progress["vertices"]["parse"]["expectations"]["valid-carrier"]["action"] == "drop"
    assert pruned_keys(status_schema(), {"progress": merge({}, progress)}) == []
    validate_status(progress)


@pytest.mark.parametrize("known", [True, False], ids=["figures known", "figures unknown"])
def test_every_figure_of_the_drivers_metrics_is_declared(known: bool) -> None:
    # The contract's models are the source: a field they gain and the CRD lacks would be
    # pruned by a real API server (structural schema), so the page would never see it.
    figures = {
        "batchDurationMs": 1200,
        "latencyMs": 2400,
        "eventTimeWatermark": 1_764_000_000_000,
        "stateRows": 42,
    }
    vertex = {"rowsLastMicroBatch": 5, "rowsPerSecond": 2.5, "rowsTotal": 50}
    if known:
        vertex |= figures | {"processedRowsPerSecond": 4.0}
    entry = metrics({"parse": vertex}, **(figures if known else {}))
    entry_fields = set(PipelineMetrics.model_fields) - {"history", "vertices"}
    assert {PipelineMetrics.model_fields[f].alias for f in entry_fields} <= set(entry)
    vertex_fields = {a.alias for a in VertexMetrics.model_fields.values()}
    assert vertex_fields <= set(entry["vertices"]["parse"])
    progress = bound_progress(entry, ["parse"])
    assert pruned_keys(status_schema(), {"progress": merge({}, progress)}) == []
    validate_status(progress)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"action": "explode"}, "action outside warn/drop/fail"),
        ({"failedTotal": -1}, "negative count"),
        ({"passedLastMicroBatch": 1.5}, "count that is not an integer"),
    ],
)
def test_the_schema_refuses_bad_expectation_counts(change: dict[str, Any], why: str) -> None:
    bad = {**counts(), **change}
    vertex = {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1}
    with pytest.raises(jsonschema.ValidationError):
        validate_status({"vertices": {"parse": {**vertex, "expectations": {"e": bad}}}})


def test_the_schema_refuses_more_than_32_expectations_and_every_field_is_described() -> None:
    vertex = {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1}
    many = {f"e{i}": counts() for i in range(33)}
    with pytest.raises(jsonschema.ValidationError, match="too many properties"):
        validate_status({"vertices": {"parse": {**vertex, "expectations": many}}})
    progress = status_schema()["properties"]["progress"]
    expectations = progress["properties"]["vertices"]["additionalProperties"]["properties"][
        "expectations"
    ]
    assert expectations["maxProperties"] == MAX_PROGRESS_EXPECTATIONS == 32
    one = expectations["additionalProperties"]
    assert one["properties"]["action"]["enum"] == ["warn", "drop", "fail"]
    for name in ("passedLastMicroBatch", "failedLastMicroBatch", "passedTotal", "failedTotal"):
        field = one["properties"][name]
        assert (field["type"], field["format"], field["minimum"]) == ("integer", "int64", 0)
        assert field["description"]
    assert progress["properties"]["truncated"]["type"] == "boolean"
    assert progress["properties"]["truncated"]["description"]


# --------------------------------------------------------------------------- the bounds


def test_a_pipeline_within_the_bounds_is_published_whole() -> None:
    vertices = {
        f"v{i}": {
            "rowsLastMicroBatch": i,
            "rowsPerSecond": 1.0,
            "rowsTotal": i,
            "expectations": {f"e{j}": counts(n=j) for j in range(4)},
        }
        for i in range(8)
    }
    entry = metrics(vertices)
    progress = bound_progress(entry, list(vertices))
    assert progress["truncated"] is False
    assert progress["vertices"] == entry["vertices"]
    assert {k: v for k, v in progress.items() if k not in ("vertices", "truncated")} == {
        k: v for k, v in entry.items() if k not in ("vertices", "history")
    }
    assert "history" not in progress  # minutes of series are the page's, never the status's
    validate_status(progress)


def test_only_the_pipelines_vertices_in_spec_order() -> None:
    row = {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1}
    entry = metrics({"sink": row, "made-up": row, "parse": row})
    progress = bound_progress(entry, ["flights", "parse", "sink"])
    assert list(progress["vertices"]) == ["parse", "sink"]
    # Undeclared names are not the driver's to publish; leaving them out is no truncation.
    assert progress["truncated"] is False


def oversized_entry(vertices: int, expectations: int) -> tuple[dict[str, Any], list[str]]:
    """A PipelineMetrics past every bound, as a driver (the application's own code) may send
    it: built without validation, since the contract caps expectations per vertex at 32."""
    names = [f"{i:03d}-{'v' * 59}" for i in range(vertices)]
    per_vertex = {
        name: VertexMetrics.model_construct(
            rows_last_micro_batch=10**12,
            rows_per_second=1e9,
            rows_total=10**15,
            expectations={
                f"{j:02d}-{'e' * 60}": ExpectationMetrics(
                    action="warn",  # type: ignore[arg-type]  # validated to the enum
                    passed_last_micro_batch=10**12,
                    failed_last_micro_batch=10**12,
                    passed_total=10**15,
                    failed_total=10**15,
                )
                for j in range(expectations)
            },
        )
        for name in names
    }
    model = PipelineMetrics.model_construct(
        state="ACTIVE", failed="x" * 50_000, vertices=per_vertex
    )
    entry = model.model_dump(mode="json", by_alias=True, warnings=False)
    entry["publishedAt"] = "2026-11-25T10:00:00Z"
    return entry, names


def test_an_oversized_pipeline_metrics_yields_a_bounded_status() -> None:
    entry, names = oversized_entry(vertices=100, expectations=40)
    assert size(entry) > 10 * MAX_PROGRESS_BYTES
    progress = bound_progress(entry, names)
    assert progress["truncated"] is True
    assert size(progress) <= MAX_PROGRESS_BYTES
    assert len(progress["failed"]) == driver_progress.MAX_FAILED_CHARS
    assert list(progress["vertices"]) == names[:MAX_PROGRESS_VERTICES]
    kept = [v["expectations"] for v in progress["vertices"].values()]
    assert all(len(e) <= MAX_PROGRESS_EXPECTATIONS for e in kept)
    # Round-robin: every vertex keeps its first expectations before any keeps many...
    assert min(len(e) for e in kept) >= 1
    assert max(len(e) for e in kept) - min(len(e) for e in kept) <= 1
    # ... in the driver's order, with the driver's counts.
    first = names[0]
    assert list(kept[0]) == list(entry["vertices"][first]["expectations"])[: len(kept[0])]
    for name, counts_ in kept[0].items():
        assert counts_ == entry["vertices"][first]["expectations"][name]
    # The budget is used, not wasted: one more expectation would not have fitted.
    assert size(progress) > MAX_PROGRESS_BYTES - 300
    validate_status(progress)


def test_expectations_past_32_are_cut_even_within_the_byte_budget() -> None:
    entry, names = oversized_entry(vertices=1, expectations=40)
    entry["failed"] = None
    progress = bound_progress(entry, names)
    (vertex,) = progress["vertices"].values()
    assert list(vertex["expectations"]) == list(entry["vertices"][names[0]]["expectations"])[:32]
    assert progress["truncated"] is True
    validate_status(progress)


# ---------------------------------------------------------------- the merge patch


def test_the_published_status_replaces_the_previous_one() -> None:
    row = {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1}
    before = bound_progress(
        metrics(
            {
                "parse": {**row, "expectations": {"old-rule": counts(), "kept": counts()}},
                "enrich": row,
            }
        ),
        ["parse", "enrich"],
    )
    stored = merge({}, progress_patch(before, None))
    assert stored == merge({}, before)
    # The next answer renamed an expectation and the spec no longer has "enrich".
    after = bound_progress(
        metrics({"parse": {**row, "expectations": {"kept": counts(n=2), "new-rule": counts()}}}),
        ["parse"],
    )
    patch = progress_patch(after, stored)
    assert patch["vertices"]["enrich"] is None
    assert patch["vertices"]["parse"]["expectations"]["old-rule"] is None
    assert merge(stored, patch) == merge({}, after)
    validate_status(merge(stored, patch))


def test_a_driver_renaming_its_expectations_every_time_cannot_grow_the_status() -> None:
    stored: dict[str, Any] = {}
    for round_ in range(20):
        entry, names = oversized_entry(vertices=70, expectations=33)
        for vertex in entry["vertices"].values():
            vertex["expectations"] = {
                f"r{round_}-{name}"[:63]: c for name, c in vertex["expectations"].items()
            }
        stored = merge(stored, progress_patch(bound_progress(entry, names), stored))
        assert size(stored) <= MAX_PROGRESS_BYTES
    validate_status(stored)


# ------------------------------------------------------------- read_progress, end to end


class FakeDriver:
    """``AsyncControlClient`` answering ``progress`` with a fixed model."""

    answer: PipelineMetrics

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def __aenter__(self) -> FakeDriver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def progress(self) -> PipelineMetrics:
        return self.answer


async def test_read_progress_publishes_a_bounded_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    entry, names = oversized_entry(vertices=80, expectations=40)
    # Built without validation: past the contract's 32 expectations per vertex.
    FakeDriver.answer = PipelineMetrics.model_construct(
        vertices={
            n: VertexMetrics.model_construct(
                rows_last_micro_batch=1,
                rows_per_second=1.0,
                rows_total=1,
                expectations={
                    e: ExpectationMetrics.model_validate(c)
                    for e, c in entry["vertices"][n]["expectations"].items()
                },
            )
            for n in names
        },
    )

    async def access(ctx: Any, app: Any) -> DriverAccess:
        return DriverAccess(endpoint="https://10.0.0.1:4041", token="t", tls=None)

    monkeypatch.setattr(driver_progress, "driver_access", access)
    monkeypatch.setattr(driver_progress, "AsyncControlClient", FakeDriver)
    app = {
        "metadata": {"name": "flights", "namespace": "team-a"},
        "spec": {"pipeline": {"vertices": [{"name": n} for n in names]}},
        # A previous publish with a vertex the spec no longer has.
        "status": {"progress": {"vertices": {"gone": {"rowsTotal": 1}}}},
    }
    patch = await read_progress(None, copy.deepcopy(app))  # type: ignore[arg-type]
    assert patch is not None
    assert patch["vertices"]["gone"] is None
    stored = merge(app["status"]["progress"], patch)
    assert stored["truncated"] is True
    assert size(stored) <= MAX_PROGRESS_BYTES
    assert len(stored["vertices"]) == MAX_PROGRESS_VERTICES
    validate_status(stored)


# ------------------------------------------------------------- when a publish is a write


def test_an_answer_that_differs_only_in_its_times_is_no_change() -> None:
    row = {"rowsLastMicroBatch": 5, "rowsPerSecond": 2.5, "rowsTotal": 50}
    stored = merge({}, bound_progress(metrics({"parse": row}, observedAt=1), ["parse"]))
    again = bound_progress(metrics({"parse": row}, observedAt=2), ["parse"])
    again["publishedAt"] = "2026-11-25T10:01:00Z"
    assert same_progress(again, stored)
    moved = bound_progress(metrics({"parse": {**row, "rowsTotal": 55}}), ["parse"])
    assert not same_progress(moved, stored)
    assert not same_progress(again, None)  # nothing published yet


async def test_read_progress_writes_nothing_for_the_same_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = {"state": "ACTIVE", "activeQueries": 1, "microBatches": 3, "vertices": {}}
    FakeDriver.answer = PipelineMetrics.model_validate({**answer, "observedAt": 7})

    async def access(ctx: Any, app: Any) -> DriverAccess:
        return DriverAccess(endpoint="https://10.0.0.1:4041", token="t", tls=None)

    monkeypatch.setattr(driver_progress, "driver_access", access)
    monkeypatch.setattr(driver_progress, "AsyncControlClient", FakeDriver)
    app: dict[str, Any] = {"metadata": {"name": "a", "namespace": "n"}, "spec": {}}
    first = await read_progress(None, copy.deepcopy(app))  # type: ignore[arg-type]
    assert first is not None
    app["status"] = {"progress": merge({}, first)}
    FakeDriver.answer = PipelineMetrics.model_validate({**answer, "observedAt": 8})
    assert await read_progress(None, copy.deepcopy(app)) is None  # type: ignore[arg-type]
    FakeDriver.answer = PipelineMetrics.model_validate({**answer, "microBatches": 4})
    assert await read_progress(None, copy.deepcopy(app)) is not None  # type: ignore[arg-type]


def test_a_read_that_wrote_nothing_waits_its_interval_too() -> None:
    published = {"progress": {"publishedAt": "2026-11-25T10:00:00Z"}}
    at = epoch_or_zero("2026-11-25T10:00:00Z")
    assert not progress_due(published, at + 59, 60)
    assert progress_due(published, at + 60, 60)
    # Read at +60 with nothing new to write: the next read is due at +120, not at once.
    assert not progress_due(published, at + 61, 60, read_at=at + 60)
    assert progress_due(published, at + 120, 60, read_at=at + 60)
    # Nothing published yet: asked again at every pass until the driver answers.
    assert progress_due({}, at + 1, 60, read_at=at)
    assert not progress_due(published, at + 10_000, 0)  # 0: never


def test_the_cli_the_config_and_the_crd_state_one_default_interval() -> None:
    import inspect

    from sparkglass.cli.operator import run
    from sparkglass.crds.sparkapplication import Progress
    from sparkglass.operator.settings import DEFAULT_PROGRESS_SECONDS

    assert inspect.signature(run).parameters["progress"].default.default == (
        DEFAULT_PROGRESS_SECONDS
    )
    assert f"(default {DEFAULT_PROGRESS_SECONDS:g} s)" in (Progress.__doc__ or "")

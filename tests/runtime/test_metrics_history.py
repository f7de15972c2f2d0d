"""The driver's history of live metrics (``MetricsHistory``): the last N minutes, a point per
interval, bounded in points and vertices whatever the pipeline does; its settings; and the
wire model's bounds (``ProgressHistory``). Micro-batch rates over input intervals
(``QueryRates``). A fake clock: no Spark needed (the real thing: test_progress_dsl.py,
test_progress_discovered.py)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sparkglass.runtime.contract.pipeline_metrics import (
    MAX_HISTORY_POINTS,
    MAX_HISTORY_VERTICES,
    PipelineMetrics,
    ProgressHistory,
    VertexMetrics,
)
from sparkglass.runtime.query_progress import (
    DEFAULT_HISTORY_MINUTES,
    DEFAULT_HISTORY_POINTS,
    HISTORY_MINUTES_CONF,
    HISTORY_POINTS_CONF,
    MetricsHistory,
    QueryFigures,
    QueryRates,
    history_settings,
)

T0 = 1_700_000_000_000  # ms since the epoch (in the past: no point is clamped to now)


def snapshot(n: int, vertices: int = 2) -> PipelineMetrics:
    return PipelineMetrics(
        micro_batches=n,
        input_rows_per_second=float(n),
        batch_duration_ms=100 + n,
        vertices={
            f"v{i}": VertexMetrics(rows_total=n * (i + 1), rows_per_second=float(i))
            for i in range(vertices)
        },
    )


def test_the_last_n_minutes_bounded_by_entries() -> None:
    now = [T0 / 1000]
    history = MetricsHistory(window_s=60, max_points=12, clock=lambda: now[0])
    assert history.resolution_ms == 5000
    for second in range(600):  # ten minutes of one micro-batch per second
        now[0] = T0 / 1000 + second
        history.record(snapshot(second))
    h = history.snapshot()
    assert len(h.timestamps) <= 12 and len(history) <= 12
    assert all(now[0] * 1000 - 60_000 <= t <= now[0] * 1000 for t in h.timestamps)
    assert h.timestamps == sorted(h.timestamps)
    # A point per 5 s interval holds the latest micro-batch of its interval.
    assert h.micro_batches[-1] == 599
    assert all(n % 5 == 4 for n in h.micro_batches[:-1])
    assert h.vertices["v1"].rows_total[-1] == 2 * 599
    assert (h.window_seconds, h.resolution_seconds, h.max_points) == (60, 5.0, 12)
    # Quiet for longer than the window: nothing is left.
    assert history.snapshot(now_ms=int(now[0] * 1000) + 61_000).timestamps == []


def test_vertices_are_bounded_and_missing_values_are_null() -> None:
    history = MetricsHistory(window_s=60, max_points=60)
    history.record(snapshot(1, vertices=0), t_ms=T0)
    history.record(snapshot(2, vertices=MAX_HISTORY_VERTICES + 10), t_ms=T0 + 1000)
    h = history.snapshot(now_ms=T0 + 2000)
    assert len(h.vertices) == MAX_HISTORY_VERTICES
    assert h.vertices["v0"].rows_total == [None, 2]
    assert h.vertices["v0"].batch_duration_ms == [None, None]
    assert h.batch_duration_ms == [101, 102]
    # The documented bound: points × (7 + 7 × vertices) values, vertices at most 64.
    wire = h.to_json_dict()
    values = sum(len(v) for k, v in wire.items() if isinstance(v, list) and k != "timestamps")
    values += sum(len(s) for v in wire["vertices"].values() for s in v.values())
    assert values == 2 * (7 + 7 * MAX_HISTORY_VERTICES)
    assert len(json.dumps(wire)) < 2 * (7 + 7 * MAX_HISTORY_VERTICES) * 24


def test_a_late_snapshot_updates_the_latest_point() -> None:
    history = MetricsHistory(window_s=60, max_points=60)
    history.record(snapshot(5), t_ms=T0 + 5000)
    history.record(snapshot(6), t_ms=T0 + 4000)  # another query's earlier batch, seen later
    h = history.snapshot(now_ms=T0 + 6000)
    assert h.timestamps == [T0 + 5000] and h.micro_batches == [6]


@pytest.mark.parametrize(
    ("minutes", "points", "expected"),
    [
        (None, None, (DEFAULT_HISTORY_MINUTES * 60, DEFAULT_HISTORY_POINTS)),
        ("5", "300", (300, 300)),
        ("0", "5", (DEFAULT_HISTORY_MINUTES * 60, DEFAULT_HISTORY_POINTS)),
        ("ten", str(MAX_HISTORY_POINTS + 1), (DEFAULT_HISTORY_MINUTES * 60, 180)),
        ("1440", "1000", (86_400, 1000)),
    ],
)
def test_settings_fall_back_to_the_defaults(
    minutes: str | None, points: str | None, expected: tuple[int, int]
) -> None:
    conf = {HISTORY_MINUTES_CONF: minutes, HISTORY_POINTS_CONF: points}
    assert history_settings(conf.get) == expected


def test_the_wire_model_is_bounded() -> None:
    ok = {"windowSeconds": 60, "resolutionSeconds": 1, "maxPoints": 10, "timestamps": [T0]}
    columns = {"microBatches": [1], "inputRowsPerSecond": [1.5], "processedRowsPerSecond": [2],
               "batchDurationMs": [3], "latencyMs": [4], "eventTimeWatermark": [None],
               "stateRows": [None]}  # fmt: skip
    ProgressHistory.model_validate({**ok, **columns})
    with pytest.raises(ValidationError, match="one value per timestamp"):
        ProgressHistory.model_validate({**ok, **columns, "latencyMs": [4, 5]})
    with pytest.raises(ValidationError):
        ProgressHistory.model_validate({**ok, "maxPoints": MAX_HISTORY_POINTS + 1})
    many = [T0 + i for i in range(MAX_HISTORY_POINTS + 1)]
    with pytest.raises(ValidationError):
        ProgressHistory.model_validate({**ok, "timestamps": many})
    with pytest.raises(ValidationError):
        ProgressHistory.model_validate({**ok, **columns, "inputRowsPerSecond": [float("nan")]})


def batch(start_ms: int, read: int, duration: int = 100) -> QueryFigures:
    return QueryFigures(
        batch_id=0,
        start_ms=start_ms,
        end_ms=start_ms + duration,
        num_input_rows=read,
        batch_duration_ms=duration,
        latency_ms=duration,
        watermark_ms=None,
        state_rows=None,
    )


def test_rates_over_input_intervals() -> None:
    """A stateful query's micro-batches without input (watermark moves) fall inside the
    interval of the next one with input: no rate flickers to 0, and the input rate is the
    source vertex's, the window vertex's rows counted where they were emitted."""
    rates = QueryRates()
    rates.add(batch(T0, 20), {"src": 20, "window": 0})
    assert rates.input_rows_per_second == rates.vertices["src"][0] == 200.0  # first: its own
    rates.add(batch(T0 + 1000, 40), {"src": 40, "window": 0})
    assert rates.input_rows_per_second == 40.0 and rates.processed_rows_per_second == 400.0
    rates.add(batch(T0 + 1200, 0, duration=100), {"src": 0, "window": 3})  # no input
    assert rates.input_rows_per_second == 40.0 and rates.vertices["window"] == (0.0, 0.0)
    rates.add(batch(T0 + 2000, 30), {"src": 30, "window": 0})
    assert rates.input_rows_per_second == rates.vertices["src"][0] == 30.0
    assert rates.vertices["window"] == (3.0, 15.0)  # 3 rows over 1 s, over 200 ms of work
    assert rates.processed_rows_per_second == rates.vertices["src"][1] == 150.0


def test_after_idle_minutes_rates_and_latency_start_at_the_idle_trigger() -> None:
    # 1,000 rows/s, 10 minutes idle (Spark's idle triggers), then a micro-batch of 1,000
    # rows: Spark's inputRowsPerSecond counts from the previous trigger, not from the batch
    # before the idle minutes (that read 1.66 rows/s).
    rates = QueryRates()
    rates.add(batch(T0, 1000), {"src": 1000})
    rates.add(batch(T0 + 1000, 1000), {"src": 1000})
    idle_trigger = T0 + 600_000
    rates.idle_since(idle_trigger)
    rates.add(batch(idle_trigger + 1000, 1000), {"src": 1000})
    assert rates.input_rows_per_second == rates.vertices["src"][0] == 1000.0


class _Progress:
    """The fields of pyspark's StreamingQueryProgress that ``figures_of`` reads."""

    def __init__(self, timestamp: str, duration: int) -> None:
        self.timestamp = timestamp
        self.batchDuration = duration
        self.batchId = 7
        self.numInputRows = 10
        self.eventTime: dict[str, str] = {}
        self.stateOperators: list[object] = []
        self.inputRowsPerSecond = 0.0
        self.processedRowsPerSecond = 0.0


def test_a_clock_stepped_back_gives_no_negative_figure() -> None:
    from sparkglass.runtime.query_progress import figures_of

    figures = figures_of(_Progress("2026-11-29T02:00:00.000Z", -250), None)
    assert figures.batch_duration_ms == 0 and figures.latency_ms == 0
    m = PipelineMetrics(
        batch_duration_ms=figures.batch_duration_ms, latency_ms=figures.latency_ms
    )  # the wire model takes them (a negative one made the driver's progress answer 500)
    assert m.batch_duration_ms == 0


def test_one_point_from_a_clock_ahead_does_not_freeze_the_history() -> None:
    now = [T0 / 1000]
    history = MetricsHistory(window_s=60, max_points=60, clock=lambda: now[0])
    history.record(snapshot(1), t_ms=T0 + 3_600_000)  # an hour ahead
    for n in range(2, 6):
        now[0] += 2
        history.record(snapshot(n))
    h = history.snapshot()
    # Pinned to the hour-ahead point, every snapshot replaced one point; clamped, they move on.
    assert len(h.timestamps) >= 3, h.timestamps
    assert h.micro_batches[-1] == 5 and max(h.timestamps) <= T0 + 8000 + 5000


def test_the_wire_model_refuses_what_its_docstring_rules_out() -> None:
    ok = {"windowSeconds": 60, "resolutionSeconds": 1, "maxPoints": 2, "timestamps": [T0]}

    def points(*timestamps: int) -> dict[str, object]:
        names = ("microBatches", "inputRowsPerSecond", "processedRowsPerSecond",
                 "batchDurationMs", "latencyMs", "eventTimeWatermark", "stateRows")  # fmt: skip
        return {**ok, "timestamps": list(timestamps), **{n: [1] * len(timestamps) for n in names}}

    ProgressHistory.model_validate(points(T0, T0 + 1))
    with pytest.raises(ValidationError, match="more than maxPoints"):
        ProgressHistory.model_validate(points(T0, T0 + 1, T0 + 2))
    with pytest.raises(ValidationError, match="ascend"):
        ProgressHistory.model_validate(points(T0 + 1, T0))
    with pytest.raises(ValidationError):
        ProgressHistory.model_validate({**ok, "windowSeconds": 10**18})
    with pytest.raises(ValidationError):  # a number as text is not a number
        ProgressHistory.model_validate_json(json.dumps({**ok, "microBatches": ["12"]}))
    with pytest.raises(ValidationError):  # vertex names are DNS-1123 labels
        ProgressHistory.model_validate({**ok, "timestamps": [], "vertices": {"<b>x</b>": {}}})
    with pytest.raises(ValidationError):  # every rate finite, the older fields too
        PipelineMetrics.model_validate_json('{"inputRowsPerSecond": Infinity}')
    with pytest.raises(ValidationError):
        PipelineMetrics.model_validate({"vertices": {"v": {"rowsPerSecond": float("inf")}}})

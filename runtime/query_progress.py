"""A streaming query's figures from its ``StreamingQueryProgress``, and the pipeline's metrics
over the last minutes.

Both kinds of pipeline take their live metrics from Spark's query progress, once per
micro-batch, in a query listener (never per row): the DSL ``Pipeline`` in its Python listener
(:func:`figures_of`), a discovered pipeline (plain Structured Streaming, Spark Declarative
Pipelines) from the sampling jar's ``QueryTracker``, a JVM listener on every session that ran a
tapped query. :class:`MetricsHistory` keeps the snapshots of the last
``spark.sparkglass.progress.historyMinutes`` (15 by default) for ``GET
/api/v1/progress?history=true``, bounded in points and vertices. Fields, units and sources:
docs/architecture.md, "Live metrics".
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sparkglass.runtime.contract.pipeline_metrics import (
    MAX_HISTORY_POINTS,
    MAX_HISTORY_VERTICES,
    PIPELINE_SERIES,
    VERTEX_SERIES,
    PipelineMetrics,
    ProgressHistory,
    VertexHistory,
)

log = logging.getLogger(__name__)

#: Spark conf: minutes of metrics the driver keeps (1–1440, default 15).
HISTORY_MINUTES_CONF = "spark.sparkglass.progress.historyMinutes"
#: Spark conf: points kept over those minutes (10–1000, default 180: one per 5 s at 15 min).
HISTORY_POINTS_CONF = "spark.sparkglass.progress.historyPoints"
DEFAULT_HISTORY_MINUTES = 15
DEFAULT_HISTORY_POINTS = 180
_MINUTES_RANGE = (1, 1440)
_POINTS_RANGE = (10, MAX_HISTORY_POINTS)

Number = int | float
#: How far past the driver's clock a point's time may be, ms (Spark's timestamps come from
#: the same clock; the slack covers a micro-batch ending as it is recorded).
FUTURE_SLACK_MS = 5_000


def epoch_ms(timestamp: str) -> int:
    """Spark's progress timestamp (``2026-11-22T17:55:01.123Z``) in ms since the epoch.

    Raises:
        ValueError: not ISO 8601.
    """
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def finite(value: Any) -> float:
    """``value`` as a float, 0 for ``None``, NaN and infinities (Spark reports NaN for a rate
    over no elapsed time), never below 0."""
    try:
        x = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


@dataclass(frozen=True)
class QueryFigures:
    """One micro-batch of one streaming query, as its progress reports it.

    ``start_ms``: the trigger (the progress's ``timestamp``); ``end_ms``: ``start_ms`` plus
    ``batch_duration_ms`` (``durationMs.triggerExecution``, Spark's ``batchDuration``);
    ``latency_ms``: from the previous micro-batch's trigger to ``end_ms`` (the batch's own
    duration for a query's first); ``num_input_rows``: rows read (``None``: not reported);
    ``watermark_ms``: ``eventTime.watermark`` (``None``: the query has none); ``state_rows``:
    ``numRowsTotal`` summed over ``stateOperators`` (``None``: it has none); the two rates:
    Spark's own, for a progress that does not report its rows.
    """

    batch_id: int
    start_ms: int
    end_ms: int
    num_input_rows: int | None
    batch_duration_ms: int
    latency_ms: int
    watermark_ms: int | None
    state_rows: int | None
    spark_input_rows_per_second: float = 0.0
    spark_processed_rows_per_second: float = 0.0


def figures_of(progress: Any, previous_start_ms: int | None) -> QueryFigures:
    """The figures of one ``StreamingQueryProgress`` (pyspark's), the previous micro-batch of
    the same query having started at ``previous_start_ms`` (``None``: this is its first).

    Reads only what the progress holds (a field it lacks counts as unknown), and never fails
    over a timestamp Spark changed: the batch then ended now."""
    # Spark times micro-batches with the wall clock: a clock stepped back can make a
    # duration negative, which is no duration at all.
    duration = max(0, int(getattr(progress, "batchDuration", 0) or 0))
    try:
        start_ms = epoch_ms(str(progress.timestamp))
    except (AttributeError, ValueError):
        start_ms = int(time.time() * 1000) - duration
    end_ms = start_ms + duration
    watermark: int | None = None
    raw = (getattr(progress, "eventTime", None) or {}).get("watermark")
    if raw:
        try:
            watermark = epoch_ms(str(raw))
        except ValueError:
            watermark = None
    operators = list(getattr(progress, "stateOperators", None) or ())
    state_rows = sum(int(getattr(op, "numRowsTotal", 0) or 0) for op in operators)
    rows = getattr(progress, "numInputRows", None)
    return QueryFigures(
        batch_id=int(getattr(progress, "batchId", -1)),
        start_ms=start_ms,
        end_ms=end_ms,
        num_input_rows=None if rows is None else int(rows),
        batch_duration_ms=duration,
        latency_ms=end_ms - previous_start_ms
        if previous_start_ms is not None and start_ms > previous_start_ms
        else duration,
        watermark_ms=watermark,
        state_rows=max(0, state_rows) if operators else None,
        spark_input_rows_per_second=finite(getattr(progress, "inputRowsPerSecond", 0.0)),
        spark_processed_rows_per_second=finite(getattr(progress, "processedRowsPerSecond", 0.0)),
    )


class QueryRates:
    """The rates of one streaming query, and of the vertices it counts rows at, over its
    latest *input interval*: from the trigger of one micro-batch that read input to the
    trigger of the next one (the batch's own duration for a query's first micro-batch).

    Micro-batches without input (Spark runs them for a stateful query, to move its watermark
    or expire state; a window count emits its rows there) fall inside the interval: their rows
    count in the next interval's rates instead of making every rate flicker to 0 and back. For
    a query whose every micro-batch reads input (any stateless one) the interval is the time
    since the previous trigger, Spark's definition of ``inputRowsPerSecond``. So the
    pipeline's input rate and a source vertex's rate are the same number (rows read over the
    same interval), and processed rates are those rows over the micro-batches' summed
    durations (Spark's ``processedRowsPerSecond`` for a single micro-batch). Not thread-safe:
    the caller holds its lock.
    """

    def __init__(self) -> None:
        self.last_input_start_ms: int | None = None
        self.input_rows_per_second = 0.0
        self.processed_rows_per_second = 0.0
        #: Per vertex: (rows/s, processed rows/s) of the latest interval.
        self.vertices: dict[str, tuple[float, float]] = {}
        self._pending_rows: dict[str, int] = {}
        self._pending_ms = 0

    def idle_since(self, at_ms: int) -> None:
        """The query ran a trigger without data at ``at_ms``: the next interval starts there
        (as Spark's ``inputRowsPerSecond`` counts from the previous trigger, idle or not)."""
        if self.last_input_start_ms is not None and at_ms > self.last_input_start_ms:
            self.last_input_start_ms = at_ms

    def add(self, figures: QueryFigures, vertex_rows: Mapping[str, int]) -> None:
        """Add one micro-batch with ``vertex_rows`` rows at the vertices it counts."""
        for vertex, rows in vertex_rows.items():
            self._pending_rows[vertex] = self._pending_rows.get(vertex, 0) + rows
        self._pending_ms += max(0, figures.batch_duration_ms)
        read = figures.num_input_rows
        if read is not None and read <= 0 and self.last_input_start_ms is not None:
            return  # no input: inside the interval
        last = self.last_input_start_ms
        interval = (
            figures.start_ms - last
            if last is not None and figures.start_ms > last
            else figures.batch_duration_ms
        )
        spent = self._pending_ms

        def per_second(rows: int, ms: int) -> float:
            return finite(rows * 1000.0 / ms) if ms > 0 else 0.0

        if read is None:  # a progress without its rows: Spark's rates
            self.input_rows_per_second = figures.spark_input_rows_per_second
            self.processed_rows_per_second = figures.spark_processed_rows_per_second
        else:
            self.input_rows_per_second = per_second(read, interval)
            self.processed_rows_per_second = per_second(read, spent)
        for vertex in {*self.vertices, *self._pending_rows}:
            rows = self._pending_rows.get(vertex, 0)
            self.vertices[vertex] = (per_second(rows, interval), per_second(rows, spent))
        self._pending_rows.clear()
        self._pending_ms = 0
        self.last_input_start_ms = figures.start_ms


def history_settings(conf: Callable[[str], str | None]) -> tuple[int, int]:
    """``(window_seconds, max_points)`` from :data:`HISTORY_MINUTES_CONF` and
    :data:`HISTORY_POINTS_CONF` as ``conf(key)`` gives them; a value that is not an integer in
    range is logged and the default used (metrics never fail the job)."""

    def read(key: str, default: int, bounds: tuple[int, int]) -> int:
        try:
            raw = conf(key)
        except Exception:  # no session, or a session being stopped
            return default
        if raw is None or str(raw).strip() == "":
            return default
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = bounds[0] - 1
        if not bounds[0] <= value <= bounds[1]:
            log.warning(
                "ignoring %s=%r: expected an integer in %d–%d; using %d",
                key,
                raw,
                bounds[0],
                bounds[1],
                default,
            )
            return default
        return value

    minutes = read(HISTORY_MINUTES_CONF, DEFAULT_HISTORY_MINUTES, _MINUTES_RANGE)
    points = read(HISTORY_POINTS_CONF, DEFAULT_HISTORY_POINTS, _POINTS_RANGE)
    return minutes * 60, points


def spark_history_settings(spark: Any) -> tuple[int, int]:
    """:func:`history_settings` of a SparkSession's conf."""
    return history_settings(lambda key: spark.conf.get(key, None))


@dataclass(frozen=True)
class _Point:
    t_ms: int
    pipeline: tuple[Number | None, ...]
    vertices: dict[str, tuple[Number | None, ...]]


class MetricsHistory:
    """The pipeline's metrics over the last ``window_s`` seconds, a point per
    ``window_s / max_points`` seconds (thread-safe).

    :meth:`record` takes a snapshot: one that falls in the same interval as the latest point
    replaces it, so a point holds the latest micro-batch of its interval. At most
    ``max_points`` points (older ones, and any older than the window, are dropped) and
    :data:`MAX_HISTORY_VERTICES` vertices (the first ones seen; others have no series).
    """

    def __init__(
        self,
        window_s: int = DEFAULT_HISTORY_MINUTES * 60,
        max_points: int = DEFAULT_HISTORY_POINTS,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.window_ms = int(window_s) * 1000
        self.max_points = max(1, min(int(max_points), MAX_HISTORY_POINTS))
        self.resolution_ms = max(1, self.window_ms // self.max_points)
        self._clock = clock
        self._lock = threading.Lock()
        self._points: deque[_Point] = deque(maxlen=self.max_points)
        self._vertices: dict[str, None] = {}  # the vertices with series, in first-seen order

    def __len__(self) -> int:
        with self._lock:
            return len(self._points)

    def record(self, metrics: PipelineMetrics, t_ms: int | None = None) -> None:
        """Keep ``metrics`` as the point of its interval (``t_ms``: when, default now)."""
        now = int(self._clock() * 1000)
        # A micro-batch's end from a clock ahead of this one would pin every later point to
        # it (points only move forward): no point is later than now and a little slack.
        t = now if t_ms is None else min(int(t_ms), now + FUTURE_SLACK_MS)
        pipeline = tuple(getattr(metrics, name) for name in PIPELINE_SERIES)
        with self._lock:
            for name in metrics.vertices:
                if name not in self._vertices and len(self._vertices) < MAX_HISTORY_VERTICES:
                    self._vertices[name] = None
            vertices = {
                name: tuple(getattr(v, field) for field in VERTEX_SERIES)
                for name, v in metrics.vertices.items()
                if name in self._vertices
            }
            last = self._points[-1] if self._points else None
            if last is not None and t < last.t_ms:
                # An earlier micro-batch of another query, recorded after a later one: the
                # snapshot is still the newest, so it updates the latest point.
                t = last.t_ms
            point = _Point(t, pipeline, vertices)
            if last is not None and t // self.resolution_ms == last.t_ms // self.resolution_ms:
                self._points[-1] = point
            else:
                self._points.append(point)
            self._evict(t)

    def _evict(self, now_ms: int) -> None:
        while self._points and self._points[0].t_ms < now_ms - self.window_ms:
            self._points.popleft()

    def snapshot(self, now_ms: int | None = None) -> ProgressHistory:
        """The points of the last window, as :class:`ProgressHistory` columns."""
        now = int(self._clock() * 1000) if now_ms is None else int(now_ms)
        with self._lock:
            self._evict(now)
            points = list(self._points)
            names = [n for n in self._vertices if any(n in p.vertices for p in points)]
        empty: tuple[None, ...] = (None,) * len(VERTEX_SERIES)
        columns: dict[str, Any] = {
            name: [p.pipeline[i] for p in points] for i, name in enumerate(PIPELINE_SERIES)
        }
        vertices: dict[str, VertexHistory] = {}
        for vertex in names:
            rows = [p.vertices.get(vertex, empty) for p in points]
            vertices[vertex] = VertexHistory.model_validate(
                {name: [r[i] for r in rows] for i, name in enumerate(VERTEX_SERIES)}
            )
        return ProgressHistory(
            window_seconds=self.window_ms // 1000,
            resolution_seconds=self.resolution_ms / 1000,
            max_points=self.max_points,
            timestamps=[p.t_ms for p in points],
            vertices=vertices,
            **columns,
        )


def with_history(metrics: PipelineMetrics, history: MetricsHistory | None) -> PipelineMetrics:
    """``metrics`` with ``history``'s snapshot as its ``history`` (unchanged without one)."""
    if history is None:
        return metrics
    return metrics.model_copy(update={"history": history.snapshot()})


def merge_figures(values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of :class:`~sparkglass.runtime.contract.pipeline_metrics.VertexMetrics` (or
    the pipeline's) combined over several queries: ``values`` maps a field to the list of the
    queries' values (``None`` for unknown). Durations and latencies: the longest; the
    watermark: the earliest; state rows: the sum; processed rate: the largest. A field no
    query knows stays ``None``."""
    out: dict[str, Any] = {}
    for name, raw in values.items():
        known = [v for v in raw if v is not None]
        if not known:
            out[name] = None
        elif name == "event_time_watermark":
            out[name] = min(known)
        elif name == "state_rows":
            out[name] = sum(known)
        else:
            out[name] = max(known)
    return out

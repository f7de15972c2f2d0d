"""Live metrics of a running pipeline: the body of the driver's ``GET /api/v1/progress`` and
of the service's ``GET /api/v1/namespaces/{ns}/applications/{app}/progress``.

One model for both, so the page, the service and the driver agree. JSON keys are camelCase;
rates are rows per second, durations ms, timestamps ms since the epoch. The numbers come from
Spark's ``StreamingQueryProgress`` (taken by a query listener, once per micro-batch), the
pipeline's observed metrics (one ``count`` per vertex output, see
``sparkglass.runtime.Pipeline``), and the pass and fail counts of each expectation
(``sparkglass.runtime.quality``). :class:`ProgressHistory` is the last minutes of them, kept
by the driver (``GET /api/v1/progress?history=true``). Each field, its unit and its source:
docs/architecture.md, "Live metrics".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.expectations import (
    MAX_EXPECTATIONS_PER_VERTEX,
    NAME_PATTERN,
    ExpectationAction,
    ExpectationCounts,
)

#: The largest int any field here may hold: int64, as the CRD's ``status.progress`` says.
#: A driver is the application's own code, and an unbounded int (``10**400``) used to pass
#: the contract and make Prometheus' ``generate_latest`` raise ``OverflowError`` on every
#: ``/metrics`` scrape while the service kept the snapshot.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

#: A count of rows, micro-batches or queries: 0 to :data:`INT64_MAX`.
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
#: A timestamp in ms since the epoch, within int64 like the counts.
Millis = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
#: A rate in rows per second: finite, 0 or more (Spark reports NaN for no elapsed time; the
#: runtime reports 0 instead).
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]

#: Most points a :class:`ProgressHistory` holds (``spark.sparkglass.progress.historyPoints``
#: may ask for fewer; 180 by default).
MAX_HISTORY_POINTS = 1000
#: Most vertices a :class:`ProgressHistory` keeps series of (the first ones seen).
MAX_HISTORY_VERTICES = 64
#: Most vertices one :class:`PipelineMetrics` holds: a driver is the application's own code,
#: and the service and the operator read its answers (the CRD admits 64 declared vertices;
#: a discovered pipeline gets room for more).
MAX_METRICS_VERTICES = 1000
#: Longest ``failed`` message (characters): the driver cuts an exception's text to it.
MAX_FAILED_LENGTH = 4096
#: Longest history window, s (``spark.sparkglass.progress.historyMinutes`` is at most 1440).
MAX_HISTORY_WINDOW_S = 1440 * 60

#: A vertex's name as the pipeline's description requires it: a DNS-1123 label.
VertexName = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]


class QueryState(StrEnum):
    """Where the pipeline's streaming queries are, as one word.

    ``NOT_STARTED``: ``start()`` has not started a streaming query (or the pipeline is
    bounded and ran no query). ``ACTIVE``: at least one query runs. ``STOPPED``: every query
    ended without an error. ``FAILED``: a query ended with an exception (``failed`` says
    which and why).
    """

    NOT_STARTED = "NOT_STARTED"
    ACTIVE = "ACTIVE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, object]:
        """The camelCase JSON-ready dict (the wire form)."""
        return self.model_dump(mode="json", by_alias=True)


class ExpectationMetrics(_Model):
    """Rows that passed and failed one expectation of a vertex.

    ``passed_last_micro_batch`` / ``failed_last_micro_batch``: in the latest micro-batch that
    ran the vertex; ``passed_total`` / ``failed_total``: since the pipeline started. Counted by
    Spark's observed metrics, so on streaming vertices only (a bounded vertex's stay 0). A row
    that fails several expectations counts as failed for each.
    """

    action: ExpectationAction
    passed_last_micro_batch: Count = 0
    failed_last_micro_batch: Count = 0
    passed_total: Count = 0
    failed_total: Count = 0


#: An expectation's name as a key (a DNS-1123 label, like the vertex names): the service puts
#: these names into metric labels and URLs, so the contract checks them on the way in.
ExpectationName = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]


class VertexMetrics(_Model):
    """Rows at one vertex's output, and the figures of the streaming queries that run it.

    ``rows_last_micro_batch``: rows in the latest micro-batch that ran the vertex.
    ``rows_per_second``: the vertex's rows over its query's latest input interval, from one
    micro-batch with input to the next (for a stateless query the time since the previous
    trigger, Spark's definition of ``inputRowsPerSecond``; the batch's duration for a query's
    first micro-batch; micro-batches without input, run to move a watermark, fall inside the
    interval); 0 once the query went idle or stopped.
    ``rows_total``: rows since the pipeline started, accumulated from every micro-batch's
    progress as it arrives (each micro-batch of a query counted once, by its ``batchId``),
    never a sum over Spark's bounded ``recentProgress``. Several queries reading the same
    vertex each count it; the largest count is kept.

    ``processed_rows_per_second``: the same interval's rows over its micro-batches' summed
    durations (Spark's definition of ``processedRowsPerSecond`` for one micro-batch).
    Of the latest micro-batch of the queries that run the vertex (``None``: not known, e.g. no
    micro-batch yet, a query without event time or state, or a driver before these fields):
    ``batch_duration_ms``: its duration
    (``durationMs.triggerExecution``), the longest over the queries; ``latency_ms``: from the
    previous micro-batch's trigger to this one's end, the longest a row that arrived just after
    the previous trigger waited for its sink (the batch's own duration for a query's first);
    ``event_time_watermark``: ``eventTime.watermark`` (ms since the epoch), the earliest over
    the queries that have one; ``state_rows``: rows in state (``stateOperators[].numRowsTotal``
    summed over the operators, then over the queries).
    """

    rows_last_micro_batch: Count = 0
    rows_per_second: Rate = 0.0
    rows_total: Count = 0
    processed_rows_per_second: Rate | None = None
    batch_duration_ms: Count | None = None
    latency_ms: Count | None = None
    event_time_watermark: Millis | None = None
    state_rows: Count | None = None
    #: Per expectation name, in declaration order (empty: the vertex declares none).
    expectations: dict[ExpectationName, ExpectationMetrics] = Field(
        default_factory=dict, max_length=MAX_EXPECTATIONS_PER_VERTEX
    )


#: One series of a :class:`ProgressHistory`: a value per point, ``None`` where it was unknown.
#: Strict numbers (no ``"12"`` or ``true``); the first bad value ends the validation
#: (``fail_fast``), so a driver's bad answer costs one error, not one per value.
Series = Annotated[
    list[Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX, strict=True)] | Rate | None],
    Field(max_length=MAX_HISTORY_POINTS, fail_fast=True),
]


class VertexHistory(_Model):
    """One vertex's :class:`VertexMetrics` over time, a value per point of the history
    (``None`` at the points before the vertex had metrics)."""

    rows_total: Series = Field(default_factory=list)
    rows_per_second: Series = Field(default_factory=list)
    processed_rows_per_second: Series = Field(default_factory=list)
    batch_duration_ms: Series = Field(default_factory=list)
    latency_ms: Series = Field(default_factory=list)
    event_time_watermark: Series = Field(default_factory=list)
    state_rows: Series = Field(default_factory=list)


class ProgressHistory(_Model):
    """The pipeline's metrics over the last ``window_seconds``, as columns: ``timestamps``
    (ms since the epoch, ascending) and one series of the same length per figure.

    The driver keeps a point per ``resolution_seconds`` (the latest micro-batch in that
    interval wins; an interval without a micro-batch has no point), at most ``max_points``
    of them (``window_seconds / resolution_seconds``), and drops points older than the window:
    memory and answer are bounded by ``max_points`` × (7 + 7 × vertices) numbers, with at most
    :data:`MAX_HISTORY_VERTICES` vertices. Figures as in :class:`PipelineMetrics` and
    :class:`VertexMetrics`.
    """

    window_seconds: Annotated[int, Field(ge=1, le=MAX_HISTORY_WINDOW_S)]
    resolution_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    max_points: Annotated[int, Field(ge=1, le=MAX_HISTORY_POINTS)]
    timestamps: Annotated[list[Millis], Field(max_length=MAX_HISTORY_POINTS)] = Field(
        default_factory=list
    )
    micro_batches: Series = Field(default_factory=list)
    input_rows_per_second: Series = Field(default_factory=list)
    processed_rows_per_second: Series = Field(default_factory=list)
    batch_duration_ms: Series = Field(default_factory=list)
    latency_ms: Series = Field(default_factory=list)
    event_time_watermark: Series = Field(default_factory=list)
    state_rows: Series = Field(default_factory=list)
    vertices: dict[VertexName, VertexHistory] = Field(
        default_factory=dict, max_length=MAX_HISTORY_VERTICES
    )

    @model_validator(mode="after")
    def _same_lengths(self) -> ProgressHistory:
        n = len(self.timestamps)
        columns = [getattr(self, name) for name in PIPELINE_SERIES]
        columns += [getattr(v, name) for v in self.vertices.values() for name in VERTEX_SERIES]
        if any(len(c) != n for c in columns):
            raise ValueError(f"every series must have one value per timestamp ({n})")
        if n > self.max_points:
            raise ValueError(f"{n} timestamps, more than maxPoints ({self.max_points})")
        if any(a > b for a, b in zip(self.timestamps, self.timestamps[1:], strict=False)):
            raise ValueError("timestamps must ascend")
        return self


#: The pipeline-wide series of a :class:`ProgressHistory`, in order.
PIPELINE_SERIES = (
    "micro_batches",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "latency_ms",
    "event_time_watermark",
    "state_rows",
)
#: The series of a :class:`VertexHistory`, in order.
VERTEX_SERIES = (
    "rows_total",
    "rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "latency_ms",
    "event_time_watermark",
    "state_rows",
)


class PipelineMetrics(_Model):
    """A snapshot of the pipeline's streaming progress.

    ``micro_batches``: completed micro-batches over all its queries. ``input_rows_per_second``
    and ``processed_rows_per_second``: the largest of the queries' rates over their latest
    input interval (``numInputRows`` over it, and over its micro-batches' durations: Spark's
    ``inputRowsPerSecond`` and ``processedRowsPerSecond`` for a stateless query; 0 for a query
    that went idle or stopped); the same micro-batches and intervals as the vertices' rates,
    so a query's source vertex shows its input rate. ``batch_duration_ms`` and
    ``latency_ms``: the longest over the queries' latest micro-batches;
    ``event_time_watermark``: the earliest watermark of the queries that have one;
    ``state_rows``: the rows in state of all the queries (see :class:`VertexMetrics`;
    ``None``: unknown). ``last_micro_batch_timestamp``: when the latest micro-batch ended
    (ms), ``None`` before the first. ``observed_at``: when the driver took the snapshot (ms).
    ``vertices``: per vertex name, for the vertices a micro-batch counted rows at and the
    vertices that declare expectations (there with their counts, 0 before the first
    micro-batch and on bounded vertices); other bounded vertices are absent. ``history``: the
    last minutes (only when asked for: ``?history=true``).
    """

    state: QueryState = QueryState.NOT_STARTED
    active_queries: Count = 0
    failed: Annotated[str, Field(max_length=MAX_FAILED_LENGTH)] | None = None
    micro_batches: Count = 0
    input_rows_per_second: Rate = 0.0
    processed_rows_per_second: Rate = 0.0
    batch_duration_ms: Count | None = None
    latency_ms: Count | None = None
    event_time_watermark: Millis | None = None
    state_rows: Count | None = None
    last_micro_batch_timestamp: Millis | None = None
    observed_at: Millis = 0
    vertices: dict[VertexName, VertexMetrics] = Field(
        default_factory=dict, max_length=MAX_METRICS_VERTICES
    )
    history: ProgressHistory | None = None

    def expectation_counts(self) -> list[ExpectationCounts]:
        """The expectations' counts as the driver's ``GET /api/v1/expectations`` lists them:
        one entry per (vertex, expectation), vertices in this snapshot's order, expectations
        in declaration order."""
        return [
            ExpectationCounts(
                vertex=vertex,
                name=name,
                action=counts.action,
                passed=counts.passed_total,
                failed=counts.failed_total,
                passed_last_batch=counts.passed_last_micro_batch,
                failed_last_batch=counts.failed_last_micro_batch,
            )
            for vertex, metrics in self.vertices.items()
            for name, counts in metrics.expectations.items()
        ]

"""The pipeline DSL: named sources, vertices and sinks over Spark DataFrames.

A :class:`Pipeline` is a small DAG of named steps. A *source* is a DataFrame (bounded
when it is a batch DataFrame, unbounded when it is streaming); a *vertex* is a function of
its input DataFrames returning a DataFrame; a *sink* writes one input. ``start()`` plans
the pipeline (:mod:`sparkglass.runtime.contract.planner`) and runs it phase by phase. Names
are DNS-1123 labels because they appear in REST URLs and Kubernetes labels.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery, StreamingQueryListener
from pyspark.sql.types import StructType

from sparkglass.runtime.async_ops.async_vertex import async_map, make_options
from sparkglass.runtime.async_ops.errors import AsyncConfigError
from sparkglass.runtime.async_ops.retry import NO_RETRY
from sparkglass.runtime.contract.attributes import (
    OVERRIDES_CONF,
    attributes_of,
    idempotent_order_by,
)
from sparkglass.runtime.contract.description import (
    ATTRIBUTES_ATTR,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
    check_vertex_name,
    topological_order,
)
from sparkglass.runtime.contract.error_rows import OnFailure, parse_on_failure
from sparkglass.runtime.contract.errors import PipelineError, PlanError
from sparkglass.runtime.contract.expectations import (
    EXPECTATIONS_CONF,
    Expectation,
    ExpectationCounts,
    check_unique,
    expectations_of,
    merge_expectations,
    parse_expectation_overrides,
)
from sparkglass.runtime.contract.pipeline_metrics import (
    MAX_FAILED_LENGTH,
    ExpectationMetrics,
    PipelineMetrics,
    QueryState,
    VertexMetrics,
)
from sparkglass.runtime.contract.plan import Optimizations, Plan
from sparkglass.runtime.contract.planner import plan as plan_pipeline
from sparkglass.runtime.failing_row import failing_row_in
from sparkglass.runtime.optimizations.fusion import (
    ArrowBatchFunction,
    ArrowVertexFunction,
    run_fused,
)
from sparkglass.runtime.optimizations.latest_per_key import latest_per_key
from sparkglass.runtime.optimizations.materialize import materialize
from sparkglass.runtime.python_errors import map_with_error_rows
from sparkglass.runtime.quality import (
    EXPECTATION_PREFIX,
    ROWS_METRIC,
    ExpectationTally,
    apply_expectations,
    route_errors,
)
from sparkglass.runtime.query_progress import (
    MetricsHistory,
    QueryFigures,
    QueryRates,
    epoch_ms,
    figures_of,
    merge_figures,
    spark_history_settings,
    with_history,
)
from sparkglass.runtime.sampling.programs import redacted_column_names
from sparkglass.runtime.sampling.rounds import MicroBatches
from sparkglass.runtime.sampling.tap import detach, install_materialized_tap, install_tap

log = logging.getLogger(__name__)

VertexFunction = Callable[..., DataFrame]
#: A sink writer: given the sink's input DataFrame, either return a configured
#: ``DataStreamWriter`` (streaming input; the pipeline adds a checkpoint location if the
#: writer has none and starts it) or perform a batch write and return ``None``.
SinkWriter = Callable[[DataFrame], DataStreamWriter | None]

#: Prefix of the observed-metrics names the pipeline uses to count rows per vertex.
OBSERVATION_PREFIX = "sg_rows_"


@dataclass
class Step:
    """One named step as the pipeline holds it (see :class:`VertexDescription`)."""

    name: str
    kind: VertexKind
    inputs: tuple[str, ...] = ()
    fn: VertexFunction | None = None
    df: DataFrame | None = None
    writer: SinkWriter | None = None
    attributes: VertexAttributes = field(default_factory=VertexAttributes)
    python: bool = False
    expectations: list[Expectation] = field(default_factory=list)


@dataclass
class VertexProgress:
    """Rows seen at one vertex's output, from Spark's observed metrics, and the figures of
    the latest micro-batch of the queries that run it (``None``: unknown; see
    :class:`~sparkglass.runtime.contract.pipeline_metrics.VertexMetrics`)."""

    rows_total: int = 0
    rows_last_batch: int = 0
    #: The vertex's rows per second over its query's latest input interval (the time since
    #: the previous trigger, for a stateless query; see ``QueryRates``).
    rows_per_second: float = 0.0
    #: The same rows per second of the interval's micro-batches' durations.
    processed_rows_per_second: float | None = None
    batch_duration_ms: int | None = None
    latency_ms: int | None = None
    event_time_watermark: int | None = None
    state_rows: int | None = None


@dataclass
class PipelineProgress:
    """A snapshot of a running pipeline (what the demo's live display shows).

    ``micro_batches`` counts completed micro-batches over all streaming queries.
    ``input_rows_per_second`` and ``processed_rows_per_second`` are the largest of the
    queries' latest rates (Spark's ``StreamingQueryProgress``; 0 for a query gone idle or
    stopped), in rows/s: every query reads its sources on its own, so a sum would count the
    same rows twice. ``batch_duration_ms``, ``latency_ms`` (the longest),
    ``event_time_watermark`` (the earliest) and ``state_rows`` (the sum) over the queries'
    latest micro-batches, ``None`` when unknown.
    ``vertices`` holds, per vertex, the rows at its output (Spark observed metrics).
    ``last_micro_batch_end_ms``: when the latest micro-batch ended (ms since the epoch).
    ``started_queries``: streaming queries ``start()`` started (running or not).
    """

    micro_batches: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    vertices: dict[str, VertexProgress] = field(default_factory=dict)
    active_queries: int = 0
    failed: str | None = None
    #: Pass and fail counts of each expectation (streaming vertices).
    expectations: list[ExpectationCounts] = field(default_factory=list)
    last_micro_batch_end_ms: int | None = None
    started_queries: int = 0
    batch_duration_ms: int | None = None
    latency_ms: int | None = None
    event_time_watermark: int | None = None
    state_rows: int | None = None


#: Micro-batches remembered for sampling rounds (per pipeline; a few minutes at most rates).
KEPT_MICRO_BATCHES = 1024
#: Progress events of unknown queries kept until start() notes the query ids (the session's
#: other queries' events pass through and age out).
UNCLAIMED_PROGRESS = 64
#: How long a query's own latest progress is reused, s: a round's monitor asks every 50 ms
#: while it waits for a micro-batch, and each read is a Py4J call and a JSON parse.
QUERY_PROGRESS_CACHE_S = 0.5


@dataclass(frozen=True)
class _MicroBatch:
    query_id: str
    start_ms: int  # trigger start, ms since the epoch
    end_ms: int
    vertex_rows: dict[str, int]  # observed rows per vertex in this micro-batch


def _latest_micro_batch(query: StreamingQuery) -> _MicroBatch | None:
    """The query's latest finished micro-batch as the query itself holds it (no row counts),
    or ``None`` (none yet, or the query is gone). An idle query's periodic no-data progress
    (every 10 s, ``spark.sql.streaming.noDataProgressEventInterval``; it has no ``addBatch``
    duration, and the listener sees it as ``onQueryIdle``) is not a micro-batch."""
    try:
        progress = query.lastProgress
        if progress is None or "addBatch" not in (progress.durationMs or {}):
            return None
        return _micro_batch_of(progress, {})
    except Exception:  # a stopped session, or a timestamp Spark changed: the listener decides
        return None


def _micro_batch_of(progress: Any, vertex_rows: dict[str, int]) -> _MicroBatch:
    """One micro-batch from a ``StreamingQueryProgress``: it started at the progress's
    ``timestamp`` (the trigger) and lasted ``batchDuration`` ms.

    Raises:
        ValueError: the timestamp is not ISO 8601 (``2026-11-22T17:55:01.123Z``).
    """
    start_ms = _epoch_ms(str(progress.timestamp))
    return _MicroBatch(
        str(progress.id), start_ms, start_ms + int(progress.batchDuration or 0), vertex_rows
    )


def _epoch_ms(timestamp: str) -> int:
    """Spark's progress timestamp (``2026-11-22T17:55:01.123Z``) in ms since the epoch."""
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


#: How long ``Pipeline.stop()`` lets running micro-batches finish, seconds.
STOP_TIMEOUT_S = 30.0
#: How long ``Pipeline.stop()`` then waits for killed tasks to end (they log their abort as
#: they end, while its loggers are quiet), seconds; each ends at once on an idle driver.
ABORT_WAIT_S = 30.0
#: How long ``Pipeline.stop()`` waits at most, after the status store shows the queries'
#: jobs ended, for the scheduler to count no running task, seconds.
TASK_SETTLE_S = 10.0
#: Spark loggers that report a micro-batch write cut short by ``StreamingQuery.stop()`` as an
#: ERROR, although an intentional stop makes it expected (the batch is not committed and runs
#: again from the checkpoint on restart). The driver's, and the tasks' in local mode; on a
#: cluster the executors log theirs in their own JVMs. Silenced only while the queries stop.
_ABORT_LOGGERS = (
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.util.Utils",  # "Aborting task" of the killed write task
)


def _finish_running_micro_batch(query: StreamingQuery, deadline: float) -> None:
    """Wait until the micro-batch running now (if any) ended, or ``deadline`` (monotonic s)."""
    if not query.isActive or not query.status["isTriggerActive"]:
        return
    last = query.lastProgress
    running_after = last["batchId"] if last else -1
    while query.isActive and time.monotonic() < deadline:
        last = query.lastProgress
        if (last["batchId"] if last else -1) > running_after:
            return  # the batch that ran at the call finished (the next may have begun)
        if not query.status["isTriggerActive"]:
            return
        time.sleep(0.05)


def _wait_for_job_groups(spark: SparkSession | None, groups: list[str], deadline: float) -> None:
    """Wait until no job of ``groups`` (a query's micro-batch jobs run in the job group named
    by its ``runId``) is running and none of their stages has a task left, then until the
    scheduler counts no running task (at most :data:`TASK_SETTLE_S`), or ``deadline``
    (monotonic seconds)."""
    if spark is None or not groups:
        return
    with contextlib.suppress(Exception):  # a stopped context has no jobs left anyway
        _drain_app_status_events(spark, deadline)
        tracker = spark.sparkContext.statusTracker()

        def busy() -> bool:
            for group in groups:
                for job in tracker.getJobIdsForGroup(group):
                    info = tracker.getJobInfo(job)
                    if info is None:
                        continue
                    if info.status == "RUNNING":
                        return True
                    # A cancelled job is FAILED at once, while its killed tasks still run
                    # (and log their abort) until each one sees the interrupt.
                    for stage in info.stageIds:
                        stage_info = tracker.getStageInfo(stage)
                        if stage_info is not None and stage_info.numActiveTasks > 0:
                            return True
            return False

        while time.monotonic() < deadline and busy():
            time.sleep(0.05)
        # The status store learns of a killed task from the listener bus, which a loaded
        # driver delivers late; the scheduler itself counts the task running until the
        # task's own report comes, after it logged its abort. Bounded: other work of the
        # session may keep tasks running.
        jtracker = spark.sparkContext._jsc.sc().statusTracker()
        settle = min(deadline, time.monotonic() + TASK_SETTLE_S)
        while time.monotonic() < settle and any(
            e.numRunningTasks() > 0 for e in jtracker.getExecutorInfos()
        ):
            time.sleep(0.05)


def _drain_app_status_events(spark: SparkSession, deadline: float) -> None:
    """Wait until the listener bus delivered its queued events to the status store, or
    ``deadline`` (monotonic s).

    The status tracker sees what that queue (``appStatus``) delivered, seconds late on a busy
    driver: a micro-batch job that began just before the stop would look absent, and its
    killed tasks log their abort after the loggers are back. Every job that can still have
    tasks was announced before ``stop()`` returned, so once the queue drained, it is seen.
    Only that queue: the streams queue may be blocked by the very listener callback that
    called ``stop()``. Spark internals (``AsyncEventQueue``): when they differ, the tracker is
    asked as it is."""
    with contextlib.suppress(Exception):
        jvm: Any = spark.sparkContext._jvm
        queues = spark.sparkContext._jsc.sc().listenerBus().queues()
        for i in range(queues.size()):
            queue = queues.get(i)
            if queue.name() == "appStatus":
                remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                queue.waitUntilEmpty(jvm.System.currentTimeMillis() + remaining_ms)


@contextlib.contextmanager
def _expected_aborts_quiet(spark: SparkSession | None) -> Iterator[None]:
    """Silence :data:`_ABORT_LOGGERS` in the driver JVM meanwhile (log4j2, restored after)."""
    jvm = getattr(spark, "_jvm", None) if spark is not None else None
    saved: list[tuple[str, Any]] = []
    try:
        if jvm is not None:
            log4j = jvm.org.apache.logging.log4j
            for name in _ABORT_LOGGERS:
                saved.append((name, log4j.LogManager.getLogger(name).getLevel()))
                log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    except Exception:  # another logging backend: the lines show, nothing else changes
        pass
    try:
        yield
    finally:
        if jvm is not None:
            for name, level in saved:
                with contextlib.suppress(Exception):
                    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


class _ProgressListener(StreamingQueryListener):
    """Accumulates per-vertex row counts from each micro-batch's observed metrics (of the
    pipeline's own queries: Spark delivers every query's events to every listener)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self._pipeline = pipeline

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self._pipeline._on_progress(event.progress)

    def onQueryIdle(self, event: Any) -> None:
        try:
            at_ms: int | None = epoch_ms(str(event.timestamp))
        except (AttributeError, ValueError):
            at_ms = None
        self._pipeline._on_quiet(str(event.id), str(event.runId), at_ms)

    def onQueryTerminated(self, event: Any) -> None:
        self._pipeline._on_quiet(str(event.id), str(event.runId))


class Pipeline:
    """A named DAG of sources, vertices and sinks over Spark DataFrames.

    ``checkpoint_root`` is where streaming sinks without their own checkpoint location
    keep their checkpoints (default: a temporary directory removed by ``stop()``).
    Errors in the graph raise :class:`PipelineError` naming the offending vertex. Example::

        p = Pipeline("flights", spark)
        p.source("flights", spark.readStream.schema(schema).csv(path))
        p.vertex("parse", "flights", parse)
        p.sink("out", "parse", lambda df: df.writeStream.format("memory").queryName("out"))
        p.start(); p.await_termination(60); p.stop()
    """

    def __init__(
        self,
        name: str,
        spark: SparkSession | None = None,
        *,
        checkpoint_root: str | Path | None = None,
        observe_rows: bool = True,
    ) -> None:
        self.name = check_vertex_name(name)
        self._spark = spark
        self._steps: dict[str, Step] = {}
        self._checkpoint_root = Path(checkpoint_root) if checkpoint_root else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._observe_rows = observe_rows
        self._queries: dict[str, StreamingQuery] = {}
        self._outputs: dict[str, DataFrame] = {}
        self._lock = threading.Lock()
        self._progress = PipelineProgress()
        #: Per (query id, vertex): rows since the start (each micro-batch counted once).
        self._rows_by_query: dict[tuple[str, str], int] = {}
        #: Per query id: its rates and its vertices' over its latest input interval.
        self._rates: dict[str, QueryRates] = {}
        #: Per query id: when its latest micro-batch started (ms since the epoch).
        self._last_start: dict[str, int] = {}
        #: Per query id: the figures of its latest micro-batch (duration, state...).
        self._figures: dict[str, QueryFigures] = {}
        #: Per query id: the latest batchId counted (a progress of an earlier one is not).
        self._counted: dict[str, int] = {}
        #: Query ids gone idle or stopped: their rates read 0 until their next micro-batch.
        self._quiet: set[str] = set()
        #: The last minutes of metrics (sized from the session's conf by start()).
        self._history = MetricsHistory()
        self._batches: deque[_MicroBatch] = deque(maxlen=KEPT_MICRO_BATCHES)
        #: Per sink: its streaming query's id (a Py4J call, so asked once at start).
        self._query_ids: dict[str, str] = {}
        #: Progress of queries not known as this pipeline's (yet): a query's first event may
        #: arrive before start() noted its id. Other pipelines' events age out of it.
        self._unclaimed: deque[Any] = deque(maxlen=UNCLAIMED_PROGRESS)
        #: Per sink: its query's run id, which tells this run's progress from that of an
        #: earlier run on the same checkpoint (same query id) still queued on the bus.
        self._run_ids: dict[str, str] = {}
        #: Held while progress is recorded, so the early events of a query are recorded
        #: before any later one (rates and "last micro-batch" figures follow the order).
        self._recording = threading.Lock()
        #: Per sink: when its query's own latest progress was read, and what it held.
        self._latest_read: dict[str, tuple[float, _MicroBatch | None]] = {}
        #: Materialized vertices and when their output was written (ms since the epoch).
        self._materialized_at: dict[str, int] = {}
        self._listener: _ProgressListener | None = None
        self._started = False
        self._plan: Plan | None = None  # set by start(): how output() builds each step
        #: Expectations from the SparkApplication spec, by vertex (read by start()).
        self._expectation_overrides: dict[str, list[Expectation]] = {}
        #: (vertex, expectation) → [passed, failed, passed last batch, failed last batch].
        self._expectation_counts: dict[tuple[str, str], list[int]] = {}
        #: Per vertex: the JVM tally counting its expectations (when the native counter counts).
        self._expectation_tallies: dict[str, ExpectationTally] = {}

    # ------------------------------------------------------------------ building
    @property
    def spark(self) -> SparkSession:
        """The session of the first source, unless one was given."""
        if self._spark is None:
            for step in self._steps.values():
                if step.df is not None:
                    self._spark = step.df.sparkSession
                    break
            else:
                active = SparkSession.getActiveSession()
                if active is None:
                    raise PipelineError("pipeline has no SparkSession and no source yet")
                self._spark = active
        return self._spark

    def _add(self, step: Step) -> str:
        check_vertex_name(step.name)
        if step.name in self._steps:
            raise PipelineError(f"duplicate vertex name {step.name!r}", vertex=step.name)
        if self._started:
            raise PipelineError(
                f"cannot add {step.name!r}: pipeline already started", vertex=step.name
            )
        self._steps[step.name] = step
        return step.name

    def source(self, name: str, df: DataFrame) -> str:
        """Add a source; bounded unless ``df.isStreaming``. Returns ``name``."""
        if not isinstance(df, DataFrame):
            raise PipelineError(
                f"source {name!r} needs a DataFrame, got {type(df).__name__}", vertex=name
            )
        return self._add(Step(name=name, kind=VertexKind.SOURCE, df=df))

    def vertex(
        self,
        name: str,
        inputs: str | Sequence[str],
        fn: VertexFunction,
        *,
        attributes: VertexAttributes | None = None,
        python: bool = False,
        expectations: Sequence[Expectation] | None = None,
    ) -> str:
        """Add a vertex computing ``fn(*input_dataframes)``. Returns ``name``.

        Attributes come from ``attributes`` or else from the attribute decorators on
        ``fn``. ``python=True`` marks a vertex whose work runs as Python on the executors.
        Expectations come from ``expectations`` or else from the ``expect*`` decorators on
        ``fn`` (:mod:`sparkglass.runtime.contract.expectations`); raises
        :class:`~sparkglass.runtime.contract.errors.PlanError` for two of one name.
        """
        if not callable(fn):
            raise PipelineError(f"vertex {name!r} needs a callable, got {fn!r}", vertex=name)
        declared = attributes or getattr(fn, ATTRIBUTES_ATTR, None) or VertexAttributes()
        checks = list(expectations) if expectations is not None else expectations_of(fn)
        check_unique(checks, f"vertex {name!r}")
        return self._add(
            Step(
                name=name,
                kind=VertexKind.VERTEX,
                inputs=_as_inputs(name, inputs),
                fn=fn,
                attributes=declared,
                python=python,
                expectations=checks,
            )
        )

    def sink(self, name: str, input: str, write: SinkWriter) -> str:
        """Add a sink writing vertex ``input`` with ``write`` (see :data:`SinkWriter`)."""
        if not callable(write):
            raise PipelineError(f"sink {name!r} needs a callable writer", vertex=name)
        return self._add(Step(name=name, kind=VertexKind.SINK, inputs=(input,), writer=write))

    def python_vertex(
        self,
        name: str,
        input: str,
        fn: ArrowBatchFunction,
        schema: StructType | str,
        *,
        attributes: VertexAttributes | None = None,
        on_error: OnFailure | str = OnFailure.FAIL,
    ) -> str:
        """Add a Python batch vertex: ``fn(batch)`` on each Arrow batch of ``input``.

        ``fn`` maps a ``pyarrow.RecordBatch`` to one with the columns of ``schema`` (a
        ``StructType`` or DDL string); it runs on the executors through ``mapInArrow``.
        Adjacent Python batch vertices that both declare ``not_cache_record`` run fused in
        one Python pass (:mod:`sparkglass.runtime.optimizations.fusion`). Attributes come from
        ``attributes`` or the decorators on ``fn``. Returns ``name``.

        ``on_error``: ``"fail"`` (default: an exception in ``fn`` fails the task) or
        ``"emit_error"``: the rows ``fn`` raises on are skipped and kept as error rows, with
        the exception's type and message, for rounds of kind ``errors``
        (:mod:`sparkglass.runtime.python_errors`; such a vertex is not fused). Raises
        :class:`PipelineError` for another value.
        """
        try:
            mode = parse_on_failure(on_error, "on_error")
        except ValueError as exc:
            raise PipelineError(f"python vertex {name!r}: {exc}", vertex=name) from None
        declared = attributes or attributes_of(fn)
        if mode is OnFailure.EMIT_ERROR:

            def skipping(df: DataFrame) -> DataFrame:
                return map_with_error_rows(df, name, fn, schema, redacted_column_names(df))

            # The decorators' attributes stay readable on the vertex function (the planner's
            # order_by of an idempotent vertex reads them).
            functools.update_wrapper(skipping, fn)
            return self.vertex(
                name,
                input,
                skipping,
                attributes=declared,
                python=True,
                expectations=expectations_of(fn),
            )
        wrapped = ArrowVertexFunction(name=name, fn=fn, schema=schema)
        return self.vertex(
            name, input, wrapped, attributes=declared, python=True, expectations=expectations_of(fn)
        )

    # --------------------------------------------------------------- describing
    def steps(self) -> list[Step]:
        """All steps in topological order; raises :class:`PipelineError` on a bad graph."""
        order = topological_order(self._descriptions_unordered())
        return [self._steps[v.name] for v in order]

    def _descriptions_unordered(self) -> list[VertexDescription]:
        return [
            VertexDescription(
                name=s.name,
                kind=s.kind,
                inputs=list(s.inputs),
                bounded=True,  # filled in below, once inputs are known to exist
                python=s.python,
                attributes=s.attributes,
            )
            for s in self._steps.values()
        ]

    def describe(self) -> PipelineDescription:
        """The pipeline as a :class:`PipelineDescription` (topological order).

        Boundedness: a source is unbounded when its DataFrame is streaming; any other step
        is unbounded when one of its inputs is.
        """
        ordered = topological_order(self._descriptions_unordered())
        bounded: dict[str, bool] = {}
        for v in ordered:
            step = self._steps[v.name]
            if step.kind is VertexKind.SOURCE:
                assert step.df is not None
                bounded[v.name] = not step.df.isStreaming
            else:
                bounded[v.name] = all(bounded[i] for i in v.inputs)
            v.bounded = bounded[v.name]
        return PipelineDescription(name=self.name, vertices=ordered)

    # ---------------------------------------------------------------- building
    def output(self, name: str) -> DataFrame:
        """The DataFrame at the output of source or vertex ``name`` (built on first use)."""
        if name not in self._steps:
            raise PipelineError(
                f"no vertex {name!r}; vertices: {', '.join(self._steps)}", vertex=name
            )
        if name in self._outputs:
            return self._outputs[name]
        step = self._steps[name]
        if step.kind is VertexKind.SINK:
            raise PipelineError(f"{name!r} is a sink; it has no output", vertex=name)
        if step.kind is VertexKind.SOURCE:
            assert step.df is not None
            df = step.df
        else:
            assert step.fn is not None
            fused = self._fused_group(step)
            if fused is not None:
                df = run_fused(self.output(fused[0]), fused[1])
            else:
                df = step.fn(*[self.output(i) for i in step.inputs])
            if not isinstance(df, DataFrame):
                raise PipelineError(
                    f"vertex {name!r} returned {type(df).__name__}, not a DataFrame", vertex=name
                )
            # Error rows go to the vertex's errors output first: expectations judge good rows.
            df = route_errors(self, name, df)
            df, tally = apply_expectations(self, name, df, self.expectations(name))
            if tally is not None:
                replaced = self._expectation_tallies.get(name)
                if replaced is not None:  # rebuilt (the spec's expectations): never taken again
                    replaced.release()
                self._expectation_tallies[name] = tally
            df = self._apply_plan(step, df)
        df = self._instrument(name, df)
        self._outputs[name] = df
        return df

    def expectations(self, name: str) -> list[Expectation]:
        """The expectations of vertex ``name``: declared ones, with the SparkApplication's
        (``spark.sparkglass.pipeline.expectations``) replacing those of the same name."""
        step = self._steps[name]
        return merge_expectations(step.expectations, self._expectation_overrides.get(name, []))

    def expectation_counts(self) -> list[ExpectationCounts]:
        """Pass and fail counts of every expectation of a streaming vertex (totals since
        start and in the last micro-batch), in declaration order."""
        out: list[ExpectationCounts] = []
        with self._lock:
            counts = dict(self._expectation_counts)
        for step in self._steps.values():
            if step.kind is not VertexKind.VERTEX:
                continue
            for e in self.expectations(step.name):
                c = counts.get((step.name, e.name), [0, 0, 0, 0])
                out.append(
                    ExpectationCounts(
                        vertex=step.name,
                        name=e.name,
                        action=e.action,
                        passed=c[0],
                        failed=c[1],
                        passed_last_batch=c[2],
                        failed_last_batch=c[3],
                    )
                )
        return out

    def _fused_group(self, step: Step) -> tuple[str, list[ArrowVertexFunction]] | None:
        """``(input of the group, its functions)`` when ``step`` ends a planned fusion group."""
        if self._plan is None:
            return None
        group = self._plan.fusion(self._plan.vertex(step.name).fusion_group or "")
        if group is None or group.vertices[-1] != step.name:
            return None
        functions = [self._steps[n].fn for n in group.vertices]
        if not all(isinstance(f, ArrowVertexFunction) for f in functions):
            return None
        head = self._steps[group.vertices[0]]
        return head.inputs[0], [f for f in functions if isinstance(f, ArrowVertexFunction)]

    def _apply_plan(self, step: Step, df: DataFrame) -> DataFrame:
        """The planner's uses at a vertex output: materialization, latest row per key."""
        if self._plan is None:
            return df
        planned = self._plan.vertex(step.name)
        if planned.materialize:
            path = self._checkpoint_for(f"_materialized/{step.name}")
            df = materialize(df, path, vertex=step.name)
            self._materialized_at[step.name] = int(time.time() * 1000)
        if planned.latest_per_key and planned.adjusted.idempotent is not None:
            fn = step.fn.fn if isinstance(step.fn, ArrowVertexFunction) else step.fn
            df = latest_per_key(
                df,
                planned.adjusted.idempotent.key,
                order_by=idempotent_order_by(planned.adjusted, fn),
                vertex=step.name,
            )
        return df

    def plan(self, *, overrides: Any = None, optimizations: Optimizations | None = None) -> Plan:
        """The attribute-aware plan of this pipeline (:mod:`sparkglass.runtime.contract.planner`).

        ``overrides``: spec-shaped per-vertex attributes (mapping or YAML text).
        Raises :class:`PlanError` when declared attributes cannot hold, and
        :class:`PipelineError` for a bad graph.
        """
        fusable = [s.name for s in self._steps.values() if isinstance(s.fn, ArrowVertexFunction)]
        return plan_pipeline(
            self.describe(), overrides=overrides, fusable=fusable, optimizations=optimizations
        )

    def _instrument(self, name: str, df: DataFrame) -> DataFrame:
        """What the runtime adds at a vertex output: the row counter, then the sampling tap.

        The tap exists only with ``spark.sparkglass.sampling.enabled=true``
        (:func:`sparkglass.runtime.sampling.tap.install_tap`).
        """
        if self._observe_rows and df.isStreaming:
            df = df.observe(f"{OBSERVATION_PREFIX}{name}", F.count(F.lit(1)).alias("rows"))
        if name in self._materialized_at:  # rounds read the written rows, each once
            return install_materialized_tap(self, name, df, self._materialized_at[name])
        return install_tap(self, name, df)

    def _checkpoint_for(self, sink: str) -> str:
        if self._checkpoint_root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"sparkglass-{self.name}-")
            self._checkpoint_root = Path(self._tmp.name)
        return str(self._checkpoint_root / sink)

    # ----------------------------------------------------------------- running
    def start(self, *, overrides: Any = None, optimizations: Optimizations | None = None) -> None:
        """Plan, then run phase by phase; each phase starts its streaming queries, runs its
        bounded sinks and materializes its end-of-input outputs before the next phase starts.

        ``overrides``: spec-shaped per-vertex attributes (mapping or YAML text); when None,
        the Spark conf ``spark.sparkglass.pipeline.attributes`` is used if set.
        ``optimizations`` switches uses of the attributes off (for comparisons). Raises
        :class:`PipelineError` for a bad graph and :class:`PlanError` for attributes that
        cannot hold, before anything runs.
        """
        if self._started:
            raise PipelineError(f"pipeline {self.name!r} already started")
        if overrides is None:
            overrides = self.spark.conf.get(OVERRIDES_CONF, None) or None
        plan = self.plan(overrides=overrides, optimizations=optimizations)
        self._expectation_overrides = parse_expectation_overrides(
            self.spark.conf.get(EXPECTATIONS_CONF, None) or None
        )
        vertices = [s.name for s in self._steps.values() if s.kind is VertexKind.VERTEX]
        for name in self._expectation_overrides:
            if name not in vertices:
                raise PlanError(
                    f"expectations for {name!r}, which is not a vertex of pipeline "
                    f"{self.name!r}; vertices: {', '.join(vertices)}",
                    vertex=name,
                )
        self._plan = plan
        # Outputs built before start() were built without the plan: drop those it changes
        # (and everything downstream), keep the rest (their taps are already registered).
        changed = {v.name for v in plan.vertices if v.materialize or v.latest_per_key}
        changed |= {name for group in plan.fusions for name in group.vertices}
        changed |= set(self._expectation_overrides)  # built before the spec's were known
        for v in plan.vertices:
            if changed & set(v.inputs):
                changed.add(v.name)
        for name in changed:
            self._outputs.pop(name, None)
        self._started = True
        self._history = MetricsHistory(*spark_history_settings(self.spark))
        if self._listener is None:
            self._listener = _ProgressListener(self)
            self.spark.streams.addListener(self._listener)
        for phase in plan.phases:
            # Streaming queries first: those in this phase do not wait for its bounded work.
            for sink in [*phase.streaming_sinks, *phase.batch_sinks]:
                self._run_sink(sink)
            for vertex in phase.materializes:
                self.output(vertex)  # writes the output once; later phases read the files

    def _run_sink(self, name: str) -> None:
        """Run bounded sink ``name`` to completion, or start its streaming query."""
        step = self._steps[name]
        assert step.writer is not None
        df = self.output(step.inputs[0])
        writer = step.writer(df)
        if df.isStreaming:
            if not isinstance(writer, DataStreamWriter):
                raise PipelineError(
                    f"sink {name!r} reads a stream; its writer must return a "
                    f"DataStreamWriter, got {type(writer).__name__}",
                    vertex=name,
                )
            writer = writer.option("checkpointLocation", self._checkpoint_option(writer, name))
            self._note_query(name, writer.start())

    def _note_query(self, sink: str, query: StreamingQuery) -> None:
        """Make ``query`` the streaming query of ``sink``, and record the progress it
        reported before (kept aside by :meth:`_on_progress`; of its last
        :data:`UNCLAIMED_PROGRESS` events of the session, which span one Py4J call)."""
        query_id, run_id = str(query.id), str(query.runId)  # fixed for the run; asked once
        with self._recording:
            with self._lock:
                self._queries[sink] = query
                self._query_ids[sink] = query_id
                self._run_ids[sink] = run_id
                early = [p for p in self._unclaimed if str(p.runId) == run_id]
                for progress in early:
                    self._unclaimed.remove(progress)
            for progress in early:
                self._record_progress(progress)

    def _checkpoint_option(self, writer: DataStreamWriter, sink: str) -> str:
        # DataStreamWriter has no getter; read the option Spark would use, if the user set it.
        jwriter = writer._jwrite
        try:
            extra = jwriter.extraOptions()
            existing = extra.get("checkpointLocation")
            if existing.isDefined():
                return str(existing.get())
        except Exception:
            pass
        return self._checkpoint_for(sink)

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        """The running streaming queries, by sink name."""
        return dict(self._queries)

    def queries_running(self) -> bool | None:
        """Whether any streaming query still runs (``None`` when the pipeline has none)."""
        queries = self.queries
        if not queries:
            return None
        try:
            return any(q.isActive for q in queries.values())
        except Exception:  # a stopped session: nothing runs
            return False

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until every query ended, or ``timeout`` seconds; True if all ended.

        Re-raises a query's failure (a ``StreamingQueryException``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for query in self._queries.values():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if remaining is None:
                query.awaitTermination()
            elif not query.awaitTermination(math.ceil(remaining)):
                return False
        return True

    def process_all_available(self) -> None:
        """Block until every query has processed all input available now (tests, demo)."""
        for query in self._queries.values():
            query.processAllAvailable()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every query (idempotent) and remove temporary checkpoints.

        A micro-batch running at the call is let finish, for up to ``timeout_s`` seconds in
        all; then the queries stop. A micro-batch cut short (the timeout passed, or the next
        one had just begun) is not committed and runs again from the checkpoint on restart,
        so its abort is expected and not logged as an ERROR.
        """
        deadline = time.monotonic() + timeout_s
        for query in self._queries.values():
            with contextlib.suppress(Exception):
                _finish_running_micro_batch(query, deadline)
        with _expected_aborts_quiet(self._spark):
            runs = []
            for query in self._queries.values():
                # Stopping one failed query must not keep the others running.
                with contextlib.suppress(Exception):
                    runs.append(str(query.runId))
                    query.stop()
            # Killed tasks log their abort after stop() returned: wait for them first.
            _wait_for_job_groups(self._spark, runs, time.monotonic() + ABORT_WAIT_S)
        if self._listener is not None and self._spark is not None:
            with contextlib.suppress(Exception):  # the session may already be gone
                self._spark.streams.removeListener(self._listener)
            self._listener = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        for tally in self._expectation_tallies.values():
            tally.release()
        # Stops the sampling control endpoint with the last pipeline using it.
        with contextlib.suppress(Exception):  # no session: nothing was attached
            detach(self, self.spark)

    # ---------------------------------------------------------------- progress
    def _on_progress(self, progress: Any) -> None:
        """Record ``progress`` if it is of one of this pipeline's queries; another's is kept
        aside (bounded) in case it is of a query whose id start() has not noted yet."""
        with self._recording:
            with self._lock:
                if str(progress.runId) not in self._run_ids.values():
                    self._unclaimed.append(progress)
                    return
            self._record_progress(progress)

    def _record_progress(self, progress: Any) -> None:
        """Add one micro-batch's progress (the listener's, once per micro-batch: no row is
        looked at here). A progress of a batchId already counted for its query is not counted
        again."""
        metrics = progress.observedMetrics or {}
        batch_rows = {
            key[len(OBSERVATION_PREFIX) :]: int(row["rows"] or 0)
            for key, row in metrics.items()
            if key.startswith(OBSERVATION_PREFIX)
        }
        query_id = str(progress.id)
        batch_id = int(progress.batchId)
        with self._lock:
            counted = self._counted.get(query_id)
        if counted is not None and batch_id <= counted:
            return
        tallied = self._take_tallies(query_id, batch_id)
        with self._lock:
            figures = figures_of(progress, self._last_start.get(query_id))
            self._counted[query_id] = batch_id
            self._figures[query_id] = figures
            self._quiet.discard(query_id)
            self._last_start[query_id] = figures.start_ms
            # Rows per second like Spark's inputRowsPerSecond, over the query's latest input
            # interval (QueryRates: micro-batches without input fall inside it).
            self._rates.setdefault(query_id, QueryRates()).add(figures, batch_rows)
            self._record_expectations(metrics)
            for vertex, (rows, failed) in tallied.items():
                self._add_expectation_batch(vertex, rows, failed)
            self._batches.append(
                _MicroBatch(query_id, figures.start_ms, figures.end_ms, batch_rows)
            )
            p = self._progress
            p.micro_batches += 1
            p.last_micro_batch_end_ms = max(p.last_micro_batch_end_ms or 0, figures.end_ms)
            for vertex, rows in batch_rows.items():
                vp = p.vertices.setdefault(vertex, VertexProgress())
                # Each query reads its sources independently; keep the largest view.
                vp.rows_last_batch = rows
                key = (query_id, vertex)
                self._rows_by_query[key] = self._rows_by_query.get(key, 0) + rows
                vp.rows_total = max(vp.rows_total, self._rows_by_query[key])
            snapshot = self._snapshot_locked()
        self._history.record(self._metrics_of(snapshot), figures.end_ms)

    def _on_quiet(self, query_id: str, run_id: str, idle_at_ms: int | None = None) -> None:
        """A query of this pipeline went idle (no new data) or stopped: it reads nothing now,
        so its rates, and those of the vertices it runs, are 0 until its next micro-batch.

        ``idle_at_ms``: the trigger that found no data. Spark's intervals run from the
        previous *trigger*, idle ones included, so the next micro-batch's rates and latency
        are measured from it, not from the last micro-batch before the idle minutes."""
        with self._lock:
            if run_id not in self._run_ids.values():
                return
            if idle_at_ms is not None:
                if self._last_start.get(query_id, idle_at_ms) < idle_at_ms:
                    self._last_start[query_id] = idle_at_ms
                rates = self._rates.get(query_id)
                if rates is not None:
                    rates.idle_since(idle_at_ms)
            if query_id in self._quiet:
                return
            self._quiet.add(query_id)
            snapshot = self._snapshot_locked()
        self._history.record(self._metrics_of(snapshot))

    def _snapshot_locked(self) -> PipelineProgress:
        """The counts and the latest figures, combined per vertex and for the pipeline
        (held: ``self._lock``; no Py4J call: the query states are :meth:`progress`'s)."""
        p = self._progress
        # A query gone idle or stopped reads nothing: its rates are 0 (left out of the max).
        live = {q: r for q, r in self._rates.items() if q not in self._quiet}
        by_vertex: dict[str, list[str]] = {}
        for query_id, vertex in self._rows_by_query:
            by_vertex.setdefault(vertex, []).append(query_id)
        vertices: dict[str, VertexProgress] = {}
        for name, v in p.vertices.items():
            queries = [q for q in by_vertex.get(name, []) if q in self._figures]
            figures = [self._figures[q] for q in queries]
            rates = [live[q].vertices.get(name, (0.0, 0.0)) for q in queries if q in live]
            merged = merge_figures(
                {
                    "processed_rows_per_second": [r[1] for r in rates] or [0.0],
                    "batch_duration_ms": [f.batch_duration_ms for f in figures],
                    "latency_ms": [f.latency_ms for f in figures],
                    "event_time_watermark": [f.watermark_ms for f in figures],
                    "state_rows": [f.state_rows for f in figures],
                }
            )
            vertices[name] = VertexProgress(
                rows_total=v.rows_total,
                rows_last_batch=v.rows_last_batch,
                rows_per_second=max((r[0] for r in rates), default=0.0),
                **merged,
            )
        figures = list(self._figures.values())
        merged = merge_figures(
            {
                "batch_duration_ms": [f.batch_duration_ms for f in figures],
                "latency_ms": [f.latency_ms for f in figures],
                "event_time_watermark": [f.watermark_ms for f in figures],
                "state_rows": [f.state_rows for f in figures],
            }
        )
        return PipelineProgress(
            micro_batches=p.micro_batches,
            input_rows_per_second=max(
                (f.input_rows_per_second for f in live.values()), default=0.0
            ),
            processed_rows_per_second=max(
                (f.processed_rows_per_second for f in live.values()), default=0.0
            ),
            vertices=vertices,
            last_micro_batch_end_ms=p.last_micro_batch_end_ms,
            started_queries=len(self._queries),
            **merged,
        )

    def _take_tallies(self, query_id: str, batch_id: int) -> dict[str, tuple[int, dict[str, int]]]:
        """Per vertex counted natively: ``(rows, failed per expectation)`` of one micro-batch
        (taken from the JVM, outside the lock: Py4J calls)."""
        out: dict[str, tuple[int, dict[str, int]]] = {}
        for vertex, tally in list(self._expectation_tallies.items()):
            try:
                taken = tally.take(query_id, batch_id)
            except Exception:  # the session is stopping: the counts of this batch are moot
                log.debug("expectation counts of vertex %s not read", vertex, exc_info=True)
                continue
            if taken is not None:
                out[vertex] = taken
        return out

    def _record_expectations(self, metrics: Any) -> None:
        """Add one micro-batch's expectation outcomes counted by ``observe`` (the
        ``sg_expect_<vertex>`` metrics)."""
        for key, row in metrics.items():
            if not key.startswith(EXPECTATION_PREFIX):
                continue
            vertex = key[len(EXPECTATION_PREFIX) :]
            values = row.asDict() if hasattr(row, "asDict") else dict(row)
            rows = int(values.get(ROWS_METRIC) or 0)
            failed = {n: int(f or 0) for n, f in values.items() if n != ROWS_METRIC}
            self._add_expectation_batch(vertex, rows, failed)

    def _add_expectation_batch(self, vertex: str, rows: int, failed: dict[str, int]) -> None:
        """Add one micro-batch's ``rows`` and ``failed`` rows per expectation of ``vertex``."""
        for name, failed_n in failed.items():
            c = self._expectation_counts.setdefault((vertex, name), [0, 0, 0, 0])
            c[0] += rows - failed_n
            c[1] += failed_n
            c[2], c[3] = rows - failed_n, failed_n

    def micro_batches(self, vertex: str, since_ms: int) -> MicroBatches | None:
        """What the streaming queries that run ``vertex`` did since ``since_ms`` (ms since the
        epoch): micro-batches started then and finished, the vertex's rows in them, and when
        the latest one ended. ``None`` when no streaming query of this pipeline runs the
        vertex (a bounded vertex, or before ``start()``).

        From the query listener, whose events arrive seconds late on a loaded driver. While it
        reports none since ``since_ms``, each query's own latest progress (held by the query as
        soon as its micro-batch ends; read at most every ``QUERY_PROGRESS_CACHE_S``) answers
        instead: at most one micro-batch per query, with ``rows`` unknown (``None``)."""
        sinks = self._sinks_downstream_of(vertex)
        with self._lock:
            queries = {n: q for n, q in self._queries.items() if n in sinks}
            ids = {self._query_ids[n] for n in queries if n in self._query_ids}
            if not queries:
                return None
            mine = [b for b in self._batches if b.query_id in ids]
        after = [b for b in mine if b.start_ms >= since_ms]
        counted = [b.vertex_rows[vertex] for b in after if vertex in b.vertex_rows]
        last = max(mine, key=lambda b: b.end_ms, default=None)
        if not after and since_ms < int(time.time() * 1000):
            # Outside the lock: a Py4J call can take long on a loaded driver.
            latest = [b for b in map(self._latest_of, queries.items()) if b is not None]
            last = max([*latest, *([last] if last else [])], key=lambda b: b.end_ms, default=None)
            after = [b for b in latest if b.start_ms >= since_ms]
            counted = []
        return MicroBatches(
            completed=len(after),
            rows=sum(counted) if len(counted) == len(after) else None,
            last_end_ms=last.end_ms if last else None,
            last_duration_ms=max(0, last.end_ms - last.start_ms) if last else None,
        )

    def _latest_of(self, sink_query: tuple[str, StreamingQuery]) -> _MicroBatch | None:
        sink, query = sink_query
        now = time.monotonic()
        with self._lock:
            cached = self._latest_read.get(sink)
        if cached is not None and now - cached[0] < QUERY_PROGRESS_CACHE_S:
            return cached[1]
        latest = _latest_micro_batch(query)
        with self._lock:
            self._latest_read[sink] = (now, latest)
        return latest

    def _sinks_downstream_of(self, vertex: str) -> set[str]:
        reached, todo = {vertex}, [vertex]
        while todo:
            current = todo.pop()
            for step in self._steps.values():
                if current in step.inputs and step.name not in reached:
                    reached.add(step.name)
                    todo.append(step.name)
        return {n for n in reached if self._steps[n].kind is VertexKind.SINK}

    def progress(self) -> PipelineProgress:
        """A consistent snapshot of :class:`PipelineProgress`."""
        expectation_counts = self.expectation_counts()
        with self._lock:
            snapshot = self._snapshot_locked()
            failed = None
            active = 0
            for sink, q in self._queries.items():
                if q.isActive:
                    active += 1
                elif (exc := q.exception()) is not None:
                    # A Python vertex's failing row, when Spark's text carries one, says
                    # more than the stack trace that would otherwise fill the reason.
                    row = failing_row_in(str(exc))
                    reason = row.summary() if row is not None else str(exc)
                    failed = f"{sink}: {reason}"[:MAX_FAILED_LENGTH]
        snapshot.active_queries = active
        snapshot.failed = failed
        snapshot.expectations = expectation_counts
        return snapshot

    def metrics(self, *, history: bool = False) -> PipelineMetrics:
        """:meth:`progress` in the wire form the driver control endpoint serves at
        ``GET /api/v1/progress``
        (:class:`~sparkglass.runtime.contract.pipeline_metrics.PipelineMetrics`), with each
        vertex's expectation counts (last micro-batch and totals) under its
        ``expectations``; ``history``: with the last minutes of metrics
        (``?history=true``)."""
        metrics = self._metrics_of(self.progress())
        return with_history(metrics, self._history if history else None)

    @staticmethod
    def _metrics_of(p: PipelineProgress) -> PipelineMetrics:
        """``p`` in the wire form (see :meth:`metrics`)."""
        by_vertex: dict[str, dict[str, ExpectationMetrics]] = {}
        for c in p.expectations:  # declaration order, every vertex that declares any
            by_vertex.setdefault(c.vertex, {})[c.name] = ExpectationMetrics(
                action=c.action,
                passed_last_micro_batch=c.passed_last_batch,
                failed_last_micro_batch=c.failed_last_batch,
                passed_total=c.passed,
                failed_total=c.failed,
            )
        if p.failed is not None:
            state = QueryState.FAILED
        elif p.active_queries:
            state = QueryState.ACTIVE
        elif p.started_queries:
            state = QueryState.STOPPED
        else:
            state = QueryState.NOT_STARTED
        return PipelineMetrics(
            state=state,
            active_queries=p.active_queries,
            failed=p.failed,
            micro_batches=p.micro_batches,
            input_rows_per_second=p.input_rows_per_second,
            processed_rows_per_second=p.processed_rows_per_second,
            batch_duration_ms=p.batch_duration_ms,
            latency_ms=p.latency_ms,
            event_time_watermark=p.event_time_watermark,
            state_rows=p.state_rows,
            last_micro_batch_timestamp=p.last_micro_batch_end_ms,
            observed_at=int(time.time() * 1000),
            vertices={
                name: VertexMetrics(
                    rows_last_micro_batch=v.rows_last_batch,
                    rows_per_second=v.rows_per_second,
                    rows_total=v.rows_total,
                    processed_rows_per_second=v.processed_rows_per_second,
                    batch_duration_ms=v.batch_duration_ms,
                    latency_ms=v.latency_ms,
                    event_time_watermark=v.event_time_watermark,
                    state_rows=v.state_rows,
                    expectations=by_vertex.get(name, {}),
                )
                # Vertices with expectations are listed before their first micro-batch too,
                # so the page can offer their names.
                for name, v in {
                    **{name: VertexProgress() for name in by_vertex},
                    **p.vertices,
                }.items()
            },
        )

    # ------------------------------------------------------------------- async
    def async_vertex(
        self,
        name: str,
        input: str,
        fn: Callable[..., Any],
        *,
        capacity: int = 100,
        timeout: float = 30.0,
        ordered: bool = True,
        retry: Any = None,
        output_schema: Any = None,
        on_timeout: Callable[..., Any] | None = None,
        on_failure: OnFailure | str = OnFailure.FAIL,
    ) -> str:
        """Add a vertex calling ``await fn(record)`` per row of ``input``. Returns ``name``.

        ``capacity``: requests in flight per task; ``timeout``: seconds per request,
        retries included; ``retry``: a :mod:`sparkglass.runtime.async_ops.retry` strategy (default
        none); ``output_schema``: ``StructType``, DDL, or a function of the input's
        schema (default: the input's schema);
        ``on_timeout(record)``: a fallback instead of failing. ``on_failure``: ``"fail"``
        (default: a request that fails for good fails the task, and Spark replays it) or
        ``"emit_error"``: the record is skipped and kept as an error row, with the error,
        for rounds of kind ``errors`` (values of redacted columns masked in the message).
        Bad parameters raise ``AsyncConfigError`` here, before anything runs. See
        :func:`sparkglass.runtime.async_ops.async_vertex.async_map`.
        """
        strategy = NO_RETRY if retry is None else retry
        try:  # validate now: a bad parameter fails at build time, naming the vertex
            make_options(
                capacity=capacity,
                timeout_s=timeout,
                ordered=ordered,
                retry=strategy,
                on_timeout=on_timeout,
                on_failure=on_failure,
            )
        except AsyncConfigError as exc:
            raise AsyncConfigError(f"async vertex {name!r}: {exc}") from None

        def build(df: DataFrame) -> DataFrame:
            return async_map(
                df,
                fn,
                capacity=capacity,
                timeout_s=timeout,
                ordered=ordered,
                retry=strategy,
                on_timeout=on_timeout,
                output_schema=output_schema,
                on_failure=on_failure,
                secret_columns=redacted_column_names(df),
                vertex=name,
            )

        return self.vertex(name, input, build, python=True)


def _as_inputs(name: str, inputs: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(inputs, str):
        return (inputs,)
    result = tuple(inputs)
    if not result or not all(isinstance(i, str) for i in result):
        raise PipelineError(f"vertex {name!r}: inputs must be vertex names", vertex=name)
    return result

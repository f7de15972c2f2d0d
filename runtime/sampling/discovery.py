"""Vertices of pipelines sparkglass did not build: taps the session extension placed.

With ``spark.sql.extensions=io.sparkglass.extensions.SamplingExtensions`` (in the sampling
jar) and ``spark.sparkglass.sampling.enabled=true``, the extension's rule puts a tap at the
output of every named streaming query and of every temporary view it reads, and records each
one in the JVM (``DiscoveredTaps``), together with what the queries did (``QueryTracker``, a
listener on the driver). :class:`DiscoveredPipeline` reads those records over Py4J, registers
each tap with the application's
:class:`~sparkglass.runtime.sampling.rounds.RoundCoordinator` and describes the graph for
``GET /api/v1/pipeline``: so a plain Structured Streaming job, or a Spark Declarative
Pipeline, is sampled through the same control endpoint, REST API, CLI and page as a DSL one
(docs/pipelines.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from sparkglass.runtime.contract.attributes import (
    OVERRIDES_CONF,
    AttributeOverride,
    parse_overrides,
)
from sparkglass.runtime.contract.description import (
    DNS1123_MAX_LENGTH,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
    topological_order,
)
from sparkglass.runtime.contract.errors import PipelineError, PlanError
from sparkglass.runtime.contract.pipeline_metrics import (
    MAX_FAILED_LENGTH,
    PipelineMetrics,
    QueryState,
    VertexMetrics,
)
from sparkglass.runtime.contract.redaction import (
    REDACT_CONF,
    RedactionAction,
    parse_redaction,
    redacted_columns,
    redacted_select,
)
from sparkglass.runtime.contract.round_request import RoundKind
from sparkglass.runtime.query_progress import (
    MetricsHistory,
    finite,
    merge_figures,
    spark_history_settings,
    with_history,
)
from sparkglass.runtime.sampling.programs import TapView, program_compiler, rendered_actions
from sparkglass.runtime.sampling.rounds import (
    MaterializedOutput,
    MicroBatches,
    RoundCoordinator,
    TapInfo,
)

log = logging.getLogger(__name__)

#: The extension class to name in ``spark.sql.extensions``.
EXTENSIONS_CLASS = "io.sparkglass.extensions.SamplingExtensions"
_DISCOVERED_CLASS = "io.sparkglass.extensions.DiscoveredTaps"
_TRACKER_CLASS = "io.sparkglass.extensions.QueryTracker"
#: How often the poller asks the JVM whether a tap was placed (one Py4J call).
POLL_INTERVAL_S = 0.5
#: How long one read of the query tracker is reused (the coordinator asks every 50 ms).
TRACKER_CACHE_S = 0.2


@dataclass(frozen=True)
class DiscoveredTap:
    """One tap the extension placed: ``kind`` ``query`` (a streaming query's output, ``name``
    its ``queryName``) or ``view`` (a temporary view a query reads). ``inputs``: the views and
    catalog relations it reads; ``sink``: where a query writes (a table name, or the sink's);
    ``corrupt_columns``: the tapped row's columns holding a source's raw input."""

    tap_key: str
    kind: str
    name: str
    schema_json: str
    inputs: tuple[str, ...] = ()
    sink: str | None = None
    placed_at_ms: int = 0
    corrupt_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Discovery:
    """The JVM's records: taps, and what the tap path swallowed (it never fails a query)."""

    version: int
    taps: tuple[DiscoveredTap, ...]
    rule_errors: int = 0
    last_rule_error: str | None = None
    tap_errors: int = 0
    last_tap_error: str | None = None
    #: Batch writes into catalog tables: table (normalized) → the relations it read.
    writes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def read_discovery(spark: SparkSession) -> Discovery:
    """The extension's records in this driver JVM."""
    raw = json.loads(str(_jvm_class(spark, _DISCOVERED_CLASS).json()))
    taps = tuple(
        DiscoveredTap(
            tap_key=str(t["tapKey"]),
            kind=str(t["kind"]),
            name=str(t["name"]),
            schema_json=str(t["schema"]),
            inputs=tuple(str(i) for i in t.get("inputs") or ()),
            sink=None if t.get("sink") is None else str(t["sink"]),
            placed_at_ms=int(t.get("placedAtMs") or 0),
            corrupt_columns=tuple(str(c) for c in t.get("corruptColumns") or ()),
        )
        for t in raw["taps"]
    )
    return Discovery(
        version=int(raw["version"]),
        taps=taps,
        rule_errors=int(raw["ruleErrors"]),
        last_rule_error=raw.get("lastRuleError"),
        tap_errors=int(raw["tapErrors"]),
        last_tap_error=raw.get("lastTapError"),
        writes={
            norm(str(w["table"])): tuple(str(i) for i in w.get("inputs") or ())
            for w in raw.get("writes") or ()
        },
    )


def _jvm_class(spark: SparkSession, name: str) -> Any:
    jvm = spark._jvm
    assert jvm is not None, "a classic session (Py4J) is needed"
    return getattr(jvm, name)


def extension_loaded(spark: SparkSession) -> bool:
    """True when ``spark.sql.extensions`` names the sampling extension."""
    names = str(spark.conf.get("spark.sql.extensions", "") or "")
    return EXTENSIONS_CLASS in [n.strip() for n in names.split(",")]


def norm(name: str) -> str:
    """A relation or query name for comparison: no backticks, lower case."""
    return name.replace("`", "").strip().lower()


def short(name: str) -> str:
    """The last dotted part of a (normalized) name."""
    return norm(name).rsplit(".", 1)[-1]


def label_of(raw: str) -> str:
    """``raw`` as a DNS-1123 label, before clash suffixes (a vertex name must be one, a query
    name need not be): the last dotted part of the name
    (``spark_catalog.default.flights_raw`` → ``flights_raw``) is lowercased, and every run of
    other characters becomes ``-`` (``flights-raw``)."""
    label = re.sub(r"[^a-z0-9]+", "-", short(raw)).strip("-")
    return label[:DNS1123_MAX_LENGTH].strip("-") or "vertex"


class VertexNames:
    """Stable raw name → vertex name (a DNS-1123 label, unique).

    A clash with a name given earlier gets ``-2``, ``-3``… A name keeps its vertex for the
    life of the driver.
    """

    def __init__(self) -> None:
        self._by_raw: dict[str, str] = {}
        self._taken: set[str] = set()

    def __call__(self, raw: str) -> str:
        key = norm(raw)
        name = self._by_raw.get(key)
        if name is None:
            base = label_of(raw)
            name, n = base, 1
            while name in self._taken:
                n += 1
                suffix = f"-{n}"
                name = base[: DNS1123_MAX_LENGTH - len(suffix)].rstrip("-") + suffix
            self._by_raw[key] = name
            self._taken.add(name)
        return name


@dataclass(frozen=True)
class GraphNode:
    """A step of a pipeline graph known outside the taps (a Spark Declarative Pipeline's
    dataset or flow). ``raw``: its identifier; ``inputs``: identifiers it reads;
    ``queries``: the streaming query names that produce its rows (a dataset's flows; a
    streaming flow's own identifier); ``materialized``: for a materialized view, the table a
    round reads once it has been written (end-of-input); ``tapped_by``: identifiers whose
    tap serves this node (a dataset written only by flows of another name)."""

    raw: str
    kind: VertexKind = VertexKind.VERTEX
    inputs: tuple[str, ...] = ()
    bounded: bool = False
    queries: tuple[str, ...] = ()
    materialized: str | None = None
    tapped_by: tuple[str, ...] = ()
    attributes: VertexAttributes = field(default_factory=VertexAttributes)


class Graph:
    """What an outside graph tells: its nodes, and when a materialized table was written."""

    def nodes(self) -> Sequence[GraphNode]:
        return ()

    def written_at_ms(self, table: str) -> int | None:
        """When ``table`` was last written (ms since the epoch), ``None`` if not yet."""
        return None


class QueryStatus:
    """The query tracker's records, read at most every :data:`TRACKER_CACHE_S`."""

    def __init__(self, spark: SparkSession) -> None:
        self._tracker = _jvm_class(spark, _TRACKER_CLASS)
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._queries: dict[str, dict[str, Any]] = {}

    def queries(self) -> dict[str, dict[str, Any]]:
        """Query name (normalized) → ``{running, exception, microBatches, batches,
        inputRowsTotal, outputRowsTotal, quiet, last}`` (``QueryTracker.json()`` in the
        sampling jar: totals since the query was first seen, each micro-batch counted once;
        ``last``: the figures of its latest micro-batch)."""
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= TRACKER_CACHE_S:
                try:
                    raw = json.loads(str(self._tracker.json()))
                except Exception as exc:  # the JVM is gone (shutdown): keep the last view
                    log.debug("query tracker unreadable: %s", exc)
                    return self._queries
                self._queries = {norm(k): v for k, v in raw.items()}
                self._read_at = now
            return self._queries

    def running(self, names: Iterable[str]) -> bool | None:
        """True when one of the queries runs, False when all stopped, None if none is known."""
        known = [self.queries()[n] for n in map(norm, names) if n in self.queries()]
        if not known:
            return None
        return any(q["running"] for q in known)

    def micro_batches(self, names: Iterable[str], since_ms: int) -> MicroBatches | None:
        """What the queries ran since ``since_ms``; ``None`` when none of them is known."""
        known = [self.queries()[n] for n in map(norm, names) if n in self.queries()]
        if not known:
            return None
        completed, rows, rows_known = 0, 0, True
        last: tuple[int, int] | None = None  # (end, start) of the latest micro-batch
        for q in known:
            for start, end, out in q["batches"]:
                last = (end, start) if last is None else max(last, (end, start))
                if start >= since_ms:
                    completed += 1
                    if out < 0:
                        rows_known = False
                    else:
                        rows += out
        return MicroBatches(
            completed=completed,
            rows=rows if rows_known else None,
            last_end_ms=last[0] if last else None,
            last_duration_ms=max(0, last[0] - last[1]) if last else None,
        )


def tap_view_of(
    spark: SparkSession, schema_json: str, corrupt_columns: Sequence[str] = ()
) -> TapView:
    """The row a discovered tap captures (every column of the query or view, unredacted) and
    how a round renders it: without dropped columns, masked and hashed ones through their
    redaction expression. The extension's tap hands the capture the row as the query
    produces it, so every round's program names the columns it renders and renders each
    redacted: a dropped column is never rendered (nor requestable), a masked or hashed one is
    rendered as ``***`` or its keyed hash (``sg_redact_hash``, HMAC-SHA-256 under the
    application's key) by the program on the executor, as at the DSL's taps; a filter may not
    name any column a rule names. ``corrupt_columns``: the
    columns holding a source's raw input (the tap's record), masked like any column named as
    ``spark.sql.columnNameOfCorruptRecord``. Raises
    :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` for bad rules or a
    ``hash`` rule without a usable key."""
    schema = StructType.fromJson(json.loads(schema_json))
    names = [f.name for f in schema.fields]
    rules = parse_redaction(spark.conf.get(REDACT_CONF, None))
    default = str(spark.conf.get("spark.sql.columnNameOfCorruptRecord", "_corrupt_record"))
    redacted = redacted_columns(rules, names, [default, *corrupt_columns])
    visible = [n for n in names if redacted.get(n) is not RedactionAction.DROP]
    select = redacted_select(names, rendered_actions(spark, rules, redacted))
    renders = {n: e for n, e in zip(visible, select, strict=True) if n in redacted}
    # The rendered type (a hashed number is a string): from the expressions themselves,
    # analysed over an empty relation on the driver.
    data_type = spark.createDataFrame([], schema).selectExpr(*select).schema.simpleString()
    return TapView(
        select=tuple(select),
        columns=tuple(visible),
        redacted=redacted,
        schema_json=schema_json,
        data_type=data_type,
        renders=renders,
    )


def read_overrides(spark: SparkSession) -> dict[str, AttributeOverride]:
    """Per-vertex attribute overrides from ``spark.sparkglass.pipeline.attributes``
    (:data:`~sparkglass.runtime.contract.attributes.OVERRIDES_CONF`, spec-shaped YAML/JSON,
    see :func:`~sparkglass.runtime.contract.attributes.parse_overrides`): vertex name →
    the attributes it sets. Unreadable overrides are logged and ignored (sampling never fails
    the job; ``sparkglass pipelines run --attributes`` checks them before the run starts).
    An override naming a vertex that never appears is ignored: a discovered graph grows as
    the job runs."""
    text = spark.conf.get(OVERRIDES_CONF, None)
    try:
        return parse_overrides(text)
    except PlanError as exc:
        log.warning("ignoring %s: %s", OVERRIDES_CONF, exc)
        return {}
    except Exception:  # sampling never fails the job, whatever the conf holds
        log.warning("ignoring unreadable %s", OVERRIDES_CONF, exc_info=True)
        return {}


class DiscoveredPipeline:
    """The pipeline the extension's taps make visible, attached like a DSL ``Pipeline``
    (``name``, ``describe()``, ``metrics()``; see
    :class:`~sparkglass.runtime.sampling.registry.AttachedPipeline`).

    Its metrics are the sampling jar's query tracker's (a JVM listener, once per micro-batch):
    each query is the vertex of its tap. The poller also keeps the last minutes of them
    (:class:`~sparkglass.runtime.query_progress.MetricsHistory`, a point whenever a query ran
    a micro-batch, went idle or stopped since the previous poll).

    ``graph`` (optional) adds nodes the taps do not show, with their edges (a Spark
    Declarative Pipeline's datasets and flows). :meth:`start` polls the JVM for new taps on a
    daemon thread; :meth:`refresh` does one poll. Nothing here runs per row: the JVM records
    change once per query start, and the poller reads one counter every
    :data:`POLL_INTERVAL_S`.
    """

    def __init__(
        self,
        spark: SparkSession,
        coordinator: RoundCoordinator,
        name: str = "streaming",
        *,
        graph: Graph | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self._spark = spark
        self._coordinator = coordinator
        self._name = name
        self._graph = graph or Graph()
        self._poll_interval = poll_interval_s
        self._discovered = _jvm_class(spark, _DISCOVERED_CLASS)
        self.status = QueryStatus(spark)
        self.names = VertexNames()
        self._lock = threading.RLock()
        self._version = -1
        self._taps: dict[str, DiscoveredTap] = {}
        self._registered: dict[str, int] = {}
        self._materialized: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.discovery = Discovery(version=-1, taps=())
        self.overrides = read_overrides(spark)
        self._history = MetricsHistory(*spark_history_settings(spark))
        #: What the queries had done at the latest history point (see :meth:`sample`).
        self._sampled: tuple[Any, ...] | None = None

    @property
    def name(self) -> str:
        return self._name

    # ------------------------------------------------------------------ polling
    def start(self) -> None:
        """Poll the JVM for taps on a daemon thread until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._poll, name="sparkglass-discovery", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop polling (idempotent)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_interval):
            try:
                self.refresh()
            except Exception as exc:  # a JVM shutting down; the next poll may work
                log.debug("discovery poll failed: %s", exc)
            try:
                self.sample()
            except Exception as exc:
                log.debug("metrics history not sampled: %s", exc)

    def sample(self) -> None:
        """Add the current metrics to the history when a query ran a micro-batch, went idle
        or stopped since the previous sample (one read of the query tracker)."""
        queries = self.status.queries()
        seen = tuple(
            sorted(
                (name, q.get("microBatches"), bool(q.get("quiet")), bool(q.get("running")))
                for name, q in queries.items()
            )
        )
        if seen == self._sampled:
            return
        self._sampled = seen
        self._history.record(self._metrics())

    def refresh(self) -> None:
        """Register taps placed (and materialized views written) since the last call."""
        with self._lock:
            version = int(self._discovered.version())
            if version != self._version:
                self.discovery = read_discovery(self._spark)
                self._version = self.discovery.version
                for tap in self.discovery.taps:
                    self._taps[norm(tap.name)] = tap
            # Taps first: a dataset whose flow already ended is then read from its table.
            for tap in list(self._taps.values()):
                self._register_tap(tap)
            for node in self._graph.nodes():
                self._register_node(node)

    def _register_tap(self, tap: DiscoveredTap) -> None:
        if self._registered.get(tap.tap_key) == tap.placed_at_ms:
            return
        vertex = self.names(tap.name)
        try:
            view = tap_view_of(self._spark, tap.schema_json, tap.corrupt_columns)
        except Exception as exc:  # bad redaction rules: the vertex is listed, not sampleable
            log.warning("cannot sample %s (%s)", vertex, exc)
            self._coordinator.register_vertices([vertex])
            self._registered[tap.tap_key] = tap.placed_at_ms
            return
        queries = self._queries_of(tap)
        self._coordinator.register_tap(
            TapInfo(
                vertex=vertex,
                tap_key=tap.tap_key,
                data_type=view.data_type,
                is_running=lambda: self.status.running(queries),
                micro_batches=lambda since: self.status.micro_batches(queries, since),
                kind=RoundKind.OUTPUT.value,
                compile=program_compiler(self._spark, vertex, view, RoundKind.OUTPUT),
            )
        )
        for node in self._graph.nodes():  # a dataset served by its flow's tap
            if norm(tap.name) in {norm(t) for t in node.tapped_by}:
                self._coordinator.register_tap(
                    TapInfo(
                        vertex=self.names(node.raw),
                        tap_key=tap.tap_key,
                        data_type=view.data_type,
                        is_running=lambda: self.status.running(queries),
                        micro_batches=lambda since: self.status.micro_batches(queries, since),
                        compile=program_compiler(self._spark, vertex, view, RoundKind.OUTPUT),
                    )
                )
        self._registered[tap.tap_key] = tap.placed_at_ms
        log.info("sampling vertex %s (query tap %s)", vertex, tap.tap_key)

    def _register_node(self, node: GraphNode) -> None:
        vertex = self.names(node.raw)
        self._coordinator.register_vertices([vertex])
        if node.materialized is None:
            return
        written = self._graph.written_at_ms(node.materialized)
        if written is None or self._materialized.get(vertex) == written:
            return
        # Imported here: the DSL tap module pulls in more than discovery needs at import.
        from sparkglass.runtime.sampling.tap import read_rows

        spark, table = self._spark, node.materialized
        df = spark.table(table)

        def read(limit: int, max_chars: int) -> list[tuple[int, str]]:
            # The table as it is now: a DataFrame kept from registration lists the files it
            # had then, and a later write (a refresh) deletes them (FAILED_READ_FILE).
            return read_rows(spark.table(table), limit, max_chars)

        self._coordinator.register_tap(
            TapInfo(
                vertex=vertex,
                tap_key=f"{self._name}/{vertex}/materialized",
                data_type=tap_view_of(spark, df.schema.json()).data_type,
                materialized=MaterializedOutput(read, written),
            )
        )
        self._materialized[vertex] = written

    def _queries_of(self, tap: DiscoveredTap) -> list[str]:
        """The streaming queries whose micro-batches pass ``tap``."""
        if tap.kind == "query":
            return [tap.name]
        view = norm(tap.name)
        return [
            t.name
            for t in self._taps.values()
            if t.kind == "query" and view in {norm(i) for i in t.inputs}
        ]

    # ------------------------------------------------------------- description
    def describe(self) -> PipelineDescription:
        """Every discovered query and view, and the graph's nodes, with the edges known and
        each vertex's attributes: those the graph declares (an SDP flow's decorators) with
        :attr:`overrides` merged in."""
        with contextlib.suppress(Exception):  # answer from what is known if the JVM is busy
            self.refresh()
        with self._lock:
            nodes = {norm(n.raw): n for n in self._graph.nodes()}
            taps = dict(self._taps)
        writers: dict[str, str] = {}  # table (normalized) -> the query writing it
        for tap in taps.values():
            if tap.kind == "query" and tap.sink:
                writers.setdefault(norm(tap.sink), tap.name)
        known = set(nodes) | set(taps)
        by_short: dict[str, str] = {}
        for raw in known:
            by_short.setdefault(short(raw), raw)

        def resolve(raw_input: str) -> str:
            key = norm(raw_input)
            if key in known:
                return key
            if key in writers:
                return norm(writers[key])
            return by_short.get(short(key), key)

        vertices: dict[str, VertexDescription] = {}
        sources: dict[str, VertexDescription] = {}

        def add(raw: str, inputs: Iterable[str], bounded: bool, **extra: Any) -> None:
            resolved = [resolve(i) for i in inputs]
            resolved = list(dict.fromkeys(r for r in resolved if r != norm(raw)))
            for r in resolved:
                if r not in known and r not in sources:
                    sources[r] = VertexDescription(
                        name=self.names(r), kind=VertexKind.SOURCE, bounded=bounded
                    )
            kind = extra.pop("kind", VertexKind.VERTEX)
            if not resolved and kind is VertexKind.VERTEX:
                kind = VertexKind.SOURCE  # reads nothing that has a name: where data enters
            vertices[norm(raw)] = VertexDescription(
                name=self.names(raw),
                kind=kind,
                inputs=[self.names(r) for r in resolved],
                bounded=bounded,
                **extra,
            )

        for key, node in nodes.items():
            node_tap = taps.get(key)
            inputs = list(node.inputs) + (list(node_tap.inputs) if node_tap is not None else [])
            add(node.raw, inputs, node.bounded, kind=node.kind, attributes=node.attributes)
        for key, tap in taps.items():
            if key not in nodes:
                add(tap.name, tap.inputs, False)
        for vertex in vertices.values():
            update = self.overrides.get(vertex.name)
            if update:
                vertex.attributes = vertex.attributes.model_copy(update=update)
        all_vertices = list(sources.values()) + list(vertices.values())
        try:
            ordered = topological_order(all_vertices)
        except PipelineError as exc:  # e.g. a query reading its own sink: list, unordered
            log.debug("discovered graph is not a DAG: %s", exc)
            ordered = all_vertices
        return PipelineDescription(name=self._name, vertices=ordered)

    def metrics(self, *, history: bool = False) -> PipelineMetrics:
        """The tracked queries' progress, each query the vertex of its tap (its rows: the
        query's sink rows, or the rows it read where the sink reports none, as the table
        sinks of Spark Declarative Pipelines' flows); ``history``: with the last minutes of
        metrics."""
        return with_history(self._metrics(), self._history if history else None)

    def _metrics(self) -> PipelineMetrics:
        queries = self.status.queries()
        with self._lock:
            taps = [t for t in self._taps.values() if t.kind == "query"]
        vertices: dict[str, VertexMetrics] = {}
        failed = None
        last_end = None
        micro_batches = 0
        input_rates: list[float] = []
        processed_rates: list[float] = []
        latest: list[dict[str, Any]] = []
        for tap in taps:
            q = queries.get(norm(tap.name))
            if q is None:
                continue
            micro_batches += int(q["microBatches"])
            failed = failed or (
                f"{tap.name}: {q['exception']}"[:MAX_FAILED_LENGTH] if q["exception"] else None
            )
            batches = q["batches"]
            if batches:
                last_end = batches[-1][1] if last_end is None else max(last_end, batches[-1][1])
            last = q.get("last")
            if not isinstance(last, dict):
                continue
            latest.append(last)
            # An idle or stopped query reads nothing now: its rates are 0 until it runs again.
            quiet = bool(q.get("quiet")) or not q.get("running")
            if not quiet:
                input_rates.append(finite(last.get("inputRowsPerSecond")))
                processed_rates.append(finite(last.get("processedRowsPerSecond")))
            # Rates over the query's latest input interval (QueryTracker, as QueryRates).
            vertices[self.names(tap.name)] = VertexMetrics(
                rows_last_micro_batch=max(0, int(last.get("outputRows") or 0)),
                rows_per_second=0.0 if quiet else finite(last.get("outputRowsPerSecond")),
                rows_total=max(0, int(q.get("outputRowsTotal") or 0)),
                processed_rows_per_second=(
                    0.0 if quiet else finite(last.get("outputProcessedRowsPerSecond"))
                ),
                batch_duration_ms=last.get("batchDurationMs"),
                latency_ms=last.get("latencyMs"),
                event_time_watermark=last.get("watermarkMs"),
                state_rows=last.get("stateRows"),
            )
        active = sum(1 for t in taps if queries.get(norm(t.name), {}).get("running"))
        state = (
            QueryState.FAILED
            if failed
            else QueryState.ACTIVE
            if active
            else QueryState.STOPPED
            if micro_batches
            else QueryState.NOT_STARTED
        )
        merged = merge_figures(
            {
                "batch_duration_ms": [x.get("batchDurationMs") for x in latest],
                "latency_ms": [x.get("latencyMs") for x in latest],
                "event_time_watermark": [x.get("watermarkMs") for x in latest],
                "state_rows": [x.get("stateRows") for x in latest],
            }
        )
        return PipelineMetrics(
            state=state,
            active_queries=active,
            failed=failed,
            micro_batches=micro_batches,
            input_rows_per_second=max(input_rates, default=0.0),
            processed_rows_per_second=max(processed_rates, default=0.0),
            last_micro_batch_timestamp=last_end,
            observed_at=int(time.time() * 1000),
            vertices=vertices,
            **merged,
        )

    def queries_running(self) -> bool | None:
        """Whether any tracked query runs (``None``: none seen yet)."""
        with self._lock:
            names = [t.name for t in self._taps.values() if t.kind == "query"]
        return self.status.running(names)

    def micro_batches(self, vertex: str, since_ms: int) -> MicroBatches | None:
        """What the queries feeding ``vertex`` ran since ``since_ms``."""
        with self._lock:
            for tap in self._taps.values():
                if self.names(tap.name) == vertex:
                    return self.status.micro_batches(self._queries_of(tap), since_ms)
        return None

"""Prometheus metrics served at ``/metrics``.

Each service instance owns its own :class:`~prometheus_client.CollectorRegistry` so tests can
create many apps in one process. :class:`ServiceMetrics` holds the round, result-stream and
HTTP instruments; :class:`ExpectationSeries` exports each application's latest expectation
counts and :class:`ProgressSeries` its latest live metrics, per pipeline and per vertex. No
request can add series: HTTP label values come from fixed sets, and the expectation and
progress series are bounded in number. The list: service/README.md, "Metrics".
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkglass.runtime.contract.description import DNS1123_LABEL
from sparkglass.runtime.contract.pipeline_metrics import (
    ExpectationMetrics,
    PipelineMetrics,
    VertexMetrics,
)

#: HTTP methods counted under their own name; any other (clients may send any token) is OTHER.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Status codes the service answers with, counted by value; any other by its class.
KNOWN_CODES = frozenset(
    {200, 201, 204, 304, 307, 400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 502, 503, 504}
)


def method_label(method: str) -> str:
    """``method`` if it is one of :data:`KNOWN_METHODS`, else ``OTHER``."""
    return method if method in KNOWN_METHODS else "OTHER"


def code_label(code: int) -> str:
    """``"404"`` for a code in :data:`KNOWN_CODES`, else its class (``"4xx"``)."""
    if code in KNOWN_CODES:
        return str(code)
    return f"{min(max(code // 100, 1), 5)}xx"


#: Most (application, vertex, expectation) series ``/metrics`` holds, all applications together
#: (each is 2 series of each of the two expectation metrics).
MAX_EXPECTATION_SERIES = 2000
#: An application whose progress was not read for this long leaves ``/metrics`` (seconds).
EXPECTATION_SERIES_TTL_S = 900.0
_EXPECTATION_LABELS = ("namespace", "application", "vertex", "expectation", "action", "outcome")


@dataclass(frozen=True)
class _Reading:
    """One application's expectation counts as last read: ``series`` maps (vertex,
    expectation) to its counts; ``observed_at`` is the driver's time (s since the epoch),
    ``read_at`` the service's monotonic time of the read."""

    series: dict[tuple[str, str], ExpectationMetrics]
    observed_at: float
    read_at: float

    @property
    def size(self) -> int:
        return len(self.series)


class _Timed(Protocol):
    """What :class:`_LatestPerApplication` keeps: when it was read, and how many series
    (label sets past the application's own) it exports."""

    @property
    def read_at(self) -> float: ...

    @property
    def size(self) -> int: ...


R = TypeVar("R", bound=_Timed)


class _LatestPerApplication(Collector, Generic[R]):
    """The latest reading per application, exported at scrape time (thread-safe), bounded:
    at most ``max_series`` series (the readings' ``size``) and ``max_applications``
    applications in all, the applications read longest ago leaving first (``dropped`` counts
    their series, or 1 for an application without any); an application not read for
    ``ttl_s`` leaves at the next scrape."""

    def __init__(
        self,
        dropped: Counter,
        *,
        max_series: int,
        max_applications: int | None,
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._dropped = dropped
        self._max_series = max_series
        self._max_apps = max_applications
        self._ttl = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._apps: OrderedDict[tuple[str, str], R] = OrderedDict()

    def _keep(self, key: tuple[str, str], reading: R) -> None:
        with self._lock:
            self._apps[key] = reading
            self._apps.move_to_end(key)
            total = sum(r.size for r in self._apps.values())
            while len(self._apps) > 1 and (
                total > self._max_series
                or (self._max_apps is not None and len(self._apps) > self._max_apps)
            ):
                _, oldest = self._apps.popitem(last=False)
                total -= oldest.size
                self._dropped.inc(oldest.size or 1)

    def forget(self, namespace: str, application: str) -> None:
        """Drop an application's series (it was deleted)."""
        with self._lock:
            self._apps.pop((namespace, application), None)

    def _live(self) -> list[tuple[tuple[str, str], R]]:
        """The readings not older than the TTL (the older ones are dropped)."""
        now = self._clock()
        with self._lock:
            for key in [k for k, r in self._apps.items() if now - r.read_at > self._ttl]:
                del self._apps[key]
            return list(self._apps.items())

    def _held(self) -> tuple[int, int]:
        with self._lock:
            return len(self._apps), sum(r.size for r in self._apps.values())

    def describe(self) -> Iterator[Metric]:
        """No families at registration (they are collected at scrape time)."""
        return iter(())


class ExpectationSeries(_LatestPerApplication[_Reading]):
    """The latest expectation counts per application, exported at scrape time (thread-safe).

    ``max_series`` bounds the (application, vertex, expectation) tuples held; ``ttl_s`` drops
    applications not read for that long; ``dropped`` counts the tuples left out.
    """

    def __init__(
        self,
        dropped: Counter,
        *,
        max_series: int = MAX_EXPECTATION_SERIES,
        ttl_s: float = EXPECTATION_SERIES_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            dropped, max_series=max_series, max_applications=None, ttl_s=ttl_s, clock=clock
        )

    def record(
        self,
        namespace: str,
        application: str,
        vertices: Collection[str],
        metrics: PipelineMetrics,
    ) -> None:
        """Keep ``metrics``' expectation counts as ``namespace/application``'s latest.

        Only vertices in ``vertices`` (the application's vertices as the store knows them)
        with DNS-1123 names are kept: a driver cannot add label values of its own choosing.
        """
        series = {
            (vertex, name): counts
            for vertex, v in metrics.vertices.items()
            if vertex in vertices and len(vertex) <= 63 and DNS1123_LABEL.match(vertex)
            for name, counts in v.expectations.items()
        }
        if not series:
            self.forget(namespace, application)
            return
        if len(series) > self._max_series:
            kept = sorted(series)[: self._max_series]
            self._dropped.inc(len(series) - len(kept))
            series = {k: series[k] for k in kept}
        reading = _Reading(series, metrics.observed_at / 1000, self._clock())
        self._keep((namespace, application), reading)

    def series_count(self) -> int:
        """(application, vertex, expectation) tuples held now."""
        return self._held()[1]

    def collect(self) -> Iterator[Metric]:
        """The families at scrape time (called by the registry)."""
        apps = self._live()
        total = CounterMetricFamily(
            "sparkglass_expectation_rows",
            "Rows that passed or failed an expectation since the pipeline started.",
            labels=_EXPECTATION_LABELS,
        )
        last = GaugeMetricFamily(
            "sparkglass_expectation_rows_last_micro_batch",
            "Rows that passed or failed an expectation in the latest micro-batch.",
            labels=_EXPECTATION_LABELS,
        )
        observed = GaugeMetricFamily(
            "sparkglass_expectation_observed_timestamp_seconds",
            "When the expectation counts of an application were taken (s since the epoch).",
            labels=("namespace", "application"),
        )
        for (namespace, application), reading in apps:
            observed.add_metric([namespace, application], reading.observed_at)
            for (vertex, name), c in reading.series.items():
                labels = [namespace, application, vertex, name, c.action.value]
                total.add_metric([*labels, "passed"], c.passed_total)
                total.add_metric([*labels, "failed"], c.failed_total)
                last.add_metric([*labels, "passed"], c.passed_last_micro_batch)
                last.add_metric([*labels, "failed"], c.failed_last_micro_batch)
        yield total
        yield last
        yield observed


#: Most applications ``/metrics`` holds live metrics of (the pipeline-wide series).
MAX_PROGRESS_APPLICATIONS = 200
#: Most vertices of one application with per-vertex series (in the driver's order).
MAX_PROGRESS_VERTICES_PER_APPLICATION = 64
#: Most (application, vertex) series ``/metrics`` holds, all applications together.
MAX_PROGRESS_VERTEX_SERIES = 2000
#: An application whose progress was not read for this long leaves ``/metrics`` (seconds).
PROGRESS_SERIES_TTL_S = 900.0

_APP_LABELS = ("namespace", "application")
_VERTEX_LABELS = ("namespace", "application", "vertex")


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


#: The per-vertex families: (name, help, kind, value of a vertex's metrics or None).
_VERTEX_FAMILIES: tuple[tuple[str, str, str, Callable[[VertexMetrics], float | None]], ...] = (
    (
        "sparkglass_vertex_rows",
        "Rows at the vertex's output since the pipeline started (restarts with the driver).",
        "counter",
        lambda v: v.rows_total,
    ),
    (
        "sparkglass_vertex_rows_last_micro_batch",
        "Rows at the vertex's output in the latest micro-batch that ran it.",
        "gauge",
        lambda v: v.rows_last_micro_batch,
    ),
    (
        "sparkglass_vertex_rows_per_second",
        "Rows at the vertex's output per second since the previous trigger (input rate).",
        "gauge",
        lambda v: v.rows_per_second,
    ),
    (
        "sparkglass_vertex_processed_rows_per_second",
        "Rows at the vertex's output per second of the micro-batch's duration.",
        "gauge",
        lambda v: v.processed_rows_per_second,
    ),
    (
        "sparkglass_vertex_batch_duration_seconds",
        "Duration of the latest micro-batch of the queries that run the vertex, seconds.",
        "gauge",
        lambda v: _seconds(v.batch_duration_ms),
    ),
    (
        "sparkglass_vertex_latency_seconds",
        "From the previous trigger to the end of the latest micro-batch, seconds.",
        "gauge",
        lambda v: _seconds(v.latency_ms),
    ),
    (
        "sparkglass_vertex_event_time_watermark_timestamp_seconds",
        "Event-time watermark of the queries that run the vertex (s since the epoch).",
        "gauge",
        lambda v: _seconds(v.event_time_watermark),
    ),
    (
        "sparkglass_vertex_state_rows",
        "Rows in state of the queries that run the vertex.",
        "gauge",
        lambda v: v.state_rows,
    ),
)

#: The pipeline-wide families: (name, help, kind, value of the metrics or None).
_PIPELINE_FAMILIES: tuple[tuple[str, str, str, Callable[[PipelineMetrics], float | None]], ...] = (
    (
        "sparkglass_pipeline_micro_batches",
        "Micro-batches completed since the pipeline started (restarts with the driver).",
        "counter",
        lambda m: m.micro_batches,
    ),
    (
        "sparkglass_pipeline_active_queries",
        "Streaming queries of the pipeline running now.",
        "gauge",
        lambda m: m.active_queries,
    ),
    (
        "sparkglass_pipeline_input_rows_per_second",
        "The largest input rate of the pipeline's queries (latest micro-batch).",
        "gauge",
        lambda m: m.input_rows_per_second,
    ),
    (
        "sparkglass_pipeline_processed_rows_per_second",
        "The largest processing rate of the pipeline's queries (latest micro-batch).",
        "gauge",
        lambda m: m.processed_rows_per_second,
    ),
    (
        "sparkglass_pipeline_batch_duration_seconds",
        "The longest duration of the queries' latest micro-batches, seconds.",
        "gauge",
        lambda m: _seconds(m.batch_duration_ms),
    ),
    (
        "sparkglass_pipeline_latency_seconds",
        "The longest latency of the queries' latest micro-batches, seconds.",
        "gauge",
        lambda m: _seconds(m.latency_ms),
    ),
    (
        "sparkglass_pipeline_event_time_watermark_timestamp_seconds",
        "The earliest event-time watermark of the queries (s since the epoch).",
        "gauge",
        lambda m: _seconds(m.event_time_watermark),
    ),
    (
        "sparkglass_pipeline_state_rows",
        "Rows in state of all the pipeline's queries.",
        "gauge",
        lambda m: m.state_rows,
    ),
    (
        "sparkglass_pipeline_observed_timestamp_seconds",
        "When the live metrics of the application were taken (s since the epoch).",
        "gauge",
        lambda m: m.observed_at / 1000,
    ),
)


@dataclass(frozen=True)
class _ProgressReading:
    """One application's live metrics as last read (``vertices``: those labelled)."""

    metrics: PipelineMetrics
    vertices: dict[str, VertexMetrics]
    read_at: float

    @property
    def size(self) -> int:
        return len(self.vertices)


class ProgressSeries(_LatestPerApplication[_ProgressReading]):
    """The latest live metrics per application, pipeline-wide and per vertex, exported at
    scrape time (thread-safe).

    Label values are bounded: a vertex is labelled only when the store knows it for the
    application and its name is a DNS-1123 label (a driver cannot add values of its own
    choosing), at most ``max_vertices_per_app`` vertices per application (in the driver's
    order), ``max_vertex_series`` (application, vertex) pairs and ``max_applications``
    applications in all; past them the applications read longest ago leave first, and
    ``dropped`` counts the vertex series (and applications) left out. ``ttl_s`` drops an
    application not read for that long.
    """

    def __init__(
        self,
        dropped: Counter,
        *,
        max_applications: int = MAX_PROGRESS_APPLICATIONS,
        max_vertices_per_app: int = MAX_PROGRESS_VERTICES_PER_APPLICATION,
        max_vertex_series: int = MAX_PROGRESS_VERTEX_SERIES,
        ttl_s: float = PROGRESS_SERIES_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            dropped,
            max_series=max_vertex_series,
            max_applications=max_applications,
            ttl_s=ttl_s,
            clock=clock,
        )
        self._max_per_app = max_vertices_per_app

    def record(
        self,
        namespace: str,
        application: str,
        vertices: Collection[str],
        metrics: PipelineMetrics,
    ) -> None:
        """Keep ``metrics`` as ``namespace/application``'s latest (only vertices in
        ``vertices``, the application's vertices as the store knows them, are labelled)."""
        known = {
            name: v
            for name, v in metrics.vertices.items()
            if name in vertices and len(name) <= 63 and DNS1123_LABEL.match(name)
        }
        names = list(known)[: min(self._max_per_app, self._max_series)]
        if len(names) < len(known):
            self._dropped.inc(len(known) - len(names))
        reading = _ProgressReading(
            # Only the numbers it exports: not the failure text, vertices or history.
            metrics.model_copy(update={"vertices": {}, "history": None, "failed": None}),
            {n: known[n] for n in names},
            self._clock(),
        )
        self._keep((namespace, application), reading)

    def series_count(self) -> tuple[int, int]:
        """(applications, (application, vertex) pairs) held now."""
        return self._held()

    def collect(self) -> Iterator[Metric]:
        """The families at scrape time (called by the registry)."""
        apps = self._live()

        def family(
            name: str, doc: str, kind: str, labels: tuple[str, ...]
        ) -> CounterMetricFamily | GaugeMetricFamily:
            if kind == "counter":
                return CounterMetricFamily(name, doc, labels=labels)
            return GaugeMetricFamily(name, doc, labels=labels)

        for name, doc, kind, value in _PIPELINE_FAMILIES:
            f = family(name, doc, kind, _APP_LABELS)
            for (namespace, application), reading in apps:
                x = value(reading.metrics)
                if x is not None:
                    f.add_metric([namespace, application], x)
            yield f
        for name, doc, kind, vertex_value in _VERTEX_FAMILIES:
            f = family(name, doc, kind, _VERTEX_LABELS)
            for (namespace, application), reading in apps:
                for vertex, v in reading.vertices.items():
                    x = vertex_value(v)
                    if x is not None:
                        f.add_metric([namespace, application, vertex], x)
            yield f


class ServiceMetrics:
    """The service's instruments in their own registry.

    - ``sparkglass_rounds_total{status}``: rounds that ended, by final status.
    - ``sparkglass_rounds_started_total``: rounds this replica started.
    - ``sparkglass_round_duration_seconds``: round latency, start to end.
    - ``sparkglass_result_streams_in_use`` and ``sparkglass_result_streams_waiting``: result
      bodies being sent from the store now (``stream_concurrency`` bounds them) and requests
      waiting for a slot; a waiting count that stays above 0 says to raise
      ``stream_concurrency`` or ``result_cache_bytes`` (this process's figures: each worker
      has its own).
    - ``sparkglass_http_requests_total{method,route,code}`` and
      ``sparkglass_http_request_duration_seconds{method,route}``: per route template (not
      per URL, which would create a series per application and vertex).
    - the expectation series of :class:`ExpectationSeries`:
      ``sparkglass_expectation_rows_total{namespace,application,vertex,expectation,action,outcome}``:
      rows that ``passed`` or ``failed`` an expectation since the pipeline started (a
      counter: it restarts at 0 with the driver);
      ``sparkglass_expectation_rows_last_micro_batch{...}`` the same in the latest
      micro-batch; ``sparkglass_expectation_observed_timestamp_seconds
      {namespace,application}`` when those numbers were read from the driver (or the
      SparkApplication's ``status.progress``). They are the application's
      :class:`~sparkglass.runtime.contract.pipeline_metrics.PipelineMetrics` as the service
      last read them (``GET .../progress``: the page reads it every 3 s while open); an
      application not read for :data:`EXPECTATION_SERIES_TTL_S` leaves ``/metrics``.
    - the live metrics of :class:`ProgressSeries`, from the same reading:
      ``sparkglass_pipeline_*{namespace,application}`` (micro-batches, active queries, input
      and processed rows/s, batch duration, latency, event-time watermark, rows in state,
      observed timestamp) and ``sparkglass_vertex_*{namespace,application,vertex}`` (rows
      since the start, in the last micro-batch, rows/s, processed rows/s, batch duration,
      latency, watermark, rows in state); at most
      :data:`MAX_PROGRESS_VERTICES_PER_APPLICATION` vertices per application,
      :data:`MAX_PROGRESS_VERTEX_SERIES` (application, vertex) pairs and
      :data:`MAX_PROGRESS_APPLICATIONS` applications, the applications read longest ago
      leaving first (``sparkglass_progress_series_dropped_total``).

    Every HTTP label value comes from a fixed set, so no request can add series: methods
    outside :data:`KNOWN_METHODS` count as ``OTHER``, routes are templates (``unmatched``
    when none matched), and codes outside :data:`KNOWN_CODES` count as their class (``2xx``
    ... ``5xx``). The expectation series carry names from the applications: vertex names
    must be vertices the store knows for the application, expectation names DNS-1123 labels
    (the contract checks them), at most 32 per vertex, and all applications together hold at
    most :data:`MAX_EXPECTATION_SERIES` (application, vertex, expectation) series; past it
    the applications read longest ago leave first, and
    ``sparkglass_expectation_series_dropped_total`` counts the series left out.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.rounds = Counter(
            "sparkglass_rounds",
            "Sampling rounds that ended, by final status.",
            ["status"],
            registry=self.registry,
        )
        self.rounds_started = Counter(
            "sparkglass_rounds_started", "Sampling rounds started.", registry=self.registry
        )
        self.round_duration = Histogram(
            "sparkglass_round_duration_seconds",
            "Sampling round latency from start to end, seconds.",
            buckets=(0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60),
            registry=self.registry,
        )
        self.requests = Counter(
            "sparkglass_http_requests",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "code"],
            registry=self.registry,
        )
        self.request_duration = Histogram(
            "sparkglass_http_request_duration_seconds",
            "HTTP request latency by method and route template, seconds.",
            ["method", "route"],
            registry=self.registry,
        )
        self.expectation_series_dropped = Counter(
            "sparkglass_expectation_series_dropped",
            "Expectation series left out of /metrics by the series cap.",
            registry=self.registry,
        )
        #: Read at scrape time from the stream gate (``set_function`` by its owner).
        self.result_streams_in_use = Gauge(
            "sparkglass_result_streams_in_use",
            "Result bodies being sent from the store now (at most stream_concurrency).",
            registry=self.registry,
        )
        self.result_streams_waiting = Gauge(
            "sparkglass_result_streams_waiting",
            "Requests waiting for a free stream_concurrency slot now (each gets 503 after "
            "stream_wait_seconds).",
            registry=self.registry,
        )
        #: The latest expectation counts per application (see the module docstring).
        self.expectations = ExpectationSeries(self.expectation_series_dropped)
        self.registry.register(self.expectations)
        self.progress_series_dropped = Counter(
            "sparkglass_progress_series_dropped",
            "Vertex series (or applications without one) of live metrics left out of /metrics "
            "by the series caps.",
            registry=self.registry,
        )
        #: The latest live metrics per application and vertex (see :class:`ProgressSeries`).
        self.progress = ProgressSeries(self.progress_series_dropped)
        self.registry.register(self.progress)

    def asgi(self, app: ASGIApp) -> ASGIApp:
        """Wrap ``app`` with a pure ASGI middleware counting and timing every HTTP request
        under its route template (cheaper than ``BaseHTTPMiddleware`` on the hot path)."""

        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()
            code = 500

            async def send_wrapper(message: Message) -> None:
                nonlocal code
                if message["type"] == "http.response.start":
                    code = int(message["status"])
                await send(message)

            try:
                await app(scope, receive, send_wrapper)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                method = method_label(scope.get("method", "GET"))
                self.requests.labels(method, template, code_label(code)).inc()
                self.request_duration.labels(method, template).observe(time.perf_counter() - start)

        return middleware

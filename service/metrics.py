"""Prometheus metrics served at ``/metrics``.

Each service instance owns its own :class:`~prometheus_client.CollectorRegistry` so tests can
create many apps in one process. :class:`ServiceMetrics` holds the round, result-stream and
HTTP instruments; :class:`ExpectationSeries` exports each application's latest expectation
counts. No request can add series: HTTP label values come from fixed sets, and the
expectation series are bounded in number. The list: service/README.md, "Metrics".
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkglass.runtime.contract.description import DNS1123_LABEL
from sparkglass.runtime.contract.pipeline_metrics import ExpectationMetrics, PipelineMetrics

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


class ExpectationSeries(Collector):
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
        self._dropped = dropped
        self._max = max_series
        self._ttl = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._apps: OrderedDict[tuple[str, str], _Reading] = OrderedDict()

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
        key = (namespace, application)
        with self._lock:
            if not series:
                self._apps.pop(key, None)
                return
            if len(series) > self._max:
                kept = sorted(series)[: self._max]
                self._dropped.inc(len(series) - len(kept))
                series = {k: series[k] for k in kept}
            self._apps[key] = _Reading(series, metrics.observed_at / 1000, self._clock())
            self._apps.move_to_end(key)
            total = sum(len(r.series) for r in self._apps.values())
            while total > self._max:
                _, oldest = self._apps.popitem(last=False)
                total -= len(oldest.series)
                self._dropped.inc(len(oldest.series))

    def forget(self, namespace: str, application: str) -> None:
        """Drop an application's series (it was deleted)."""
        with self._lock:
            self._apps.pop((namespace, application), None)

    def series_count(self) -> int:
        """(application, vertex, expectation) tuples held now."""
        with self._lock:
            return sum(len(r.series) for r in self._apps.values())

    def collect(self) -> Iterator[Metric]:
        """The families at scrape time (called by the registry)."""
        now = self._clock()
        with self._lock:
            for key in [k for k, r in self._apps.items() if now - r.read_at > self._ttl]:
                del self._apps[key]
            apps = list(self._apps.items())
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

    def describe(self) -> Iterator[Metric]:
        """No families at registration (they are collected at scrape time)."""
        return iter(())


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

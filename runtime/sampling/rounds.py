"""The driver-side round coordinator: admission, fan-out, completion, result, cache.

One :class:`RoundCoordinator` serves a Spark application. A *round* samples one vertex's
output on every live executor for ``sampling-window``; the coordinator admits it, fans it
out through a :class:`RoundTransport` (the JVM plugin in production), completes it, cuts the
result (:func:`assemble_result`) and caches the last result per vertex for the lazy-trigger
+ polling protocol (docs/architecture.md, "One sampling round").
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkglass.runtime.contract.errors import InvalidParameterError, SparkglassError
from sparkglass.runtime.contract.round_request import PLAIN, RoundKind, RoundRequest
from sparkglass.runtime.contract.sample_result import (
    MAX_CONCURRENT_ROUNDS,
    MAX_LISTED_SUBTASKS,
    MAX_RECORDS_PER_RESPONSE,
    MAX_RECORDS_PER_SUBTASK,
    DataSampleResult,
    ErrorCode,
    NoDataReason,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
    fair_truncate,
    post_filter,
    validate_post_filter,
)
from sparkglass.runtime.contract.sampling_settings import (
    SamplingSettings,
    SamplingSettingsError,
    format_duration_ms,
)

from .compile_gate import CompileGate

log = logging.getLogger(__name__)

#: Finished round results kept for ``GET /api/v1/rounds/{roundId}``.
KEPT_RESULTS = 200
#: Idempotency keys remembered (key -> round id), oldest forgotten first. More than the kept
#: results: a key outliving its result still answers the same round id (then unknown: 404),
#: never a second round.
KEPT_IDEMPOTENCY_KEYS = 1000
#: Longest idempotency key, characters (a Kubernetes uid is 36).
MAX_IDEMPOTENCY_KEY_LENGTH = 128


class RoundTransport(Protocol):
    """How the coordinator reaches executors (JVM plugin in production, fakes in tests).

    Status dicts: ``participants``, ``reported``, ``alive`` (executor id lists) and
    ``progress`` (executor id → partition indexes seen). Reports: executor id → list of
    ``{subtaskIndex, records[{sampleTimestamp, data, truncated}], droppedByRateLimit,
    droppedByContention}``.
    """

    def start_round(
        self,
        round_id: str,
        tap_key: str,
        settings: SamplingSettings,
        window_ms: int,
        program: str | None = None,
    ) -> None: ...

    def round_status(self, round_id: str) -> dict[str, Any]: ...

    def round_reports(self, round_id: str) -> dict[str, list[dict[str, Any]]]: ...

    def cancel_round(self, round_id: str) -> None: ...

    def forget_round(self, round_id: str) -> None: ...


def _window_ms(settings: SamplingSettings, sampling_window_ms: int | None) -> int:
    """The round's window in ms: the application's ``sampling-window`` unless the request
    gives one within 1 s and it (:class:`SamplingSettingsError` naming ``samplingWindow``)."""
    window = settings.sampling_window_ms if sampling_window_ms is None else sampling_window_ms
    if not 1_000 <= window <= settings.sampling_window_ms:
        raise SamplingSettingsError(
            f"samplingWindow={format_duration_ms(window)} is out of range: allowed 1s–"
            f"{format_duration_ms(settings.sampling_window_ms)} "
            "(spark.sparkglass.sampling.sampling-window)",
            field="samplingWindow",
        )
    return window


def check_idempotency_key(key: str) -> None:
    """Raise :class:`SamplingSettingsError` (field ``idempotencyKey``) unless ``key`` is 1–128
    printable ASCII characters."""
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_LENGTH or not all("!" <= ch <= "~" for ch in key):
        raise SamplingSettingsError(
            f"idempotencyKey is out of range: allowed 1–{MAX_IDEMPOTENCY_KEY_LENGTH} printable "
            f"ASCII characters without spaces, got {len(key)} characters",
            field="idempotencyKey",
        )


class UnknownVertexError(SparkglassError):
    """No vertex of that name (``known`` lists the names there are)."""

    def __init__(self, vertex: str, known: Iterable[str]) -> None:
        self.vertex = vertex
        self.known = sorted(known)
        super().__init__(f"no vertex {vertex!r}; vertices: {', '.join(self.known) or '(none)'}")


class UnknownRoundError(SparkglassError):
    """No round of that id (never started, or its result has been evicted)."""

    def __init__(self, round_id: str) -> None:
        self.round_id = round_id
        super().__init__(f"no round {round_id!r}")


@dataclass(frozen=True)
class MicroBatches:
    """What the streaming queries that run a vertex did (the driver's query listener, or the
    queries' own latest progress while the listener lags; see ``Pipeline.micro_batches``).

    ``completed``: micro-batches that started at or after the time asked about and finished;
    ``rows``: rows the vertex emitted in those (Spark's observed metrics; ``None`` unknown);
    ``last_end_ms``: when the latest micro-batch of those queries ended, at any time (ms
    since the epoch; ``None`` when none ran yet); ``last_duration_ms``: how long that one took
    (ms, trigger start to end; ``None`` when none ran yet).
    """

    completed: int
    rows: int | None = None
    last_end_ms: int | None = None
    last_duration_ms: int | None = None


def _no_micro_batches(since_ms: int) -> MicroBatches | None:
    return None


@dataclass(frozen=True)
class MaterializedOutput:
    """An end-of-input vertex's output, written once (``optimizations.materialize``).

    Its rows exist once, in files: a round reads them there instead of tapping every
    downstream read of them (which returned each row once per micro-batch reading it).
    ``read(limit, max_chars)`` returns up to ``limit`` ``(partition index, row as JSON cut to
    max_chars + 1 characters)`` pairs;
    ``written_at_ms`` is when the output was written (ms since the epoch).
    """

    read: Callable[[int, int], list[tuple[int, str]]]
    written_at_ms: int


@dataclass(frozen=True)
class TapInfo:
    """A tap installed at a vertex output.

    ``is_running`` answers whether the streaming queries that feed the tap still run
    (``None``: unknown, e.g. a bounded pipeline; never counts as terminated).
    ``micro_batches(since_ms)`` tells what those queries ran since ``since_ms`` (ms since the
    epoch); ``None`` when no streaming query runs the vertex (rounds are then plain windows).
    """

    vertex: str
    tap_key: str
    data_type: str
    is_running: Callable[[], bool | None] = field(default=lambda: None, compare=False)
    micro_batches: Callable[[int], MicroBatches | None] = field(
        default=_no_micro_batches, compare=False
    )
    #: Set for an end-of-input vertex whose output was materialized (rounds read it there).
    materialized: MaterializedOutput | None = field(default=None, compare=False)
    #: Which rounds the tap serves: ``output`` (the vertex output; also ``errors`` rounds of
    #: corrupt records), ``violations`` (a tap before the vertex's expectations drop rows) or
    #: ``errors`` (a tap before the vertex's error rows are split off).
    kind: str = "output"
    #: Compiles a round request into the program the executors run (JVM taps); ``None``: the
    #: tap takes plain rounds only.
    compile: Callable[[RoundRequest], Any] | None = field(default=None, compare=False)


#: A micro-batch counts for a round only when it started this long after the round: the
#: executors pick a round up within one poll (``spark.sparkglass.sampling.poll-interval-ms``,
#: 100 ms by default), so all its tasks ran through an open tap.
ACTIVATION_MS = 250
#: Rows of a micro-batch still in flight keep a round open at most this many windows after
#: they came (when the listener does not report its end sooner): a backlog's first
#: micro-batch can take minutes, and the round's thread and slot are held meanwhile.
MICRO_BATCH_WAIT_WINDOWS = 4
#: Executors stop capturing this long before the round's timeout, so that their reports
#: arrive before it (a round that waits for a micro-batch captures until then at most).
REPORT_MARGIN_MS = 2_000


@dataclass
class _Round:
    round_id: str
    tap: TapInfo
    started: float
    window_ms: int
    timeout_ms: int
    #: How long the executors capture unless told to stop (>= window_ms; longer when the
    #: round waits for micro-batches).
    capture_ms: int
    #: Wall-clock start, ms since the epoch (micro-batch times are wall-clock).
    started_ms: int
    min_micro_batches: int
    terminated: bool = False
    #: The window and the micro-batch minimum are met: executors were told to stop.
    closing: bool = False
    request: RoundRequest = PLAIN
    #: The type of the records (the requested columns); ``None``: the tap's.
    data_type: str | None = None
    #: When the executors' polls first said rows passed the tap (ms after ``started``);
    #: ``None`` until they do.
    rows_seen_ms: float | None = None
    #: The driver plugin has the round. Until then the monitor leaves it alone: a monitor
    #: thread still alive from an earlier round would otherwise ask the plugin about a round
    #: it was not yet told of, and fail it as unknown (seen on a loaded machine).
    launched: bool = False


@dataclass
class _Cached:
    result: DataSampleResult
    completed: float


class RoundCoordinator:
    """Runs sampling rounds for one application. For each round it

    - gives it a ``roundId`` unique per application across driver restarts
      (``<SparkContext start ms>-<counter>``),
    - admits at most :data:`MAX_CONCURRENT_ROUNDS` running rounds (else ``FAILED`` with
      ``TOO_MANY_CONCURRENT_ROUNDS``); a second request for a vertex whose round runs joins it,
    - fans it out through a :class:`RoundTransport`,
    - completes it when every participating executor reported, or a silent executor is
      declared lost (``PARTIAL``/``FAILED`` with ``EXECUTOR_UNREACHABLE`` and the partitions
      it had seen in ``failedSubtasks``), or ``timeout`` passed (``TIMEOUT``), or the vertex's
      streaming queries stopped mid-round (``TASK_TERMINATED``),
    - cuts the result to :data:`MAX_RECORDS_PER_RESPONSE` records, proportionally per subtask,
    - caches the last result per vertex for ``refresh-interval`` and answers
      ``GET .../data-sample`` with the lazy-trigger + polling protocol (docs/architecture.md),
      applying ``subtaskIndex`` / ``maxRecords`` as post-filters on the cached result.

    ``settings`` is called for the current settings at every request (the Spark conf may
    change at runtime). ``round_prefix`` makes round ids unique across driver restarts.
    A daemon thread checks running rounds every ``check_interval_s`` seconds.
    """

    def __init__(
        self,
        transport: RoundTransport,
        settings: Callable[[], SamplingSettings],
        *,
        round_prefix: str,
        check_interval_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._settings = settings
        self._prefix = round_prefix
        self._check_interval = check_interval_s
        self._clock = clock
        self._counter = itertools.count(1)
        self._lock = threading.RLock()
        self._taps: dict[str, TapInfo] = {}
        #: Taps serving other round kinds, by (vertex, kind) (``violations``, ``errors``).
        self._kind_taps: dict[tuple[str, str], TapInfo] = {}
        self._known: set[str] = set()
        self._running: dict[str, _Round] = {}
        self._by_vertex: dict[str, str] = {}
        self._results: OrderedDict[str, DataSampleResult] = OrderedDict()
        #: idempotency key -> (vertex, round id) of the round it opened or joined.
        self._by_key: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._cache: dict[str, _Cached] = {}
        #: Compiles of round programs, for checks and opens alike (bounded, with a deadline;
        #: refusals remembered per (vertex, request)).
        self._compiles = CompileGate()
        self._monitor: threading.Thread | None = None
        self._closed = False
        #: Returns the PipelineDescription served at ``/api/v1/pipeline`` (set by the tap).
        self.describe: Callable[[], Any] | None = None
        #: Returns the expectation counts served at ``/api/v1/expectations`` (a list of
        #: ``ExpectationCounts``; set when a pipeline attaches).
        self.expectation_counts: Callable[[], list[Any]] | None = None
        #: Returns the PipelineMetrics served at ``/api/v1/progress`` (set with ``describe``).
        self.progress: Callable[[], Any] | None = None

    @property
    def transport(self) -> RoundTransport:
        """How this coordinator reaches the executors."""
        return self._transport

    # ---------------------------------------------------------------- vertices
    def register_tap(self, tap: TapInfo) -> None:
        """Make ``tap.vertex`` sampleable (a newer tap for the same name replaces the old)."""
        with self._lock:
            self._known.add(tap.vertex)
            if tap.kind != RoundKind.OUTPUT.value:
                self._kind_taps[(tap.vertex, tap.kind)] = tap
                return
            self._taps[tap.vertex] = tap
            self._cache.pop(tap.vertex, None)

    def register_vertices(self, names: Iterable[str]) -> None:
        """Names that exist but may have no tap (they answer ``DISABLED``)."""
        with self._lock:
            self._known.update(names)

    def vertices(self) -> list[str]:
        """Known vertex names, sorted."""
        with self._lock:
            return sorted(self._known)

    def settings(self) -> SamplingSettings:
        """The current sampling settings."""
        return self._settings()

    # ------------------------------------------------------------------ rounds
    def _require_vertex(self, vertex: str) -> None:
        if vertex not in self._known:
            raise UnknownVertexError(vertex, self._known)

    def _disabled(self, vertex: str, settings: SamplingSettings) -> DataSampleResult | None:
        if settings.enabled and vertex in self._taps:
            return None
        return DataSampleResult(status=SampleStatus.DISABLED)

    def _tap_for(self, vertex: str, request: RoundRequest) -> TapInfo:
        """The tap serving ``request`` on ``vertex``: its output tap, or the tap of its own a
        ``violations`` round (and an ``errors`` round of a vertex emitting error rows) needs.

        Raises :class:`InvalidParameterError` when the vertex has no such tap or the request
        does not fit it (``field`` names the parameter)."""
        if request.kind is RoundKind.VIOLATIONS:
            tap = self._kind_taps.get((vertex, RoundKind.VIOLATIONS.value))
            if tap is None:
                raise InvalidParameterError(
                    f"kind: vertex {vertex!r} declares no expectation, so it has no "
                    "violations to sample",
                    field="kind",
                )
            names = getattr(tap.compile, "expectation_names", None)
            if request.expectation is not None and names and request.expectation not in names:
                raise InvalidParameterError(
                    f"expectation: vertex {vertex!r} has no expectation "
                    f"{request.expectation!r}; expectations: {', '.join(names)}",
                    field="expectation",
                )
            return tap
        if request.kind is RoundKind.ERRORS:
            # A vertex emitting error rows has a tap of its own before they are split off;
            # others serve errors rounds from their output (corrupt records).
            errors = self._kind_taps.get((vertex, RoundKind.ERRORS.value))
            if errors is not None:
                return errors
        tap = self._taps[vertex]
        if not request.is_plain() and tap.compile is None:
            raise InvalidParameterError(
                f"vertex {vertex!r} takes plain rounds only (no kind, filter or columns): "
                "its output is materialized, or it has no JVM tap",
                field="filter" if request.filter is not None else "columns",
            )
        return tap

    def check_round(
        self,
        vertex: str,
        sampling_window_ms: int | None = None,
        request: RoundRequest | None = None,
    ) -> bool:
        """Whether :meth:`start_round` would take this request, without opening a round
        (an admission webhook asks before a DataSample is stored).

        The same checks, in the same words: the window, the vertex, the kind and expectation,
        and the filter and columns against the vertex's schema (Spark's parser and analyzer,
        a few ms). False when the round would answer ``DISABLED`` (sampling off, or no tap
        at the vertex). Raises :class:`UnknownVertexError`, :class:`SamplingSettingsError`
        (``samplingWindow``) and :class:`InvalidParameterError` (``field``
        ``kind``/``filter``/``columns``/``expectation``); :class:`CompileBusyError` while
        another request compiles (:mod:`.compile_gate`: a bounded number at once, each with a
        deadline). A refusal is remembered and answered again without compiling."""
        request = request or PLAIN
        settings = self._settings()
        _window_ms(settings, sampling_window_ms)
        with self._lock:
            self._require_vertex(vertex)
            if self._disabled(vertex, settings) is not None:
                return False
            tap = self._tap_for(vertex, request)
        if tap.compile is None or tap.materialized is not None:
            return True
        compile = tap.compile
        self._compiles.run((vertex, request), lambda: compile(request), wait=False)
        return True

    def _remember_key(self, key: str | None, vertex: str, round_id: str) -> None:
        """Map ``key`` to ``(vertex, round_id)`` (caller holds the lock); oldest keys go
        first."""
        if key is None:
            return
        self._by_key[key] = (vertex, round_id)
        self._by_key.move_to_end(key)
        while len(self._by_key) > KEPT_IDEMPOTENCY_KEYS:
            self._by_key.popitem(last=False)

    def _round_of_key(self, key: str, vertex: str) -> str | None:
        """The round ``key`` opened or joined on ``vertex``, or None (caller holds the lock).

        Raises :class:`SamplingSettingsError` (field ``idempotencyKey``) when the key named a
        round of another vertex: answering that round would hand its records out as the
        sample of ``vertex``."""
        known = self._by_key.get(key)
        if known is None:
            return None
        if known[0] != vertex:
            raise SamplingSettingsError(
                f"idempotencyKey was used for a round of another vertex ({known[0]!r}); "
                f"use a new key to sample {vertex!r}",
                field="idempotencyKey",
            )
        return known[1]

    def start_round(
        self,
        vertex: str,
        sampling_window_ms: int | None = None,
        request: RoundRequest | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> DataSampleResult:
        """Start (or join) a round on ``vertex``; answers ``PENDING`` with its ``roundId``.

        ``FAILED``/``TOO_MANY_CONCURRENT_ROUNDS`` when 5 rounds run; ``DISABLED`` when
        sampling is off or the vertex has no tap. ``sampling_window_ms`` must lie within
        1s and the configured ``sampling-window`` (:class:`SamplingSettingsError` if not).
        ``request``: kind, filter and columns (:mod:`sparkglass.runtime.contract.round_request`);
        a round joins a running one only when both ask the same. ``idempotency_key`` (1–128
        printable ASCII characters, e.g. a DataSample's uid): a request with a key this driver
        has seen answers ``PENDING`` with the round that key opened, running or finished, and
        opens nothing (the last 1000 keys are kept). Raises :class:`UnknownVertexError`,
        :class:`SamplingSettingsError` for a bad key or one that opened a round of another
        vertex, and :class:`InvalidParameterError` (``field``
        ``kind``/``filter``/``columns``/``expectation``) when the request does not fit the
        vertex (an unknown column, a filter that does not parse, a redacted column).
        """
        request = request or PLAIN
        key = _round_key(vertex, request)
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key)
            with self._lock:
                known = self._round_of_key(idempotency_key, vertex)
            if known is not None:
                return DataSampleResult(status=SampleStatus.PENDING, round_id=known)
        settings = self._settings()
        window = _window_ms(settings, sampling_window_ms)
        with self._lock:
            self._require_vertex(vertex)
            disabled = self._disabled(vertex, settings)
            if disabled is not None:
                return disabled
            running = self._by_vertex.get(key)
            if running is not None:
                self._remember_key(idempotency_key, vertex, running)
                return DataSampleResult(status=SampleStatus.PENDING, round_id=running)
            tap = self._tap_for(vertex, request)
        compiled = None
        if tap.compile is not None and tap.materialized is None:
            # Outside the lock: compiling asks Spark's analyzer (a few ms; cached per request),
            # through the gate the checks use (bounded, with a deadline).
            compile = tap.compile
            compiled = self._compiles.run((vertex, request), lambda: compile(request), wait=True)
        with self._lock:
            if idempotency_key is not None and (
                known := self._round_of_key(idempotency_key, vertex)
            ):
                return DataSampleResult(status=SampleStatus.PENDING, round_id=known)
            running = self._by_vertex.get(key)
            if running is not None:
                self._remember_key(idempotency_key, vertex, running)
                return DataSampleResult(status=SampleStatus.PENDING, round_id=running)
            if len(self._running) >= MAX_CONCURRENT_ROUNDS:
                return DataSampleResult(
                    status=SampleStatus.FAILED,
                    error_code=ErrorCode.TOO_MANY_CONCURRENT_ROUNDS,
                    end_timestamp=_now_ms(),
                )
            round_id = f"{self._prefix}-{next(self._counter)}"
            started_ms = _now_ms()
            waits = settings.min_micro_batches > 0 and tap.micro_batches(started_ms) is not None
            rnd = _Round(
                round_id=round_id,
                tap=tap,
                started=self._clock(),
                window_ms=window,
                timeout_ms=settings.timeout_ms,
                # A streaming vertex runs in bursts: capture until the window is over *and*
                # enough micro-batches ran through the tap (then executors are told to stop).
                capture_ms=(
                    max(window, settings.timeout_ms - REPORT_MARGIN_MS) if waits else window
                ),
                started_ms=started_ms,
                min_micro_batches=settings.min_micro_batches if waits else 0,
                request=request,
                data_type=compiled.data_type if compiled is not None else None,
            )
            self._running[round_id] = rnd
            self._by_vertex[key] = round_id
            self._remember_key(idempotency_key, vertex, round_id)
        if tap.materialized is not None:
            threading.Thread(
                target=self._read_materialized,
                args=(rnd, tap.materialized, settings),
                name=f"sparkglass-round-{round_id}",
                daemon=True,
            ).start()
            return DataSampleResult(status=SampleStatus.PENDING, round_id=round_id)
        # The round's own window (a request may shorten it): the rate limit spreads
        # max-sample-rate × (window + 1 s) records per subtask over the round.
        round_settings = settings.model_copy(update={"sampling_window_ms": window})
        try:
            if compiled is not None:
                self._transport.start_round(
                    round_id,
                    rnd.tap.tap_key,
                    round_settings,
                    rnd.capture_ms,
                    program=compiled.program,
                )
            else:
                self._transport.start_round(
                    round_id, rnd.tap.tap_key, round_settings, rnd.capture_ms
                )
        except Exception as exc:  # the JVM may be gone: report, do not raise
            log.warning("cannot start round %s on %s: %s", round_id, vertex, exc)
            self._finish(rnd, None, {}, ErrorCode.INTERNAL_ERROR, set())
            return self.round_result(round_id)
        rnd.launched = True
        log.info(
            "sampling round %s started on vertex %s (window %d ms, at least %d micro-batches)",
            round_id,
            vertex,
            window,
            rnd.min_micro_batches,
        )
        self._ensure_monitor()
        return DataSampleResult(status=SampleStatus.PENDING, round_id=round_id)

    def round_result(
        self, round_id: str, subtask_index: int | None = None, max_records: int | None = None
    ) -> DataSampleResult:
        """A round's result (``PENDING`` while it runs), post-filtered.

        Raises :class:`UnknownRoundError`.
        """
        validate_post_filter(subtask_index, max_records)
        with self._lock:
            if round_id in self._running:
                return DataSampleResult(status=SampleStatus.PENDING, round_id=round_id)
            result = self._results.get(round_id)
        if result is None:
            raise UnknownRoundError(round_id)
        return post_filter(result, subtask_index, max_records)

    def wait(self, round_id: str, timeout_s: float = 60.0) -> DataSampleResult:
        """Block until round ``round_id`` finished (or ``timeout_s``); its result."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.round_result(round_id)
            if result.status is not SampleStatus.PENDING or time.monotonic() >= deadline:
                return result
            time.sleep(0.05)

    def sample_vertices(
        self, vertices: list[str], timeout_s: float = 60.0
    ) -> dict[str, DataSampleResult]:
        """One round on each of ``vertices`` (at most 5 at a time); their results by vertex.

        Blocks up to ``timeout_s`` per batch of 5 (for displays such as the demo's).
        Raises :class:`UnknownVertexError` for a bad name.
        """
        results: dict[str, DataSampleResult] = {}
        for i in range(0, len(vertices), MAX_CONCURRENT_ROUNDS):
            batch = vertices[i : i + MAX_CONCURRENT_ROUNDS]
            started = {v: self.start_round(v) for v in batch}
            for v, s in started.items():
                if s.status is SampleStatus.PENDING and s.round_id is not None:
                    results[v] = self.wait(s.round_id, timeout_s)
                else:
                    results[v] = s
        return results

    def data_sample(
        self,
        vertex: str,
        subtask_index: int | None = None,
        max_records: int | None = None,
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """``GET .../data-sample``: lazy trigger + polling over the per-vertex cache.

        No result yet: starts a round, ``PENDING``. A round runs: the previous result with
        ``stale=true``, else ``PENDING``. A result younger than ``refresh-interval``: it.
        An older one: starts a new round and answers the old one with ``stale=true``.
        """
        validate_post_filter(subtask_index, max_records)
        settings = self._settings()
        with self._lock:
            self._require_vertex(vertex)
            disabled = self._disabled(vertex, settings)
            if disabled is not None:
                return disabled
            request = request or PLAIN
            key = _round_key(vertex, request)
            cached = self._cache.get(key)
            running = self._by_vertex.get(key)
            fresh = (
                cached is not None
                and (self._clock() - cached.completed) * 1000 < settings.refresh_interval_ms
                and not self._idle_result_outdated(vertex, cached.result)
            )
            if running is None and fresh:
                assert cached is not None
                return post_filter(cached.result, subtask_index, max_records)
            if running is None:
                started = self.start_round(vertex, request=request)
                if cached is None or started.status is SampleStatus.DISABLED:
                    return started
            elif cached is None:
                return DataSampleResult(status=SampleStatus.PENDING, round_id=running)
            assert cached is not None
            stale = post_filter(cached.result, subtask_index, max_records)
            stale.stale = True
            return stale

    # -------------------------------------------------------------- completion
    def _ensure_monitor(self) -> None:
        with self._lock:
            if self._monitor is not None and self._monitor.is_alive():
                return
            self._monitor = threading.Thread(
                target=self._monitor_loop, name="sparkglass-rounds", daemon=True
            )
            self._monitor.start()

    def _monitor_loop(self) -> None:
        while not self._closed:
            with self._lock:
                running = list(self._running.values())
            if not running:
                with self._lock:
                    if not self._running:
                        self._monitor = None
                        return
                continue
            for rnd in running:
                try:
                    self._check(rnd)
                except Exception:  # one broken round must not stop the rest
                    log.exception("sampling round %s failed", rnd.round_id)
                    self._finish(rnd, None, {}, ErrorCode.INTERNAL_ERROR, set())
            time.sleep(self._check_interval)

    def _read_materialized(
        self, rnd: _Round, output: MaterializedOutput, settings: SamplingSettings
    ) -> None:
        """A round on a materialized vertex: its written rows, each at most once, within the
        caps (1000 per subtask, 5000 per response; no rate limit: nothing runs per row). Rows
        left out by a cap set ``totalTruncated``."""
        try:
            # One row past the cap: whether the output holds more than a response returns.
            rows = output.read(MAX_RECORDS_PER_RESPONSE + 1, settings.max_record_length)
        except Exception as exc:  # a sampling failure never fails the pipeline
            log.warning("reading the materialized output of %s failed: %s", rnd.tap.vertex, exc)
            self._finish(rnd, None, {}, ErrorCode.INTERNAL_ERROR, set())
            return
        cut = len(rows) > MAX_RECORDS_PER_RESPONSE
        by_partition: dict[int, list[dict[str, Any]]] = {}
        for partition, data in rows[:MAX_RECORDS_PER_RESPONSE]:
            kept = by_partition.setdefault(partition, [])
            if len(kept) >= MAX_RECORDS_PER_SUBTASK:
                cut = True  # a cap, not a sample: said in totalTruncated
            else:
                kept.append(
                    {
                        "sampleTimestamp": output.written_at_ms,
                        "data": data[: settings.max_record_length],
                        "truncated": len(data) > settings.max_record_length,
                    }
                )
        reports = {"driver": [{"subtaskIndex": p, "records": r} for p, r in by_partition.items()]}
        self._finish(rnd, None, reports, None, set(), truncated=cut)

    def _check(self, rnd: _Round) -> None:
        if rnd.tap.materialized is not None or not rnd.launched:
            return  # read on its own thread, or not yet handed to the driver plugin
        elapsed_ms = (self._clock() - rnd.started) * 1000
        if not rnd.terminated and rnd.tap.is_running() is False:
            rnd.terminated = True
            self._transport.cancel_round(rnd.round_id)
        status = self._transport.round_status(rnd.round_id)
        if not status.get("known", True):
            log.warning("sampling round %s: the driver plugin does not know it", rnd.round_id)
            self._finish(rnd, status, {}, ErrorCode.INTERNAL_ERROR, set())
            return
        if rnd.rows_seen_ms is None and any(status.get("progress", {}).values()):
            rnd.rows_seen_ms = elapsed_ms
        window_met = elapsed_ms >= rnd.window_ms and not (rnd.closing or rnd.terminated)
        if window_met and self._enough_micro_batches(rnd, status, elapsed_ms):
            rnd.closing = True
            if rnd.capture_ms > rnd.window_ms:
                self._transport.cancel_round(rnd.round_id)  # stop capturing, report now
        participants = set(status.get("participants", []))
        missing = participants - set(status.get("reported", []))
        lost = missing - set(status.get("alive", []))
        window_over = rnd.closing or rnd.terminated or elapsed_ms >= rnd.capture_ms
        if window_over and not (missing - lost):
            error = ErrorCode.EXECUTOR_UNREACHABLE if lost else None
            self._finish(rnd, status, self._transport.round_reports(rnd.round_id), error, lost)
        elif elapsed_ms >= rnd.timeout_ms:
            error = ErrorCode.EXECUTOR_UNREACHABLE if lost else ErrorCode.TIMEOUT
            self._finish(rnd, status, self._transport.round_reports(rnd.round_id), error, missing)

    def _idle_result_outdated(self, vertex: str, result: DataSampleResult) -> bool:
        """A ``NO_DATA`` of an idle query stands only until its next micro-batch ran."""
        if result.no_data_reason is not NoDataReason.NO_MICRO_BATCH:
            return False
        tap = self._taps.get(vertex)
        seen = tap.micro_batches(result.end_timestamp or 0) if tap is not None else None
        return seen is not None and seen.completed > 0

    def _enough_micro_batches(self, rnd: _Round, status: dict[str, Any], elapsed_ms: float) -> bool:
        if rnd.min_micro_batches == 0:
            return True
        seen = rnd.tap.micro_batches(rnd.started_ms + ACTIVATION_MS)
        if seen is None or seen.completed >= rnd.min_micro_batches:
            return True
        if rnd.min_micro_batches == 1 and rnd.rows_seen_ms is not None:
            # Rows passed the tap, but no micro-batch that started in the round has ended:
            # one is in flight. Closing at the window would keep only its first moment (the
            # first rows of each partition; on a loaded machine a micro-batch outlasts the
            # window), so the round waits for it to end, as the listener reports; or, should
            # the listener lag, for as long as the latest micro-batch took (a window at least,
            # MICRO_BATCH_WAIT_WINDOWS windows at most) after the rows came.
            longest = MICRO_BATCH_WAIT_WINDOWS * rnd.window_ms
            span = max(rnd.window_ms, min(seen.last_duration_ms or 0, longest))
            return elapsed_ms - rnd.rows_seen_ms >= span
        return False

    def _no_data_reason(self, rnd: _Round, result: DataSampleResult) -> None:
        """Say why a round that ran to its end saw no row (``noDataReason``)."""
        seen = rnd.tap.micro_batches(rnd.started_ms + ACTIVATION_MS)
        if seen is not None:
            result.last_micro_batch_timestamp = seen.last_end_ms
        if rnd.tap.is_running() is False:
            result.no_data_reason = NoDataReason.QUERY_NOT_ACTIVE
        elif seen is not None and seen.completed == 0:
            result.no_data_reason = NoDataReason.NO_MICRO_BATCH
        else:
            result.no_data_reason = NoDataReason.NO_ROWS

    def _finish(
        self,
        rnd: _Round,
        status: dict[str, Any] | None,
        reports: dict[str, list[dict[str, Any]]],
        error: ErrorCode | None,
        failed_executors: set[str],
        *,
        truncated: bool = False,
    ) -> None:
        with self._lock:
            if self._running.get(rnd.round_id) is not rnd:
                return  # finished already: a second finish must not overwrite its result
        result = assemble_result(
            rnd.round_id, rnd.data_type or rnd.tap.data_type, reports, kind=rnd.request.kind
        )
        if truncated:
            result.total_truncated = True
        if rnd.tap.materialized is not None:
            result.materialized_at = rnd.tap.materialized.written_at_ms
        progress: dict[str, list[int]] = (status or {}).get("progress", {})
        failed = sorted({p for e in failed_executors for p in progress.get(e, [])})
        if rnd.terminated:
            error = ErrorCode.TASK_TERMINATED
        result.failed_subtasks = failed[:MAX_LISTED_SUBTASKS]
        if result.status is SampleStatus.NO_DATA and error is None and not result.materialized_at:
            self._no_data_reason(rnd, result)
        if error is not None:
            result.error_code = error
            result.status = (
                SampleStatus.PARTIAL if result.total_record_count else SampleStatus.FAILED
            )
        if failed_executors:
            log.warning(
                "sampling round %s: executors %s did not report (%s)",
                rnd.round_id,
                sorted(failed_executors),
                error,
            )
        with contextlib.suppress(Exception):  # state on a dead JVM needs no cleanup
            self._transport.forget_round(rnd.round_id)
        with self._lock:
            self._running.pop(rnd.round_id, None)
            key = _round_key(rnd.tap.vertex, rnd.request)
            if self._by_vertex.get(key) == rnd.round_id:
                del self._by_vertex[key]
            self._results[rnd.round_id] = result
            while len(self._results) > KEPT_RESULTS:
                self._results.popitem(last=False)
            current = (
                self._taps.get(rnd.tap.vertex)
                if rnd.tap.kind == RoundKind.OUTPUT.value
                else self._kind_taps.get((rnd.tap.vertex, rnd.tap.kind))
            )
            if current is rnd.tap:
                self._cache[key] = _Cached(result, self._clock())
        log.info(
            "sampling round %s on %s: %s, %d records",
            rnd.round_id,
            rnd.tap.vertex,
            result.status,
            result.total_record_count,
        )

    def clear_cache(self, vertex: str | None = None) -> None:
        """Drop the cached result of ``vertex`` (all vertices when ``None``): the next
        ``data_sample`` starts a fresh round (a forced refresh)."""
        with self._lock:
            if vertex is None:
                self._cache.clear()
            else:
                for key in [k for k in self._cache if k.split("\0", 1)[0] == vertex]:
                    del self._cache[key]

    def running_rounds(self) -> list[str]:
        """Ids of the rounds running now."""
        with self._lock:
            return list(self._running)

    def close(self) -> None:
        """Cancel running rounds and stop the monitor thread (idempotent)."""
        self._closed = True
        with self._lock:
            running = list(self._running)
        for round_id in running:
            with contextlib.suppress(Exception):  # the JVM may be gone
                self._transport.cancel_round(round_id)


def _round_key(vertex: str, request: RoundRequest) -> str:
    """Running rounds and cached results are per vertex and request (plain: the vertex)."""
    key = request.key()
    return vertex if not key else f"{vertex}\0{key}"


def assemble_result(
    round_id: str,
    data_type: str,
    reports: dict[str, list[dict[str, Any]]],
    *,
    kind: RoundKind = RoundKind.OUTPUT,
) -> DataSampleResult:
    """Merge executor reports into a ``COMPLETE``/``NO_DATA`` result capped at 5000 records.

    A partition's ``capturedRecords`` (set by the driver plugin, which keeps only what the cap
    can use) counts the records it captured; without it, the records it holds.

    A partition reported by two executors (a retried task) is merged; records are ordered by
    ``sampleTimestamp`` within a subtask, subtasks by index. A record's ``label`` becomes its
    ``expectations`` (``violations`` rounds) or its ``error`` (``errors`` rounds).
    """
    by_partition: dict[int, list[SampledRecord]] = {}
    captured: dict[int, int] = {}
    stopped: set[int] = set()
    dropped_rate = dropped_contention = 0
    for partitions in reports.values():
        for part in partitions or []:
            index = int(part["subtaskIndex"])
            records = by_partition.setdefault(index, [])
            captured[index] = captured.get(index, 0) + int(
                part.get("capturedRecords", len(part.get("records", [])))
            )
            for r in part.get("records", []):
                label = r.get("label")
                records.append(
                    SampledRecord(
                        sample_timestamp=int(r["sampleTimestamp"]),
                        data=str(r["data"]),
                        data_type=data_type,
                        truncated=bool(r.get("truncated", False)),
                        expectations=(
                            str(label).split(",")
                            if label and kind is RoundKind.VIOLATIONS
                            else None
                        ),
                        error=str(label) if label and kind is RoundKind.ERRORS else None,
                    )
                )
            dropped_rate += int(part.get("droppedByRateLimit", 0))
            dropped_contention += int(part.get("droppedByContention", 0))
            if part.get("filterStopped"):
                stopped.add(index)
    samples = [
        SubtaskSamples(subtask_index=i, records=sorted(recs, key=lambda r: r.sample_timestamp))
        for i, recs in sorted(by_partition.items())
        if recs
    ]
    samples, truncated = fair_truncate(
        samples, MAX_RECORDS_PER_RESPONSE, [captured[s.subtask_index] for s in samples]
    )
    total = sum(len(s.records) for s in samples)
    return DataSampleResult(
        status=SampleStatus.COMPLETE if total else SampleStatus.NO_DATA,
        end_timestamp=_now_ms(),
        round_id=round_id,
        total_record_count=total,
        total_truncated=truncated,
        dropped_by_contention=dropped_contention,
        dropped_by_rate_limit=dropped_rate,
        filter_stopped_subtasks=sorted(stopped)[:MAX_LISTED_SUBTASKS],
        samples=samples,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)

"""The one fake Spark driver of the tests: the real control endpoint over a scripted transport.

:class:`ScriptedControl` runs the production :class:`ControlEndpoint` in-process on
127.0.0.1 (a real port, real bearer-token auth, optionally TLS) over the production
:class:`RoundCoordinator`; only the executors are scripted (:class:`VertexScript`, read
afresh at every step of a round, so a test may change a vertex's behaviour mid-test). Every
answer a test sees is therefore one the real driver gives: round ids, ``PENDING``, result
assembly and caps, post-filters, 400/404/429 bodies, the pipeline, settings and progress
routes.

Where the harness bends the real thing, and why: the coordinator's clock runs
:data:`CLOCK_SPEED` times faster (a window passes in a tenth of its time, so tests need not
wait seconds per round); one endpoint accepts each of several applications' tokens (one
process stands in for several drivers) and, for :class:`ScriptedDriver`, picks its
certificate per server name; a ``busy`` vertex is refused as the coordinator refuses a sixth
concurrent round.

What the real endpoint can never answer (a broken or malicious driver: malformed JSON,
huge bodies, 5xx, an old driver without a route, counters past the contract's bounds) goes
through one hook, :attr:`ScriptedControl.override`, which sees each request first and may
answer it with a raw :class:`Reply`.

Two flavours share it: :class:`FakeDriver` (the service tests' pipeline ``flights``, one
scripted behaviour per vertex name) and :class:`ScriptedDriver` (the operator tests:
behaviours per vertex in ``behaviour``, HTTPS only with a certificate per server name,
several applications' tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
from sparkglass.runtime.contract.round_request import RoundKind, RoundRequest
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    ErrorCode,
    SampleStatus,
)
from sparkglass.runtime.contract.sampling_settings import SamplingSettings, settings_from_spec
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling.rounds import (
    MicroBatches,
    RoundCoordinator,
    TapInfo,
    UnknownRoundError,
)

#: The coordinator's clock runs this many times faster than real time, so that a round's
#: window (at least 1 s in the contract) passes in a tenth of it; its timeout is stretched by
#: as much, so that a round times out when the advertised ``timeout`` says. The executors'
#: scripted delays are real seconds.
CLOCK_SPEED = 10

#: The settings of a driver with sampling on and the defaults otherwise, but rounds that need
#: no micro-batch (the scripted queries run none).
DEFAULT_SETTINGS = SamplingSettings(enabled=True, min_micro_batches=0)


@dataclass(frozen=True)
class Call:
    """One request as it reached the endpoint, before the endpoint answered it."""

    method: str
    path: str
    query: dict[str, str]
    authorization: str | None


@dataclass(frozen=True)
class Reply:
    """A raw answer the real endpoint would never give: ``body`` is sent as is when bytes,
    else as JSON."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def encoded(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


@dataclass
class VertexScript:
    """How a vertex's executors behave in a round.

    ``partitions()``: what each subtask captured (``{subtaskIndex, records[{sampleTimestamp,
    data, truncated}], droppedByRateLimit, droppedByContention}``), one executor each, built
    when the round starts; ``lost``: subtasks whose executor dies (never reports);
    ``delay_s``: real seconds before the executors report (``math.inf``: never, so the round
    times out); ``released()``: whether they may report yet; ``times_out``: the round's
    timeout is its window; ``running``: the vertex's streaming queries run (``False``: the
    round ends ``TASK_TERMINATED``); ``micro_batches``: what those queries ran (``None``: no
    streaming query); ``enabled``: sampling on at the vertex (else ``DISABLED``);
    ``busy``: every open is refused as ``TOO_MANY_CONCURRENT_ROUNDS``; ``refuse_filter``:
    the message of the 400 a filter gets (``None``: accepted); ``compile_gate``: compiles of
    round requests (the round check, a filtered open) wait for it.
    """

    partitions: Callable[[], list[dict[str, Any]]] = list
    data_type: str = "struct<value:string>"
    lost: frozenset[int] = frozenset()
    delay_s: float = 0.3
    released: Callable[[], bool] = lambda: True
    times_out: bool = False
    running: bool = True
    micro_batches: MicroBatches | None = None
    enabled: bool = True
    busy: bool = False
    refuse_filter: Callable[[str], str | None] = lambda _: None
    compile_gate: threading.Event | None = None
    #: The driver plugin loses the vertex's rounds (the coordinator fails them with
    #: ``INTERNAL_ERROR``).
    plugin_forgets: bool = False


@dataclass(frozen=True)
class _Compiled:
    data_type: str
    program: str


@dataclass
class _Started:
    vertex: str
    at: float
    partitions: list[dict[str, Any]]
    cancelled: bool = False


class _Transport:
    """The executors, as scripted: one per subtask, reporting once the script lets them."""

    def __init__(self, control: ScriptedControl) -> None:
        self._control = control
        self._rounds: dict[str, _Started] = {}
        self._lock = threading.Lock()

    def start_round(
        self,
        round_id: str,
        tap_key: str,
        settings: SamplingSettings,
        window_ms: int,
        program: str | None = None,
    ) -> None:
        vertex = tap_key.partition("#")[0]
        partitions = self._control.script(vertex).partitions()
        with self._lock:
            self._rounds[round_id] = _Started(vertex, time.monotonic(), partitions)
        self._control.rounds[round_id] = vertex

    def _executors(self, started: _Started) -> tuple[set[str], set[str]]:
        script = self._control.script(started.vertex)
        everyone = {f"e{p['subtaskIndex']}" for p in started.partitions} | {
            f"e{i}" for i in script.lost
        }
        return everyone or {"e0"}, {f"e{i}" for i in script.lost}

    @staticmethod
    def _reported(started: _Started, script: VertexScript) -> bool:
        """Whether the round's live executors have reported (told to stop, they do at once)."""
        return started.cancelled or (
            time.monotonic() - started.at >= script.delay_s and script.released()
        )

    def round_status(self, round_id: str) -> dict[str, Any]:
        with self._lock:
            started = self._rounds.get(round_id)
        script = self._control.script(started.vertex) if started is not None else None
        if started is None or script is None or script.plugin_forgets:
            return {"known": False}
        everyone, lost = self._executors(started)
        ready = self._reported(started, script)
        return {
            "participants": sorted(everyone),
            "reported": sorted(everyone - lost) if ready else [],
            "alive": sorted(everyone - lost),
            # The partitions each executor saw: those it captured from, and a lost one's.
            "progress": {
                e: [int(e[1:])]
                for e in everyone
                if e in lost or any(f"e{p['subtaskIndex']}" == e for p in started.partitions)
            },
        }

    def round_reports(self, round_id: str) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            started = self._rounds.get(round_id)
        if started is None or not self._reported(started, self._control.script(started.vertex)):
            return {}
        _, lost = self._executors(started)
        reports: dict[str, list[dict[str, Any]]] = {}
        for part in started.partitions:
            executor = f"e{part['subtaskIndex']}"
            if executor not in lost:
                reports.setdefault(executor, []).append(part)
        return reports

    def cancel_round(self, round_id: str) -> None:
        # Told to stop, executors report what they have at once.
        with self._lock:
            started = self._rounds.get(round_id)
            if started is not None:
                started.cancelled = True

    def forget_round(self, round_id: str) -> None:
        with self._lock:
            self._rounds.pop(round_id, None)


class _Coordinator(RoundCoordinator):
    """The real coordinator; the script decides, per vertex, the settings a round starts
    with (its timeout, sampling on or off) and whether opens are refused."""

    def __init__(self, control: ScriptedControl) -> None:
        self._control = control
        self._starting = threading.local()
        self._registered: dict[str, str] = {}
        super().__init__(
            _Transport(control),
            self._current_settings,
            round_prefix="r",
            check_interval_s=0.02,
            clock=lambda: time.monotonic() * CLOCK_SPEED,
        )
        self.describe = control.description if control.description() is not None else None
        self.progress = control.metrics

    def _sync(self) -> None:
        for vertex in self._control.vertex_names():
            script = self._control.script(vertex)
            # A tap's type is fixed: a script that changed it is a new tap.
            if self._registered.get(vertex) == script.data_type:
                continue
            self._registered[vertex] = script.data_type
            for kind in RoundKind:
                self.register_tap(
                    TapInfo(
                        vertex,
                        vertex if kind is RoundKind.OUTPUT else f"{vertex}#{kind.value}",
                        script.data_type,
                        is_running=lambda v=vertex: self._control.script(v).running,
                        micro_batches=lambda _, v=vertex: self._control.script(v).micro_batches,
                        kind=kind.value,
                        compile=lambda request, v=vertex: self._control.compile(v, request),
                    )
                )

    def _current_settings(self) -> SamplingSettings:
        advertised = self._control.advertised()
        starting: str | None = getattr(self._starting, "vertex", None)
        if starting is None:
            return advertised
        script = self._control.script(starting)
        window = advertised.sampling_window_ms
        # Not validated (model_copy): the stretched timeout may pass the contract's range.
        return advertised.model_copy(
            update={
                "enabled": advertised.enabled and script.enabled,
                "timeout_ms": window if script.times_out else advertised.timeout_ms * CLOCK_SPEED,
            }
        )

    def vertices(self) -> list[str]:
        self._sync()
        return super().vertices()

    def check_round(
        self,
        vertex: str,
        sampling_window_ms: int | None = None,
        request: RoundRequest | None = None,
    ) -> bool:
        self._sync()
        self._starting.vertex = vertex
        try:
            return super().check_round(vertex, sampling_window_ms, request)
        finally:
            self._starting.vertex = None

    def start_round(
        self,
        vertex: str,
        sampling_window_ms: int | None = None,
        request: RoundRequest | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> DataSampleResult:
        self._sync()
        if vertex in self._registered and self._control.script(vertex).busy:
            return DataSampleResult(
                status=SampleStatus.FAILED,
                error_code=ErrorCode.TOO_MANY_CONCURRENT_ROUNDS,
                end_timestamp=int(time.time() * 1000),
            )
        self._starting.vertex = vertex
        try:
            result = super().start_round(
                vertex, sampling_window_ms, request, idempotency_key=idempotency_key
            )
        finally:
            self._starting.vertex = None
        if idempotency_key is not None and result.round_id is not None:
            self._control.keys[idempotency_key] = result.round_id
        if self._control.stall_opens:
            self._control.open_gate.wait(60)
        return result

    def round_result(
        self, round_id: str, subtask_index: int | None = None, max_records: int | None = None
    ) -> DataSampleResult:
        self._sync()
        if round_id in self._control.forgotten:
            raise UnknownRoundError(round_id)
        return super().round_result(round_id, subtask_index, max_records)

    def data_sample(
        self,
        vertex: str,
        subtask_index: int | None = None,
        max_records: int | None = None,
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        self._sync()
        return super().data_sample(vertex, subtask_index, max_records, request)


class _Endpoint(ControlEndpoint):
    """The real endpoint; its handler first counts each request and asks the override."""

    def __init__(self, control: ScriptedControl, settings: ControlSettings) -> None:
        super().__init__(_Coordinator(control), settings)
        self.control = control

    def start(self) -> None:
        super().start()
        server = self._server
        assert server is not None
        if self.control.sni is not None:
            # One listener standing in for the drivers of several applications: the
            # certificate is picked per server name, as each driver Pod would serve its own.
            server.ssl_context = self.control.sni
        server.RequestHandlerClass = _scripted_handler(server.RequestHandlerClass, self.control)


def _scripted_handler(base: Any, control: ScriptedControl) -> Any:
    class Handler(base):  # type: ignore[misc,valid-type]
        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            call = Call(
                method, url.path.rstrip("/") or "/", query, self.headers.get("Authorization")
            )
            authorized = control.note(call)
            reply = control.intercept(call)
            if reply is not None:
                self._reply(reply)
                return
            if authorized:
                # Each application's token stands for the one the endpoint checks.
                del self.headers["Authorization"]
                self.headers["Authorization"] = f"Bearer {control.endpoint_token}"
            super()._dispatch(method)

        def _reply(self, reply: Reply) -> None:
            data = reply.encoded()
            self._answering()
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            # A body of the request, if any, stays unread: the connection cannot go on.
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

    return Handler


@dataclass
class ScriptedControl:
    """The real control endpoint over scripted executors (module docstring).

    Subclasses say which vertices exist (:meth:`vertex_names`), how each behaves
    (:meth:`script`), the pipeline (:meth:`description`) and its live metrics
    (:meth:`progress`). Counters of what reached the endpoint: ``calls`` (``open:<vertex>``,
    ``check:<vertex>``, ``get:<roundId>``, ``progress``, every request, authorized or not),
    ``authorizations`` (each request's header), ``auth_failures``, ``opened``/``checked``
    (the query of each authorized open/round check), ``started`` (authorized opens per known
    vertex), ``rounds`` (round id -> vertex, as the executors were told) and ``keys``
    (idempotency key -> round id).
    """

    #: The bearer tokens accepted (one per application using this driver).
    tokens: set[str] = field(default_factory=set)
    #: The one narrow hook for answers the real endpoint never gives: called with each
    #: request before the endpoint sees it; a :class:`Reply` is sent instead.
    override: Callable[[Call], Reply | None] | None = None
    #: While set, an open starts its round and answers only once ``open_gate`` is set (a
    #: caller can die between the driver opening the round and learning its id).
    stall_opens: bool = False
    open_gate: threading.Event = field(default_factory=threading.Event)
    calls: Counter[str] = field(default_factory=Counter, repr=False)
    authorizations: list[str | None] = field(default_factory=list, repr=False)
    auth_failures: int = 0
    opened: list[dict[str, str]] = field(default_factory=list, repr=False)
    checked: list[dict[str, str]] = field(default_factory=list, repr=False)
    started: dict[str, int] = field(default_factory=dict, repr=False)
    rounds: dict[str, str] = field(default_factory=dict, repr=False)
    keys: dict[str, str] = field(default_factory=dict, repr=False)
    #: The TLS context picking a certificate per server name (``None``: the settings' files).
    sni: ssl.SSLContext | None = None
    url: str = ""
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    endpoint_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    endpoint: _Endpoint | None = field(default=None, repr=False)
    #: Rounds read as unknown (404), as by a new driver run.
    forgotten: set[str] = field(default_factory=set, repr=False)

    # ------------------------------------------------------------- the script
    def vertex_names(self) -> Iterable[str]:
        return ()

    def script(self, vertex: str) -> VertexScript:
        return VertexScript()

    def description(self) -> PipelineDescription | None:
        """The pipeline ``GET /api/v1/pipeline`` serves (``None``: none attached, a 404)."""
        return None

    def advertised(self) -> SamplingSettings:
        """The sampling settings: served at ``GET /api/v1/settings`` (every field, as a real
        driver does) and those every round runs with."""
        return DEFAULT_SETTINGS

    def progress(self) -> dict[str, Any]:
        """The live metrics ``GET /api/v1/progress`` serves (camelCase, as on the wire)."""
        return {}

    def metrics(self) -> PipelineMetrics:
        """What ``GET /api/v1/progress`` serves: :meth:`progress`, as the contract holds it."""
        return PipelineMetrics.model_validate(self.progress())

    def compile(self, vertex: str, request: RoundRequest) -> _Compiled:
        """A round request compiled as Spark's analyzer would: refused per the script."""
        script = self.script(vertex)
        if script.compile_gate is not None:
            script.compile_gate.wait(30)
        if request.filter is not None:
            refusal = script.refuse_filter(request.filter)
            if refusal is not None:
                raise InvalidParameterError(refusal, field="filter")
        return _Compiled(script.data_type, f"scripted:{vertex}")

    def intercept(self, call: Call) -> Reply | None:
        return self.override(call) if self.override is not None else None

    # ------------------------------------------------------------ accounting
    def authorized(self, call: Call) -> bool:
        """Whether ``call`` carries one of :attr:`tokens`."""
        return call.authorization in {f"Bearer {t}" for t in self.tokens}

    def note(self, call: Call) -> bool:
        """Count ``call``; whether its token is one of :attr:`tokens`."""
        authorized = self.authorized(call)
        parts = call.path.strip("/").split("/")
        with self.lock:
            self.authorizations.append(call.authorization)
            self.auth_failures += 0 if authorized or call.path == "/healthz" else 1
            if parts[:3] == ["api", "v1", "vertices"] and len(parts) == 5:
                vertex = parts[3]
                if parts[4] == "rounds":
                    self.calls[f"open:{vertex}"] += 1
                    if authorized:
                        self.opened.append(dict(call.query))
                        if vertex in set(self.vertex_names()):
                            self.started[vertex] = self.started.get(vertex, 0) + 1
                elif parts[4] == "round-check":
                    self.calls[f"check:{vertex}"] += 1
                    if authorized:
                        self.checked.append(dict(call.query))
            elif parts[:3] == ["api", "v1", "rounds"] and len(parts) == 4:
                self.calls[f"get:{parts[3]}"] += 1
            elif len(parts) == 3 and parts[:2] == ["api", "v1"]:
                self.calls[parts[2]] += 1
        return authorized

    def round_vertex(self, path: str) -> str | None:
        """The vertex of the round ``GET /api/v1/rounds/{id}`` reads, if one this driver runs."""
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "rounds"] and len(parts) == 4:
            return self.rounds.get(parts[3])
        return None

    def real_answer(self, round_id: str) -> dict[str, Any]:
        """The endpoint's own answer for a round (for an override to alter)."""
        assert self.endpoint is not None
        return self.endpoint.coordinator.round_result(round_id).to_json_dict()

    # ------------------------------------------------------------- lifecycle
    def start(self, *, tls_cert_file: str | None = None, tls_key_file: str | None = None) -> str:
        """Serve on a free port of 127.0.0.1; the URL."""
        settings = ControlSettings(
            token=self.endpoint_token,
            # Generous: tests poll with many clients from one address.
            max_connections=1024,
            max_connections_per_address=1024,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
        )
        self.endpoint = _Endpoint(self, settings)
        self.endpoint.start()
        self.port = self.endpoint.port
        scheme = "https" if tls_cert_file or self.sni is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        return self.url

    def stop(self) -> None:
        if self.endpoint is not None:
            self.endpoint.coordinator.close()
            self.endpoint.stop()


# ---------------------------------------------------------------------------- the service's

TOKEN = "driver-secret-token"

PIPELINE = PipelineDescription.model_validate(
    {
        "name": "flights",
        "vertices": [
            {"name": "flights", "kind": "source", "bounded": False},
            {
                "name": "parse",
                "inputs": ["flights"],
                "python": True,
                "attributes": {"notCacheRecord": True},
            },
            {"name": "airlines", "kind": "source"},
            {
                "name": "carrier-names",
                "inputs": ["airlines"],
                "attributes": {"noOutputUntilEndOfInput": True},
            },
            {"name": "enriched", "inputs": ["parse", "carrier-names"]},
            {"name": "partial", "inputs": ["parse"]},
            {"name": "empty", "inputs": ["parse"]},
            {"name": "off", "inputs": ["parse"]},
            {"name": "busy", "inputs": ["parse"]},
            {"name": "stuck", "inputs": ["parse"]},
            {"name": "broken", "inputs": ["parse"]},
            {"name": "unreachable", "inputs": ["parse"]},
            {"name": "terminated", "inputs": ["parse"]},
            {"name": "slow", "inputs": ["parse"]},
            {"name": "timeout", "inputs": ["parse"]},
            {"name": "idle", "inputs": ["parse"]},
            {"name": "nested", "inputs": ["parse"]},
            {"name": "many", "inputs": ["parse"]},
            {"name": "out", "kind": "sink", "inputs": ["enriched"]},
        ],
    }
)

FLIGHT_TYPE = "struct<carrier:string,flight:bigint,dep_delay:bigint>"
NESTED_TYPE = "struct<carrier:string,route:struct<from:string,to:string>>"
MANY_TYPE = "struct<id:bigint,carrier:string,delay:bigint>"


def records(subtask: int, n: int) -> list[dict[str, Any]]:
    """``n`` flight-like records of one subtask."""
    now = int(time.time() * 1000)
    return [
        {
            "sampleTimestamp": now + i,
            "data": f'{{"carrier":"UA","flight":{subtask * 1000 + i},"dep_delay":{i % 7}}}',
            "truncated": i == 0 and subtask == 1,
        }
        for i in range(n)
    ]


#: Records with nested values, markup and fields missing in some records (vertex ``nested``).
NESTED_RECORDS: list[dict[str, Any]] = [
    {
        "carrier": "UA",
        "route": {"from": "SFO", "to": "JFK", "stops": [{"code": "DEN", "minutes": 45}]},
        "tags": ["red-eye", "intl"],
        "delay": 12,
        "note": None,
        "formula": '=HYPERLINK("http://evil")',
    },
    {
        "carrier": '<img src=x onerror="window.__xss=1">',
        "route": {"from": "<b>LAX</b>", "to": "ORD", "stops": []},
        "tags": ["<script>window.__xss=2</script>"],
        "delay": 3,
        "note": "<a href='javascript:window.__xss=3'>click</a>",
    },
    {"carrier": "AA", "route": {"from": "BOS", "to": "MIA", "stops": []}, "delay": 40},
    {"carrier": "DL", "route": {"from": "ATL", "to": "SEA", "stops": []}, "delay": 7},
]


def nested_partitions() -> list[dict[str, Any]]:
    """The ``nested`` vertex's capture: one subtask, the last record cut (truncated)."""
    now = int(time.time() * 1000)
    recs = []
    for i, rec in enumerate(NESTED_RECORDS):
        data = json.dumps(rec)
        truncated = i == len(NESTED_RECORDS) - 1
        recs.append(
            {
                "sampleTimestamp": now + i,
                "data": data[:40] if truncated else data,
                "truncated": truncated,
            }
        )
    return [{"subtaskIndex": 0, "records": recs}]


#: Records of the ``many`` vertex (5 subtasks of 1000: the 5,000-record response cap).
MANY_SUBTASKS = 5
MANY_PER_SUBTASK = 1000


def many_partitions() -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [
        {
            "subtaskIndex": s,
            "records": [
                {
                    "sampleTimestamp": now + s * MANY_PER_SUBTASK + i,
                    "data": (
                        f'{{"id":{s * MANY_PER_SUBTASK + i},"carrier":"C{(i * 7919) % 97:02d}",'
                        f'"delay":{(i * 31 + s) % 200},"route":{{"from":"A{i % 13}",'
                        f'"to":"B{i % 17}"}},"ok":{"true" if i % 3 else "false"}}}'
                    ),
                    "truncated": False,
                }
                for i in range(MANY_PER_SUBTASK)
            ],
        }
        for s in range(MANY_SUBTASKS)
    ]


def flight_partitions() -> list[dict[str, Any]]:
    """3 subtasks of 3 records; the first dropped 4 records to the rate limit and 1 to
    contention."""
    parts: list[dict[str, Any]] = [{"subtaskIndex": i, "records": records(i, 3)} for i in range(3)]
    parts[0].update(droppedByRateLimit=4, droppedByContention=1)
    return parts


def _no_such_column(text: str) -> str | None:
    return "filter: no column no_such_column" if "no_such_column" in text else None


@dataclass
class FakeDriver(ScriptedControl):
    """The service tests' driver of the pipeline :data:`PIPELINE`; a vertex's name says how
    its rounds end (``partial``, ``empty``, ``idle``, ``off``, ``busy``, ``broken``,
    ``unreachable``, ``terminated``, ``timeout``, ``nested``, ``many``; ``slow`` reports
    after 2 s, ``stuck`` never; any other: ``COMPLETE`` after ``pending_seconds``). A filter
    naming ``no_such_column`` is refused (400 naming ``filter``); a round check of one
    naming ``check_breaks`` answers 500 (through the override path)."""

    pending_seconds: float = 0.3
    #: The application's sampling settings, as ``spec.sampling`` states them (the rest take
    #: the defaults; ``minMicroBatches`` 0).
    sampling: dict[str, Any] = field(
        default_factory=lambda: {"enabled": True, "maxSampleRate": 100}
    )
    #: False: ``GET /api/v1/settings`` answers only ``sampling`` (through :attr:`override`'s
    #: path: no real driver leaves a setting out), so that the service falls back to its own
    #: settings for the rest.
    states_every_setting: bool = True
    #: ``GET /api/v1/progress`` answers so far: each answer is one micro-batch further.
    progress_reads: int = 0

    def __post_init__(self) -> None:
        self.tokens = self.tokens or {TOKEN}

    def vertex_names(self) -> Iterable[str]:
        return PIPELINE.names()

    def description(self) -> PipelineDescription:
        return PIPELINE

    def advertised(self) -> SamplingSettings:
        stated = settings_from_spec(self.sampling)
        if "min_micro_batches" in stated.model_fields_set:
            return stated
        return stated.model_copy(update={"min_micro_batches": 0})

    def intercept(self, call: Call) -> Reply | None:
        reply = super().intercept(call)
        if reply is not None or not self.authorized(call):
            return reply
        if not self.states_every_setting and call.path == "/api/v1/settings":
            return Reply(200, dict(self.sampling))
        breaks = "check_breaks" in call.query.get("filter", "")
        if breaks and call.path.endswith("/round-check"):
            # A check that breaks (a 5xx) where the open itself would succeed.
            return Reply(500, {"error": "the check broke"})
        return reply

    def script(self, vertex: str) -> VertexScript:
        base = VertexScript(
            partitions=flight_partitions,
            data_type=FLIGHT_TYPE,
            delay_s=self.pending_seconds,
            refuse_filter=_no_such_column,
        )
        if vertex == "partial":
            base.lost = frozenset({2})
        elif vertex in ("empty", "broken"):
            base.partitions = list
        elif vertex == "idle":  # the query ran no micro-batch during the round
            base.partitions = list
            base.micro_batches = MicroBatches(completed=0, last_end_ms=1_700_000_000_000)
        elif vertex == "off":
            base.enabled = False
        elif vertex == "busy":
            base.busy = True
        elif vertex == "unreachable":
            base.lost = frozenset({0, 1, 2})
        elif vertex == "terminated":
            base.partitions, base.running = list, False
        elif vertex == "timeout":
            base.partitions, base.delay_s, base.times_out = list, math.inf, True
        elif vertex == "stuck":
            base.delay_s = math.inf
        elif vertex == "slow":
            base.delay_s = 2.0
        elif vertex == "nested":
            base.partitions, base.data_type = nested_partitions, NESTED_TYPE
        elif vertex == "many":
            base.partitions, base.data_type = many_partitions, MANY_TYPE
        if vertex == "broken":
            base.plugin_forgets = True
        return base

    def progress(self) -> dict[str, Any]:
        """The next metrics snapshot: micro-batch ``n`` counts ``10 * (i + 1) + n`` rows at
        the ``i``-th non-sink vertex, over one second (so as many rows/s)."""
        with self.lock:
            self.progress_reads += 1
            n = self.progress_reads
        now = int(time.time() * 1000)
        steps = [v.name for v in PIPELINE.vertices if v.kind.value != "sink"]
        return {
            "state": "ACTIVE",
            "activeQueries": 1,
            "microBatches": n,
            "inputRowsPerSecond": 10.0 + n,
            "processedRowsPerSecond": 20.0 + n,
            "lastMicroBatchTimestamp": now - 100,
            "observedAt": now,
            "vertices": {
                name: {
                    "rowsLastMicroBatch": 10 * (i + 1) + n,
                    "rowsPerSecond": float(10 * (i + 1) + n),
                    "rowsTotal": (10 * (i + 1)) * n + n * (n + 1) // 2,
                }
                for i, name in enumerate(steps)
            },
        }

    def app(self) -> FakeDriver:
        """What ``ServerThread`` serves (kept so that callers read as before)."""
        return self


# --------------------------------------------------------------------------- the operator's


@dataclass
class ScriptedDriver(ScriptedControl):
    """The operator tests' driver, HTTPS only, with per-vertex behaviour.

    ``behaviour[vertex]``: ``complete`` (default), ``partial``, ``no-data``, ``failed``
    (``TIMEOUT``), ``busy`` (429 on every open), ``disabled``, ``reject-filter`` (400 naming
    ``filter``, as the real driver answers a filter over an unknown column), ``hold`` (the
    round stays PENDING until ``release()``). Through :attr:`override`, answers no real
    driver gives: ``slow`` (a round check answers once ``check_gate`` is set),
    ``flaky`` (503 on the first open), ``dead`` (503 on every read of its rounds: a driver
    that stopped answering), ``old`` (a driver without the round-check route), ``negative``
    (a final result with a negative counter: an answer past the status's bounds). Vertices
    not in ``vertices`` get the endpoint's 404, and so do rounds of a new driver run
    (``forget()``). Records: ``records`` per subtask, 2 subtasks, each ~``record_bytes``
    long.
    """

    vertices: set[str] = field(default_factory=set)
    behaviour: dict[str, str] = field(default_factory=dict)
    records: int = 3
    record_bytes: int = 60
    held: bool = True
    #: A ``slow`` round check answers once this is set.
    check_gate: threading.Event = field(default_factory=threading.Event)
    #: TLS: the context of each server name (SNI) this driver answers for.
    contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    handshakes: Counter[str] = field(default_factory=Counter)  # server name -> handshakes

    def __post_init__(self) -> None:
        self.sni = self.ssl_context()

    def vertex_names(self) -> Iterable[str]:
        return self.vertices

    def serve_certificate(self, server_name: str, cert_pem: str, key_pem: str) -> None:
        """Answer TLS handshakes for ``server_name`` with this certificate and key."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = f"{tmp}/tls.crt", f"{tmp}/tls.key"
            with open(cert, "w") as f:
                f.write(cert_pem)
            with open(key, "w") as f:
                f.write(key_pem)
            context.load_cert_chain(cert, key)
        self.contexts[server_name] = context

    def ssl_context(self) -> ssl.SSLContext:
        """The listening context: the certificate is picked per server name (SNI)."""
        listening = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        listening.minimum_version = ssl.TLSVersion.TLSv1_2

        def pick(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> int | None:
            self.handshakes[name or ""] += 1
            chosen = self.contexts.get(name or "")
            if chosen is None:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            sock.context = chosen
            return None

        listening.sni_callback = pick  # type: ignore[assignment]
        return listening

    def release(self) -> None:
        self.held = False

    @property
    def opens(self) -> list[dict[str, str]]:
        """The query of each authorized open."""
        return self.opened

    def forget(self, vertex: str) -> None:
        """Forget the rounds at ``vertex``, as a new driver run knows none of the last one's
        (404 on reading them)."""
        self.forgotten.update(r for r, v in self.rounds.items() if v == vertex)
        self.rounds = {r: v for r, v in self.rounds.items() if v != vertex}

    def _partitions(self, subtasks: list[int]) -> list[dict[str, Any]]:
        return [
            {
                "subtaskIndex": s,
                "records": [
                    {
                        "sampleTimestamp": 1_700_000_000_000 + i,
                        "data": json.dumps({"subtask": s, "i": i, "pad": "x" * self.record_bytes}),
                        "truncated": False,
                    }
                    for i in range(self.records)
                ],
                "droppedByRateLimit": 7 if s == 0 else 0,
            }
            for s in subtasks
        ]

    def script(self, vertex: str) -> VertexScript:
        mode = self.behaviour.get(vertex, "complete")
        script = VertexScript(
            partitions=lambda: self._partitions([0, 1]),
            data_type="struct<subtask:int,i:int,pad:string>",
            delay_s=0.0,
            released=lambda: mode != "hold" or not self.held,
        )
        if mode == "partial":
            script.lost = frozenset({1})
        elif mode == "no-data":
            script.partitions = list
        elif mode == "failed":
            script.partitions, script.delay_s, script.times_out = list, math.inf, True
        elif mode == "busy":
            script.busy = True
        elif mode == "disabled":
            script.enabled = False
        elif mode == "reject-filter":
            script.refuse_filter = lambda _: (
                "filter: unknown column 'carier' at vertex 'parse'; columns: "
                "carrier, flight, dep_delay"
            )
        return script

    def intercept(self, call: Call) -> Reply | None:
        reply = super().intercept(call)
        if reply is not None or not self.authorized(call):
            return reply
        parts = call.path.strip("/").split("/")
        vertex = parts[3] if parts[:3] == ["api", "v1", "vertices"] and len(parts) == 5 else None
        mode = self.behaviour.get(vertex or self.round_vertex(call.path) or "", "complete")
        if vertex is not None and parts[4] == "round-check" and mode == "old":
            return Reply(404, {"error": f"no route {call.path}"})
        if vertex is not None and parts[4] == "round-check" and mode == "slow":
            # A driver slow to answer (30 s at most): the endpoint answers once it is let go.
            self.check_gate.wait(30)
            return None
        first_open = vertex is not None and self.calls[f"open:{vertex}"] == 1
        if first_open and parts[4] == "rounds" and mode == "flaky":
            return Reply(503, {"error": "starting"})
        round_of = self.round_vertex(call.path)
        if round_of is not None and mode == "dead":
            return Reply(503, {"error": "driver gone"})
        if round_of is not None and mode == "negative":
            answer = self.real_answer(parts[3])
            if answer.get("status") != "PENDING":
                answer["droppedByRateLimit"] = -1
            return Reply(200, answer)
        return None

    def progress(self) -> dict[str, Any]:
        """Live metrics that grow with every call."""
        n = self.calls["progress"]
        return {
            "state": "ACTIVE",
            "activeQueries": 1,
            "microBatches": n,
            "inputRowsPerSecond": 10.0,
            "processedRowsPerSecond": 10.0,
            "lastMicroBatchTimestamp": 1_700_000_000_000 + n,
            "observedAt": 1_700_000_000_000 + n,
            "failed": None,
            "vertices": {
                "parse": {"rowsLastMicroBatch": 5, "rowsPerSecond": 10.0, "rowsTotal": 5 * n}
            },
        }


def progress_as_given(driver: ScriptedControl) -> Callable[[Call], Reply | None]:
    """An :attr:`~ScriptedControl.override` answering ``GET /api/v1/progress`` with
    ``driver.progress()`` as it is, past the contract (which the real endpoint could not
    serve): a driver whose own code answers what it likes."""

    def answer(call: Call) -> Reply | None:
        if call.path == "/api/v1/progress" and driver.authorized(call):
            return Reply(200, driver.progress())
        return None

    return answer


@dataclass
class Served:
    """A driver served by :func:`serve_driver`; ``cleanup()`` stops it."""

    driver: ScriptedControl

    async def cleanup(self) -> None:
        await asyncio.to_thread(self.driver.stop)


async def serve_driver(d: ScriptedControl) -> Served:
    """Serve ``d`` on 127.0.0.1 (``d.port``), as a driver's control endpoint; the caller
    cleans it up. Also used by ``bench/operator_bench.py``."""
    await asyncio.to_thread(d.start)
    return Served(d)


@contextlib.contextmanager
def serving(
    d: ScriptedControl, *, tls_cert_file: str | None = None, tls_key_file: str | None = None
) -> Any:
    """Serve ``d`` for the ``with`` block."""
    d.start(tls_cert_file=tls_cert_file, tls_key_file=tls_key_file)
    try:
        yield d
    finally:
        d.stop()

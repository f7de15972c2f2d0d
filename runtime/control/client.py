"""The one client of the driver control endpoint (:mod:`.endpoint`), sync and async.

:class:`ControlClient` (``httpx.Client``) and :class:`AsyncControlClient`
(``httpx.AsyncClient``) have the same calls, one per route of :data:`.routes.ROUTES`, and
share one implementation of the paths, query parameters, bearer header and the reading of
answers; only the sending differs. Failures are classified for retry policies: transient
(:class:`ControlUnavailable`, :class:`ControlUntrusted` for a certificate that fails
verification) or permanent (:class:`ControlRejected`). Spark-free: the service, the operator
and the CLI import it.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.errors import SparkglassError
from sparkglass.runtime.contract.expectations import ExpectationCounts
from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
from sparkglass.runtime.contract.round_request import RoundRequest
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.control import routes

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "AsyncControlClient",
    "ControlClient",
    "ControlError",
    "ControlRejected",
    "ControlTLS",
    "ControlUnavailable",
    "ControlUntrusted",
]

#: Default per-request timeout, seconds.
DEFAULT_TIMEOUT_S = 10.0

#: The most bytes of one answer a client reads (decoded), 64 MiB: the largest valid answer, a
#: full result of 5000 records of 10,000 characters, is about 50 MB of JSON, and a driver is
#: the application's own code, so an endless or huge answer fails the call with
#: :class:`ControlUnavailable` instead of holding the reader's memory.
MAX_ANSWER_BYTES = routes.FULL_RESULT_BYTES
#: A whole call (connection, headers and body) ends within this many times its
#: ``timeout_s``: httpx's timeouts bound each socket read, so a driver sending a byte now
#: and then would otherwise hold the caller for as long as it likes.
CALL_DEADLINE_FACTOR = 2

T = TypeVar("T")


class ControlError(SparkglassError):
    """A call to the control endpoint failed.

    ``status`` is the HTTP status the driver answered (``None``: no answer at all);
    ``detail`` the driver's error text (``None`` when there was no answer). The bearer token
    is sent in a header only and never appears in messages.
    """

    def __init__(
        self, message: str, *, status: int | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class ControlUnavailable(ControlError):
    """A transient failure; ``error_code`` is set when the driver said why (429).

    No connection, a timeout, an invalid URL, HTTP 5xx (or another non-2xx status outside
    4xx), a body that is not the contract, or HTTP 429 (the driver already runs its maximum
    of concurrent rounds; ``error_code`` is ``TOO_MANY_CONCURRENT_ROUNDS``).
    """

    def __init__(
        self,
        message: str,
        error_code: ErrorCode | None = None,
        *,
        status: int | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message, status=status, detail=detail)
        self.error_code = error_code


class ControlUntrusted(ControlUnavailable):
    """The driver's TLS certificate failed verification (wrong CA, pin or name, expired).

    A :class:`ControlUnavailable` so that retry policies treat it as they treat an
    unreachable driver (a driver restarted with a new certificate is fixed by reading the
    Secret again); the message names the trust anchor that was used.
    """


class ControlRejected(ControlError):
    """A permanent refusal (HTTP 4xx but 429); the message is the driver's ``detail``.

    401 bad token, 404 unknown vertex or round, 400 bad parameter: ``field`` names the
    offending parameter of a 400 (``maxRecords``, ``samplingWindow``...).
    """

    status: int

    def __init__(self, status: int, message: str, *, field: str | None = None) -> None:
        super().__init__(message, status=status, detail=message)
        self.field = field


@dataclass(frozen=True)
class ControlTLS:
    """How a client verifies the driver's HTTPS certificate (exactly one trust anchor).

    ``ca_file``: PEM file of the certificate authority (or authorities) to trust;
    ``ca_pem``: PEM text of the one certificate to trust, i.e. the driver's own self-signed
    certificate (pinning: the per-application certificate the operator issues);
    ``server_name``: the name to check the certificate against (and to send as SNI) instead
    of the URL's host, for connecting to a Pod IP with a certificate issued for the driver
    Service's DNS name. Raises ``ValueError`` naming the field when both or neither anchor is
    given.
    """

    ca_file: str | Path | None = None
    ca_pem: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.ca_file is None) == (self.ca_pem is None):
            raise ValueError("ControlTLS: give exactly one of ca_file (a PEM path) or ca_pem")
        if self.ca_pem is not None and "-----BEGIN CERTIFICATE-----" not in self.ca_pem:
            raise ValueError("ControlTLS.ca_pem: expected a PEM certificate (BEGIN CERTIFICATE)")

    @property
    def anchor(self) -> str:
        """The trust anchor, for messages: the CA file's path or ``the pinned certificate``."""
        return f"CA file {self.ca_file}" if self.ca_file is not None else "the pinned certificate"

    def ssl_context(self) -> ssl.SSLContext:
        """A client context (TLS 1.2+, hostname checked) trusting only this anchor.

        Raises ``ValueError`` naming the field when the file or PEM cannot be loaded.
        """
        # Only the given anchor: the system's CAs must not vouch for a driver. The
        # PROTOCOL_TLS_CLIENT defaults require a certificate and check the host name.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if self.ca_file is not None:
                context.load_verify_locations(cafile=str(self.ca_file))
            else:
                context.load_verify_locations(cadata=self.ca_pem)
        except (OSError, ssl.SSLError) as exc:
            field = "ca_file" if self.ca_file is not None else "ca_pem"
            raise ValueError(f"ControlTLS.{field}: cannot load {self.anchor}: {exc}") from None
        return context


def _untrusted(exc: BaseException) -> bool:
    """Whether ``exc`` (an httpx error) came from a certificate that failed verification."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


# ---------------------------------------------------------------------------- the protocol
@dataclass(frozen=True)
class _Call(Generic[T]):
    """One request of the contract and how to decode its successful answer."""

    method: str
    path: str
    params: dict[str, str | int]
    decode: Callable[[bytes], T]
    #: The most of the answer read (the route's ``max_answer``).
    max_answer: int


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (system trust via certifi), made once and shared:
    an ``SSLContext`` is safe to share between clients and threads once configured."""
    return httpx.create_ssl_context()


class _VertexList(BaseModel):
    vertices: list[str]


_SETTINGS = TypeAdapter(dict[str, Any])


def _to(
    name: str, params: dict[str, str | int], decode: Callable[[bytes], T], **segments: str
) -> _Call[T]:
    """The call of route ``name`` (:data:`.routes.ROUTES`) with ``segments`` in its path."""
    target = routes.route(name)
    return _Call(target.method, target.path(**segments), params, decode, target.max_answer)


def _reading(subtask_index: int | None, max_records: int | None) -> dict[str, str | int]:
    params: dict[str, str | int] = {}
    if subtask_index is not None:
        params["subtaskIndex"] = subtask_index
    if max_records is not None:
        params["maxRecords"] = max_records
    return params


def _open_round(
    vertex: str,
    sampling_window: str | None,
    request: RoundRequest | None = None,
    idempotency_key: str | None = None,
) -> _Call[DataSampleResult]:
    params: dict[str, str | int] = {"samplingWindow": sampling_window} if sampling_window else {}
    if request is not None:
        params.update(request.query_params())
    if idempotency_key is not None:
        params["idempotencyKey"] = idempotency_key
    return _to("open_round", params, DataSampleResult.model_validate_json, vertex=vertex)


class _RoundCheck(BaseModel):
    accepted: bool


def _check_round(
    vertex: str, sampling_window: str | None, request: RoundRequest | None
) -> _Call[bool]:
    params: dict[str, str | int] = {"samplingWindow": sampling_window} if sampling_window else {}
    if request is not None:
        params.update(request.query_params())
    return _to(
        "round_check", params, lambda raw: _RoundCheck.model_validate_json(raw).accepted,
        vertex=vertex,
    )  # fmt: skip


def _get_round(
    round_id: str, subtask_index: int | None, max_records: int | None
) -> _Call[DataSampleResult]:
    return _to(
        "round", _reading(subtask_index, max_records), DataSampleResult.model_validate_json,
        roundId=round_id,
    )  # fmt: skip


def _data_sample(
    vertex: str,
    subtask_index: int | None,
    max_records: int | None,
    request: RoundRequest | None = None,
) -> _Call[DataSampleResult]:
    params = _reading(subtask_index, max_records)
    if request is not None:
        params.update(request.query_params())
    return _to("data_sample", params, DataSampleResult.model_validate_json, vertex=vertex)


class _ExpectationList(BaseModel):
    expectations: list[ExpectationCounts]


def _expectations() -> _Call[list[ExpectationCounts]]:
    def decode(raw: bytes) -> list[ExpectationCounts]:
        return _ExpectationList.model_validate_json(raw).expectations

    return _to("expectations", {}, decode)


def _pipeline() -> _Call[PipelineDescription]:
    return _to("pipeline", {}, PipelineDescription.model_validate_json)


def _settings() -> _Call[dict[str, Any]]:
    return _to("settings", {}, _SETTINGS.validate_json)


def _progress(history: bool = False) -> _Call[PipelineMetrics]:
    if history:
        return _to("progress", {"history": "true"}, PipelineMetrics.model_validate_json)

    def without_history(raw: bytes) -> PipelineMetrics:
        # A driver may send its history unasked: no caller (the service's cache, the
        # operator's status) holds or passes on what it did not ask for.
        metrics = PipelineMetrics.model_validate_json(raw)
        if metrics.history is None:
            return metrics
        return metrics.model_copy(update={"history": None})

    return _to("progress", {}, without_history)


def _vertices() -> _Call[list[str]]:
    return _to("vertices", {}, lambda raw: _VertexList.model_validate_json(raw).vertices)


def _taken(body: bytearray) -> bytes:
    """``body`` as bytes, the buffer emptied: the answer is held once, not twice, while it is
    decoded."""
    data = bytes(body)
    body.clear()
    return data


class _Protocol:
    """Request building and answer reading shared by the sync and the async client."""

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout_s: float,
        connect_timeout_s: float | None,
        tls: ControlTLS | None,
        shared_pool: bool,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        for name, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{name}: expected seconds > 0, got {value!r}")
        if not 0 < max_answer_bytes <= MAX_ANSWER_BYTES:
            raise ValueError(
                f"max_answer_bytes: expected 1..{MAX_ANSWER_BYTES} bytes, got {max_answer_bytes!r}"
            )
        self.max_answer_bytes = max_answer_bytes
        self.base_url = base_url.rstrip("/")
        self.tls = tls
        if tls is not None:
            if not self.base_url.lower().startswith("https://"):
                raise ValueError(
                    f"base_url: expected an https:// URL with tls (the token must not travel "
                    f"in clear text), got {self.base_url!r}"
                )
            if shared_pool:
                raise ValueError(
                    "tls and http are exclusive: build the shared pool with "
                    "verify=tls.ssl_context() and pass only http"
                )
        # The endpoint never compresses; an answer is read raw, so a compressed one (a
        # hostile driver's small body that would inflate past the cap in one chunk) is
        # refused instead of decoded.
        self._headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"}
        self._extensions = (
            {"sni_hostname": tls.server_name} if tls is not None and tls.server_name else {}
        )
        self.timeout = httpx.Timeout(
            timeout_s, connect=timeout_s if connect_timeout_s is None else connect_timeout_s
        )
        self.deadline_s = CALL_DEADLINE_FACTOR * timeout_s

    def verify(self) -> ssl.SSLContext | bool:
        """``verify`` of the client's own pool: the TLS anchor, else httpx's default trust
        (one context per process: building it costs ~50 ms of CPU, and the operator makes a
        client per reconcile step)."""
        return self.tls.ssl_context() if self.tls is not None else _default_ssl_context()

    def request(self, call: _Call[Any]) -> dict[str, Any]:
        """Keyword arguments of ``httpx.(Async)Client.request`` for ``call``."""
        # Absolute URL, header and timeout per request: a caller's shared pool works as is.
        return {
            "method": call.method,
            "url": self.base_url + call.path,
            "params": call.params,
            "headers": self._headers,
            "timeout": self.timeout,
            "extensions": self._extensions,
        }

    def check_encoding(self, response: httpx.Response) -> None:
        """Raise :class:`ControlUnavailable` for an answer in a ``Content-Encoding`` other
        than ``identity`` (not asked for; its body is not read)."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise ControlUnavailable(
                f"driver control endpoint {self.base_url}: answer in Content-Encoding "
                f"{encoding[:40]!r}, not asked for; not read"
            )

    def capped(self, response: httpx.Response, body: bytes) -> httpx.Response:
        """The answer rebuilt around the ``body`` read so far (raw: no ``Content-Encoding``
        was accepted, so none is carried over)."""
        return httpx.Response(
            response.status_code,
            headers={"content-type": response.headers.get("content-type", "application/json")},
            content=body,
            request=response.request,
        )

    def cap(self, call: _Call[Any]) -> int:
        """The most of ``call``'s answer read: its route's bound, or the client's if less."""
        return min(call.max_answer, self.max_answer_bytes)

    def too_large(self, call: _Call[Any]) -> ControlUnavailable:
        return ControlUnavailable(
            f"driver control endpoint {self.base_url}: answer larger than "
            f"{routes.size_text(self.cap(call))}; not read further"
        )

    def too_slow(self) -> ControlUnavailable:
        return ControlUnavailable(
            f"driver control endpoint {self.base_url}: no whole answer within "
            f"{self.deadline_s:g} s; not read further"
        )

    def unreachable(self, exc: Exception) -> ControlUnavailable:
        """The error for a request that got no answer (httpx's text never holds headers)."""
        if _untrusted(exc):
            anchor = self.tls.anchor if self.tls is not None else "the system's CAs"
            return ControlUntrusted(
                f"driver control endpoint {self.base_url}: its TLS certificate failed "
                f"verification against {anchor}: {exc}"
            )
        return ControlUnavailable(
            f"driver control endpoint unreachable: {type(exc).__name__}: {exc}"
        )

    @staticmethod
    def interpret(call: _Call[T], response: httpx.Response) -> T:
        """The decoded answer, or the classified :class:`ControlError`."""
        status = response.status_code
        if status == 429:
            raise ControlUnavailable(
                "the driver already runs its maximum of concurrent rounds",
                ErrorCode.TOO_MANY_CONCURRENT_ROUNDS,
                status=status,
                detail=ErrorCode.TOO_MANY_CONCURRENT_ROUNDS.value,
            )
        if 400 <= status < 500:
            raise ControlRejected(status, _detail(response), field=_field(response))
        if not 200 <= status < 300:
            detail = _detail(response)
            raise ControlUnavailable(
                f"driver control endpoint answered HTTP {status}: {detail}",
                status=status,
                detail=detail,
            )
        try:
            return call.decode(response.content)
        except ValidationError as exc:
            raise ControlUnavailable(
                f"driver answered an unexpected body: {invalid_body_summary(exc)}", status=status
            ) from None


#: Most errors of a driver's invalid answer named in the message, and its longest length
#: (characters): the message reaches logs, the service's 502 body and the page, and a
#: driver's bad answer may hold a million bad values.
_ERRORS_NAMED = 3
_MAX_SUMMARY_CHARS = 1000


def invalid_body_summary(exc: ValidationError) -> str:
    """``exc`` in a few hundred characters: how many errors, the first few (where and why,
    never the value the driver sent)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    named = "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or 'body'}: {e['msg']}"
        for e in errors[:_ERRORS_NAMED]
    )
    more = len(errors) - _ERRORS_NAMED
    text = f"{named} (and {more} more)" if more > 0 else named
    return text[:_MAX_SUMMARY_CHARS]


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _detail(response: httpx.Response) -> str:
    """The driver's error text: ``error`` of the endpoint (``detail``/``message`` of other
    servers in front of it), else the body's start."""
    body = _json(response)
    if isinstance(body, dict):
        for key in ("detail", "message", "error"):
            if body.get(key):
                return str(body[key])[:1000]
        return str(body)[:1000]
    return response.text[:1000]


def _field(response: httpx.Response) -> str | None:
    body = _json(response)
    field = body.get("field") if isinstance(body, dict) else None
    return str(field) if field else None


def _poll(
    read: Callable[[], DataSampleResult],
    timeout_s: float,
    poll_interval_s: float,
    *,
    fresh: bool = False,
) -> DataSampleResult:
    """``read()`` now, then every ``poll_interval_s`` while ``PENDING`` (with ``fresh``,
    also while the answer is the previous round's, ``stale``) and before the deadline
    ``timeout_s`` from now; the last answer (``PENDING`` or stale when time ran out)."""
    if not timeout_s >= 0:
        raise ValueError(f"timeout_s: expected seconds >= 0, got {timeout_s!r}")
    if not poll_interval_s > 0:
        raise ValueError(f"poll_interval_s: expected seconds > 0, got {poll_interval_s!r}")
    deadline = time.monotonic() + timeout_s
    result = read()
    while result.status is SampleStatus.PENDING or (fresh and result.stale):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(poll_interval_s, remaining))
        result = read()
    return result


# ---------------------------------------------------------------------------- the clients
class ControlClient:
    """Calls one driver's control endpoint at ``base_url`` (e.g. ``http://10.0.0.5:4045``).

    ``timeout_s``: per request, seconds, bounding each of connecting, writing, reading and
    waiting for a pooled connection; ``connect_timeout_s`` (default ``timeout_s``) overrides
    the connect phase. A whole call ends within :data:`CALL_DEADLINE_FACTOR` times
    ``timeout_s`` (the sync client checks it at each chunk of the body; its headers are
    bounded per read only). Answers are read up to their route's bound
    (``Route.max_answer``), or ``max_answer_bytes`` if less (at most and by default
    :data:`MAX_ANSWER_BYTES`).
    ``http``: a pool to share (e.g. across drivers); it is then not closed by :meth:`close`.
    ``tls``: how to verify an ``https://`` driver (:class:`ControlTLS`; not with ``http``,
    whose own ``verify`` then applies). Every call raises :class:`ControlUnavailable` (its
    subclass :class:`ControlUntrusted` for a certificate that fails verification) or
    :class:`ControlRejected` (a malformed ``base_url`` is "unreachable"). Use as a context
    manager. Raises ``ValueError`` for a timeout <= 0, ``tls`` with an ``http://`` URL
    (rather than sending the token in clear text) or with ``http``, or a trust anchor that
    cannot be loaded.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float | None = None,
        http: httpx.Client | None = None,
        tls: ControlTLS | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._protocol = _Protocol(
            base_url,
            token,
            timeout_s,
            connect_timeout_s,
            tls,
            shared_pool=http is not None,
            max_answer_bytes=max_answer_bytes,
        )
        self._own = http is None
        self._http = http or httpx.Client(verify=self._protocol.verify())

    @property
    def base_url(self) -> str:
        """The endpoint's URL, without a trailing slash."""
        return self._protocol.base_url

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool unless it was given."""
        if self._own:
            self._http.close()

    def _send(self, call: _Call[T]) -> T:
        protocol = self._protocol
        # Checked at each chunk of the body: a driver trickling its headers is bounded only
        # by httpx's per-read timeout here (the async client bounds the whole call).
        deadline = time.monotonic() + protocol.deadline_s
        try:
            with self._http.stream(**protocol.request(call)) as response:
                protocol.check_encoding(response)
                body = bytearray()
                cap = protocol.cap(call)
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > cap:
                        raise protocol.too_large(call)
                    if time.monotonic() > deadline:
                        raise protocol.too_slow()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise protocol.unreachable(exc) from None
        return protocol.interpret(call, protocol.capped(response, _taken(body)))

    def open_round(
        self,
        vertex: str,
        sampling_window: str | None = None,
        *,
        request: RoundRequest | None = None,
        idempotency_key: str | None = None,
    ) -> DataSampleResult:
        """Start a round at ``vertex``; ``sampling_window`` like ``3s`` (default: the
        application's); ``request``: kind, filter, columns. ``PENDING`` with a ``roundId``, or
        ``DISABLED``; ``ControlRejected`` 400 naming the field for a bad request. With
        ``idempotency_key`` (1–128 printable ASCII characters) a repeated request answers
        the round the first one opened instead of opening another."""
        return self._send(_open_round(vertex, sampling_window, request, idempotency_key))

    def check_round(
        self,
        vertex: str,
        sampling_window: str | None = None,
        *,
        request: RoundRequest | None = None,
    ) -> bool:
        """Would :meth:`open_round` with these arguments be taken? Opens nothing. True, or
        False when the driver would answer ``DISABLED``; a request that does not fit raises
        ``ControlRejected`` (400 naming the field, 404 for an unknown vertex) as the open
        would. A driver older than this route answers 404 ``no route``."""
        return self._send(_check_round(vertex, sampling_window, request))

    def get_round(
        self, round_id: str, *, subtask_index: int | None = None, max_records: int | None = None
    ) -> DataSampleResult:
        """The round ``round_id`` (``PENDING`` while it runs), optionally only subtask
        ``subtask_index`` (0 or more) and at most ``max_records`` (1–5000) records.
        ``ControlRejected`` 404 when the driver does not know the round."""
        return self._send(_get_round(round_id, subtask_index, max_records))

    def data_sample(
        self,
        vertex: str,
        *,
        subtask_index: int | None = None,
        max_records: int | None = None,
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """The vertex's latest sample; starts a round when none is fresh (then ``PENDING``)."""
        return self._send(_data_sample(vertex, subtask_index, max_records, request))

    def expectations(self) -> list[ExpectationCounts]:
        """Pass and fail counts of every expectation of the pipeline the driver runs."""
        return self._send(_expectations())

    def pipeline(self) -> PipelineDescription:
        """The pipeline the driver runs (``ControlRejected`` 404 when none is attached)."""
        return self._send(_pipeline())

    def settings(self) -> dict[str, Any]:
        """The driver's sampling settings, a JSON object as sent (camelCase, durations ms)."""
        return self._send(_settings())

    def vertices(self) -> list[str]:
        """The names of the vertices with a tap."""
        return self._send(_vertices())

    def progress(self, *, history: bool = False) -> PipelineMetrics:
        """The pipeline's live metrics (micro-batches, rows per vertex, query state);
        ``history``: with their last minutes (``PipelineMetrics.history``).
        ``ControlRejected`` 404 when no pipeline is attached."""
        return self._send(_progress(history))

    def wait_for_round(
        self,
        round_id: str,
        *,
        timeout_s: float,
        poll_interval_s: float,
        subtask_index: int | None = None,
        max_records: int | None = None,
    ) -> DataSampleResult:
        """:meth:`get_round` now and every ``poll_interval_s`` seconds until the round is no
        longer ``PENDING`` or ``timeout_s`` seconds passed; the last answer (still
        ``PENDING`` on timeout). ``ValueError`` for ``timeout_s`` < 0 or an interval <= 0."""
        return _poll(
            lambda: self.get_round(round_id, subtask_index=subtask_index, max_records=max_records),
            timeout_s,
            poll_interval_s,
        )

    def wait_for_data_sample(
        self,
        vertex: str,
        *,
        timeout_s: float,
        poll_interval_s: float,
        subtask_index: int | None = None,
        max_records: int | None = None,
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """:meth:`data_sample` polled like :meth:`wait_for_round` (the first call may start
        the round), also while the answer is the previous round's (``stale``): a stale
        answer is returned only when ``timeout_s`` ran out before a fresh one."""
        return _poll(
            lambda: self.data_sample(
                vertex, subtask_index=subtask_index, max_records=max_records, request=request
            ),
            timeout_s,
            poll_interval_s,
            fresh=True,
        )


class AsyncControlClient:
    """:class:`ControlClient` on ``httpx.AsyncClient`` (same arguments, calls and errors).

    No ``wait_for_*``: its user, the operator, reads a round once per reconcile step instead
    of holding a handler open. Use as an async context manager.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connect_timeout_s: float | None = None,
        http: httpx.AsyncClient | None = None,
        tls: ControlTLS | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self._protocol = _Protocol(
            base_url,
            token,
            timeout_s,
            connect_timeout_s,
            tls,
            shared_pool=http is not None,
            max_answer_bytes=max_answer_bytes,
        )
        self._own = http is None
        self._http = http or httpx.AsyncClient(verify=self._protocol.verify())

    @property
    def base_url(self) -> str:
        """The endpoint's URL, without a trailing slash."""
        return self._protocol.base_url

    async def __aenter__(self) -> AsyncControlClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool unless it was given."""
        if self._own:
            await self._http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        protocol = self._protocol
        try:
            async with (
                asyncio.timeout(protocol.deadline_s),
                self._http.stream(**protocol.request(call)) as response,
            ):
                protocol.check_encoding(response)
                body = bytearray()
                cap = protocol.cap(call)
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > cap:
                        raise protocol.too_large(call)
        except TimeoutError:
            raise protocol.too_slow() from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise protocol.unreachable(exc) from None
        # Decoding a large answer (a result, minutes of history) takes CPU time: off the
        # event loop, which the operator shares with every reconcile and its Lease.
        return await asyncio.to_thread(
            protocol.interpret, call, protocol.capped(response, _taken(body))
        )

    async def open_round(
        self,
        vertex: str,
        sampling_window: str | None = None,
        *,
        request: RoundRequest | None = None,
        idempotency_key: str | None = None,
    ) -> DataSampleResult:
        """See :meth:`ControlClient.open_round`."""
        return await self._send(_open_round(vertex, sampling_window, request, idempotency_key))

    async def check_round(
        self,
        vertex: str,
        sampling_window: str | None = None,
        *,
        request: RoundRequest | None = None,
    ) -> bool:
        """See :meth:`ControlClient.check_round`."""
        return await self._send(_check_round(vertex, sampling_window, request))

    async def get_round(
        self, round_id: str, *, subtask_index: int | None = None, max_records: int | None = None
    ) -> DataSampleResult:
        """See :meth:`ControlClient.get_round`."""
        return await self._send(_get_round(round_id, subtask_index, max_records))

    async def data_sample(
        self,
        vertex: str,
        *,
        subtask_index: int | None = None,
        max_records: int | None = None,
        request: RoundRequest | None = None,
    ) -> DataSampleResult:
        """See :meth:`ControlClient.data_sample`."""
        return await self._send(_data_sample(vertex, subtask_index, max_records, request))

    async def expectations(self) -> list[ExpectationCounts]:
        """See :meth:`ControlClient.expectations`."""
        return await self._send(_expectations())

    async def pipeline(self) -> PipelineDescription:
        """See :meth:`ControlClient.pipeline`."""
        return await self._send(_pipeline())

    async def settings(self) -> dict[str, Any]:
        """See :meth:`ControlClient.settings`."""
        return await self._send(_settings())

    async def vertices(self) -> list[str]:
        """See :meth:`ControlClient.vertices`."""
        return await self._send(_vertices())

    async def progress(self, *, history: bool = False) -> PipelineMetrics:
        """See :meth:`ControlClient.progress`."""
        return await self._send(_progress(history))

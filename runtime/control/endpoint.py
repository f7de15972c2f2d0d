"""The driver control endpoint: a small HTTP(S) server in the Spark driver.

The service and the operator start sampling rounds and read their results through it. Its
routes are :data:`.routes.ROUTES` (the table in ``docs/architecture.md`` is generated from
them); the answers are the contract in :mod:`sparkglass.runtime.contract.sample_result`.
Every route but ``/healthz`` needs ``Authorization: Bearer <token>``; it listens on the Pod
network in Kubernetes, so it is hardened (:class:`ControlEndpoint`). Conf, read when it
starts (:meth:`ControlSettings.from_spark`): ``spark.sparkglass.control.host``,
``spark.sparkglass.control.port``, ``spark.sparkglass.control.token``,
``spark.sparkglass.control.enabled``, ``spark.sparkglass.control.max-body-bytes``,
``spark.sparkglass.control.connection-timeout``, ``spark.sparkglass.control.max-connections``,
``spark.sparkglass.control.max-connections-per-address``,
``spark.sparkglass.control.tls.cert-file``, ``spark.sparkglass.control.tls.key-file``; once
started, its URL is in ``spark.sparkglass.control.url``.
"""

from __future__ import annotations

import hmac
import inspect
import io
import json
import logging
import os
import re
import secrets
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.round_request import RoundRequest, round_request
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.contract.sampling_settings import SamplingSettingsError, parse_duration_ms
from sparkglass.runtime.control import routes
from sparkglass.runtime.sampling.compile_gate import CompileBusyError
from sparkglass.runtime.sampling.rounds import (
    RoundCoordinator,
    UnknownRoundError,
    UnknownVertexError,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

CONF_PREFIX = "spark.sparkglass.control."
TOKEN_ENV = "SPARKGLASS_CONTROL_TOKEN"

#: Defaults and allowed ranges of the hardening confs (module docstring).
DEFAULT_MAX_BODY_BYTES = 1024
MAX_BODY_BYTES_LIMIT = 65536
DEFAULT_CONNECTION_TIMEOUT_MS = 10_000
CONNECTION_TIMEOUT_RANGE_MS = (1_000, 600_000)
DEFAULT_MAX_CONNECTIONS = 64
MAX_CONNECTIONS_LIMIT = 1024
MAX_CONNECTIONS_PER_ADDRESS_LIMIT = 1024

_DIGITS = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class ControlSettings:
    """Where the endpoint listens, the token it requires and its limits.

    ``max_body_bytes``: 0–65536; ``connection_timeout_s``: seconds, 1–600;
    ``max_connections``: 1–1024; ``max_connections_per_address``: 1–1024, ``None`` for half
    of ``max_connections`` (at least 1); ``tls_cert_file``/``tls_key_file``: PEM paths,
    both or neither (HTTPS when set). Raises :class:`SamplingSettingsError` naming the conf
    key for a value out of range or a half-configured TLS pair.
    """

    host: str = "127.0.0.1"
    port: int = 0
    token: str = ""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_MS / 1000
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    max_connections_per_address: int | None = None

    def __post_init__(self) -> None:
        _check_range(CONF_PREFIX + "port", self.port, 0, 65535)
        _check_range(CONF_PREFIX + "max-body-bytes", self.max_body_bytes, 0, MAX_BODY_BYTES_LIMIT)
        _check_range(
            CONF_PREFIX + "max-connections", self.max_connections, 1, MAX_CONNECTIONS_LIMIT
        )
        if self.max_connections_per_address is not None:
            _check_range(
                CONF_PREFIX + "max-connections-per-address",
                self.max_connections_per_address,
                1,
                MAX_CONNECTIONS_PER_ADDRESS_LIMIT,
            )
        low, high = (ms / 1000 for ms in CONNECTION_TIMEOUT_RANGE_MS)
        if not low <= self.connection_timeout_s <= high:
            key = CONF_PREFIX + "connection-timeout"
            raise SamplingSettingsError(
                f"{key}={self.connection_timeout_s}s is out of range: allowed 1s–10m", field=key
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            pair = ("cert-file", "key-file")
            given, missing = pair if self.tls_cert_file else pair[::-1]
            key = CONF_PREFIX + "tls." + missing
            raise SamplingSettingsError(
                f"{key} is required when {CONF_PREFIX}tls.{given} is set (HTTPS needs both)",
                field=key,
            )

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        return bool(self.tls_cert_file)

    @property
    def per_address_limit(self) -> int:
        """Connections one peer address may hold at once: ``max_connections_per_address``,
        by default half of ``max_connections`` (so that one client, however many
        connections it opens, leaves the other half to the operator and the service)."""
        if self.max_connections_per_address is not None:
            return self.max_connections_per_address
        return max(1, self.max_connections // 2)

    @classmethod
    def from_spark(cls, spark: Any) -> ControlSettings:
        """Read ``spark.sparkglass.control.*``:

        ===============================  =========================================================
        key                              (each under ``spark.sparkglass.control.``)
        ===============================  =========================================================
        ``host``                         bind address, default ``127.0.0.1``
        ``port``                         0–65535, default ``0`` (any free port)
        ``token``                        bearer token; else ``$SPARKGLASS_CONTROL_TOKEN``; else a
                                         random one (:attr:`ControlEndpoint.token`)
        ``enabled``                      serve even with sampling off (answers ``DISABLED``)
        ``max-body-bytes``               0–65536, default ``1024``: larger request bodies get 413
                                         unread
        ``connection-timeout``           1s–10min, default ``10s``: the deadline of the TLS
                                         handshake, of each request's head and body, and of an
                                         idle keep-alive connection
        ``max-connections``              1–1024, default ``64``: connections served at once; more
                                         are closed on accept
        ``max-connections-per-address``  1–1024, default half of ``max-connections``: connections
                                         one peer address may hold; more from it are closed on
                                         accept
        ``tls.cert-file``                PEM certificate (chain) to serve HTTPS with; default none
                                         (plain HTTP); needs ``key-file``
        ``tls.key-file``                 PEM private key of ``cert-file``
        ===============================  =========================================================

        Raises :class:`SamplingSettingsError` naming the key and its allowed range for a
        malformed or out-of-range value (port outside 0–65535, ...).
        """

        def conf(name: str) -> str | None:
            value = spark.conf.get(CONF_PREFIX + name, None)
            return str(value) if value not in (None, "") else None

        host = conf("host") or "127.0.0.1"
        token = conf("token") or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)
        timeout = conf("connection-timeout")
        return cls(
            host=host,
            port=_int_conf("port", conf("port"), 0, "0–65535"),
            token=token,
            max_body_bytes=_int_conf(
                "max-body-bytes",
                conf("max-body-bytes"),
                DEFAULT_MAX_BODY_BYTES,
                f"0–{MAX_BODY_BYTES_LIMIT}",
            ),
            connection_timeout_s=(
                parse_duration_ms(timeout, field=CONF_PREFIX + "connection-timeout") / 1000
                if timeout
                else DEFAULT_CONNECTION_TIMEOUT_MS / 1000
            ),
            max_connections=_int_conf(
                "max-connections",
                conf("max-connections"),
                DEFAULT_MAX_CONNECTIONS,
                f"1–{MAX_CONNECTIONS_LIMIT}",
            ),
            tls_cert_file=conf("tls.cert-file"),
            tls_key_file=conf("tls.key-file"),
            max_connections_per_address=(
                _int_conf(
                    "max-connections-per-address",
                    per_address,
                    0,
                    f"1–{MAX_CONNECTIONS_PER_ADDRESS_LIMIT}",
                )
                if (per_address := conf("max-connections-per-address")) is not None
                else None
            ),
        )


def _int_conf(name: str, raw: str | None, default: int, allowed: str) -> int:
    if raw is None:
        return default
    key = CONF_PREFIX + name
    try:
        return int(raw)
    except ValueError:
        raise SamplingSettingsError(
            f"{key}: expected an integer in {allowed}, got {raw!r}", field=key
        ) from None


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise SamplingSettingsError(
            f"{key}={value} is out of range: allowed {low}–{high}", field=key
        )


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2+) for ``cert_file``/``key_file`` (PEM paths).

    Raises :class:`SamplingSettingsError` naming ``...control.tls.cert-file`` when the files
    cannot be read or the key does not match the certificate.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        key = CONF_PREFIX + "tls.cert-file"
        raise SamplingSettingsError(
            f"{key}={cert_file!r} with {CONF_PREFIX}tls.key-file={key_file!r}: "
            f"cannot load the certificate and key: {exc}",
            field=key,
        ) from None
    return context


_TLS_HANDSHAKE = b"\x16"  # the content type of a TLS handshake record, a ClientHello's 1st byte
_PLAIN_HTTP_BODY = json.dumps(
    {
        "error": "this control endpoint serves HTTPS only: use an https:// URL and verify "
        "the driver's certificate",
        "field": "scheme",
    }
).encode()
_PLAIN_HTTP_TO_TLS = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_PLAIN_HTTP_BODY)}\r\n\r\n".encode()
    + _PLAIN_HTTP_BODY
)


class _DeadlineReader(io.RawIOBase):
    """The reading side of a connection, each read bounded by what is left of the current
    request's deadline.

    A socket timeout bounds one read: a client sending one byte every ``timeout - 1``
    seconds would never trip it and would hold its connection (and thread) forever. Here
    every read waits at most until :attr:`deadline`, so the request as a whole has to arrive
    in time. ``deadline`` ``None`` means the plain socket timeout (between requests the
    handler sets a new deadline; while it answers, there is none).
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        #: ``time.monotonic()`` by which the current request must have been read.
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive within connection-timeout")
            self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _ControlServer(ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` at once and at most
    ``per_address_limit`` from one peer address, each request read under a deadline; TLS is
    negotiated in the connection's thread so that a client that never completes a handshake
    blocks neither the accept loop nor other clients."""

    daemon_threads = True
    # socketserver's default backlog of 5 makes the kernel drop SYNs under a burst of
    # connects, and the client then waits seconds for a retransmit: accept them and let the
    # cap decide.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        settings: ControlSettings,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        super().__init__(address, handler)
        self.connection_timeout_s = settings.connection_timeout_s
        self.ssl_context = ssl_context
        self._max_connections = settings.max_connections
        self._per_address = settings.per_address_limit
        #: Connections open in all, and per peer address; changed under ``_lock`` only (the
        #: accept loop takes, connection threads give back).
        self._open = 0
        self._by_address: dict[str, int] = {}
        self._lock = threading.Lock()
        self.refused_connections = 0

    @staticmethod
    def _address(client_address: Any) -> str:
        return str(client_address[0]) if isinstance(client_address, tuple) else ""

    def _take(self, address: str) -> str | None:
        """Count a new connection from ``address``; why not, when a cap is reached."""
        with self._lock:
            held = self._by_address.get(address, 0)
            if self._open >= self._max_connections:
                return f"{self._max_connections} connections open (max-connections)"
            if held >= self._per_address:
                return f"{held} connections open from one address (max-connections-per-address)"
            self._open += 1
            self._by_address[address] = held + 1
            return None

    def _give_back(self, address: str) -> None:
        with self._lock:
            self._open -= 1
            held = self._by_address.get(address, 0) - 1
            if held > 0:
                self._by_address[address] = held
            else:
                self._by_address.pop(address, None)

    def process_request(self, request: Any, client_address: Any) -> None:
        address = self._address(client_address)
        refused = self._take(address)
        if refused is not None:
            # Closing at once, rather than queueing, keeps a flood of idle connections from
            # holding memory or threads; legitimate clients (operator, service) retry.
            self.refused_connections += 1
            if self.refused_connections == 1 or self.refused_connections % 1000 == 0:
                log.warning(
                    "control endpoint: %s; closed %d new connections so far",
                    refused,
                    self.refused_connections,
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give_back(address)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give_back(self._address(client_address))

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.connection_timeout_s)
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        first = request.recv(1, socket.MSG_PEEK)
        if not first:
            return  # closed before saying anything
        if first != _TLS_HANDSHAKE:
            # A plain-HTTP client would otherwise see only a dropped connection; tell it why.
            request.sendall(_PLAIN_HTTP_TO_TLS)
            return
        tls = self.ssl_context.wrap_socket(request, server_side=True)
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Failed handshakes, resets and timeouts are the clients' doing (or an attack's);
        # they must not fill the driver's log with tracebacks.
        exc = sys.exc_info()[1]
        if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):
            log.debug("control endpoint: connection from %s: %s", client_address, exc)
        else:
            log.exception("control endpoint: connection from %s failed", client_address)


class ControlEndpoint:
    """The HTTP(S) server serving one :class:`RoundCoordinator` (a daemon thread).

    The token is compared in constant time; a missing or wrong one gets 401. Bad parameters
    get 400 with ``{"error": ..., "field": ...}`` naming the field and its allowed range;
    unknown vertices and rounds 404 with the known names. Hardening (the endpoint listens on
    the Pod network in Kubernetes):

    * The token is checked on the request line and headers alone, before any body byte is
      read; a refused request's body is never read (the connection is closed instead).
    * No route takes a body: a ``Content-Length`` above ``max-body-bytes`` gets 413, a
      malformed one (``-1``, not a number, several that differ) 400, ``Transfer-Encoding``
      411; each closes the connection unread.
    * Every request has a deadline: its whole head and body must arrive within
      ``connection-timeout`` of the moment the endpoint starts waiting for it (each read waits
      only for what is left), so a client sending a byte now and then cannot hold a
      connection; an idle keep-alive connection is closed after the same time. At most
      ``max-connections`` are served at once (one thread each), and at most
      ``max-connections-per-address`` from one peer address, so one client cannot take every
      slot from the operator; further ones are closed as soon as they are accepted.
    * With ``tls.cert-file`` and ``tls.key-file`` it serves HTTPS only (TLS 1.2+; the
      handshake runs in the connection's thread, within ``connection-timeout`` as a whole).
    """

    def __init__(self, coordinator: RoundCoordinator, settings: ControlSettings) -> None:
        if not settings.token:
            raise ValueError("the control endpoint needs a non-empty token")
        self.coordinator = coordinator
        self.settings = settings
        self._server: _ControlServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def token(self) -> str:
        """The bearer token clients must send."""
        return self.settings.token

    @property
    def port(self) -> int:
        """The bound port (the real one when configured as 0)."""
        assert self._server is not None, "endpoint not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port`` (``https://`` with TLS) of the running endpoint."""
        host = self.settings.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        scheme = "https" if self.settings.tls else "http"
        return f"{scheme}://{shown}:{self.port}"

    @property
    def refused_connections(self) -> int:
        """Connections closed on accept because ``max_connections`` were open."""
        return self._server.refused_connections if self._server is not None else 0

    def start(self) -> None:
        """Bind and serve in a daemon thread.

        Raises ``OSError`` if the port is taken, :class:`SamplingSettingsError` if the TLS
        certificate or key cannot be loaded.
        """
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        context = None
        if self.settings.tls_cert_file and self.settings.tls_key_file:
            context = server_ssl_context(self.settings.tls_cert_file, self.settings.tls_key_file)
        self._server = _ControlServer(
            (self.settings.host, self.settings.port), Handler, self.settings, context
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sparkglass-control", daemon=True
        )
        self._thread.start()
        log.info("sparkglass control endpoint on %s", self.url)

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class _BadRequest(Exception):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def _round_request(query: dict[str, list[str]]) -> RoundRequest | None:
    """The optional ``kind``, ``filter``, ``columns`` and ``expectation`` parameters."""
    names = ("kind", "filter", "columns", "expectation")
    if not any(query.get(n) for n in names):
        return None
    values = {n: query[n][-1] for n in names if query.get(n)}
    return round_request(**values)


def _bool_param(query: dict[str, list[str]], name: str) -> bool:
    """``true``/``1`` or ``false``/``0`` (absent: false)."""
    values = query.get(name)
    if not values:
        return False
    value = values[-1].strip().lower()
    if value not in ("true", "1", "false", "0"):
        raise _BadRequest(f"{name}: expected true or false, got {values[-1]!r}", name)
    return value in ("true", "1")


def _int_param(query: dict[str, list[str]], name: str, allowed: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    try:
        return int(values[-1])
    except ValueError:
        raise _BadRequest(
            f"{name}: expected an integer in {allowed}, got {values[-1]!r}", name
        ) from None


class _Handler(BaseHTTPRequestHandler):
    owner: ControlEndpoint
    server_version = "sparkglass-control"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("control: " + format, *args)

    # ------------------------------------------------------------- deadlines
    def setup(self) -> None:
        super().setup()
        # Reads go through the deadline reader; writes keep the plain socket timeout.
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        # From here the request line, the headers and the body must all arrive within the
        # timeout (waiting for a keep-alive connection's next request included).
        self._reader.deadline = time.monotonic() + self._timeout_s()
        super().handle_one_request()

    def _timeout_s(self) -> float:
        return float(getattr(self.server, "connection_timeout_s", 10.0))

    def _answering(self) -> None:
        """The request is read (or refused): the reads' shrinking timeouts must not cut the
        answer short, so the socket gets the whole timeout back for writing."""
        self._reader.deadline = None
        self.connection.settimeout(self._timeout_s())

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self._answering()
        super().send_error(code, message, explain)

    # ---------------------------------------------------------------- plumbing
    def _send(
        self, status: int, body: Any, headers: dict[str, str] | None = None, *, close: bool = False
    ) -> None:
        data = json.dumps(body).encode()
        self._answering()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if close:
            # The request's body (if any) stays unread: the connection cannot carry another
            # request, and closing it is what stops the client from sending the rest.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _has_body(self) -> bool:
        return "Transfer-Encoding" in self.headers or self.headers.get(
            "Content-Length", "0"
        ).strip() not in ("", "0")

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        expected = self.owner.token.encode()
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)
        if not ok:
            self._send(
                HTTPStatus.UNAUTHORIZED,
                {"error": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="sparkglass"'},
                close=self._has_body(),
            )
        return ok

    def _body_accepted(self) -> bool:
        """Drain a body within ``max-body-bytes`` (no route uses one); else answer 400, 411
        or 413 naming the header and close without reading it."""
        limit = self.owner.settings.max_body_bytes
        if "Transfer-Encoding" in self.headers:
            self._send(
                HTTPStatus.LENGTH_REQUIRED,
                {
                    "error": "Transfer-Encoding is not accepted: send Content-Length "
                    f"(0–{limit} bytes; no route takes a body)",
                    "field": "Transfer-Encoding",
                },
                close=True,
            )
            return False
        values = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not values:
            return True
        raw = values.pop() if len(values) == 1 else None
        if raw is None or not _DIGITS.match(raw):
            shown = sorted(self.headers.get_all("Content-Length") or [])
            self._send(
                HTTPStatus.BAD_REQUEST,
                {
                    "error": f"Content-Length: expected one integer in 0–{limit}, got {shown}",
                    "field": "Content-Length",
                },
                close=True,
            )
            return False
        length = int(raw)
        if length > limit:
            self._send(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                {
                    "error": f"Content-Length={length} is out of range: allowed 0–{limit} "
                    "bytes (no route takes a body)",
                    "field": "Content-Length",
                },
                close=True,
            )
            return False
        if length:
            self.rfile.read(length)  # unused; drained to keep the connection usable
        return True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query)
        if (method, path) == ("GET", "/healthz"):
            if self._body_accepted():
                self._send(HTTPStatus.OK, {"status": "ok"})
            return
        # Token first, on the headers alone: an unauthenticated client never gets a body read.
        if not self._authorized() or not self._body_accepted():
            return
        try:
            status, body = self._route(method, path, query)
        except _BadRequest as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"error": str(exc), "field": exc.field}
        except InvalidParameterError as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"error": str(exc), "field": exc.field}
        except UnknownVertexError as exc:
            status, body = HTTPStatus.NOT_FOUND, {"error": str(exc), "vertices": exc.known}
        except UnknownRoundError as exc:
            status, body = HTTPStatus.NOT_FOUND, {"error": str(exc)}
        except CompileBusyError as exc:
            status, body = HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)}
        except Exception as exc:  # answer 500 and keep serving
            log.exception("control endpoint: %s %s failed", method, self.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            body = DataSampleResult(
                status=SampleStatus.FAILED, error_code=ErrorCode.INTERNAL_ERROR
            ).to_json_dict() | {"error": str(exc)}
        self._send(status, body)

    # ------------------------------------------------------------------ routes
    def _route(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        route, params, methods = routes.resolve(method, path)
        if route is None:
            if methods:
                allowed = " or ".join(methods)
                return HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"use {allowed} on {path}"}
            return HTTPStatus.NOT_FOUND, {"error": f"no route {path}"}
        c = self.owner.coordinator
        name = route.name
        if name in ("pipeline", "progress"):
            produce = c.describe if name == "pipeline" else c.progress
            if produce is None:
                return HTTPStatus.NOT_FOUND, {"error": "no pipeline attached"}
            if name == "progress" and _bool_param(query, "history"):
                # Pipeline.metrics and DiscoveredPipeline.metrics keep the last minutes.
                keeps: Any = produce
                if "history" in inspect.signature(keeps).parameters:
                    return HTTPStatus.OK, keeps(history=True).to_json_dict()
            return HTTPStatus.OK, produce().to_json_dict()
        if name == "vertices":
            return HTTPStatus.OK, {"vertices": c.vertices()}
        if name == "expectations":
            counts = c.expectation_counts() if c.expectation_counts is not None else []
            return HTTPStatus.OK, {"expectations": [e.to_json_dict() for e in counts]}
        if name == "settings":
            return HTTPStatus.OK, c.settings().model_dump(mode="json", by_alias=True)
        window = query.get("samplingWindow")
        if name in ("open_round", "round_check") and window:
            window_ms: int | None = parse_duration_ms(window[-1], field="samplingWindow")
        else:
            window_ms = None
        if name == "open_round":
            key = query.get("idempotencyKey")
            result = c.start_round(
                params["vertex"],
                window_ms,
                _round_request(query),
                idempotency_key=key[-1] if key else None,
            )
            if result.status is SampleStatus.PENDING:
                return HTTPStatus.ACCEPTED, result.to_json_dict()
            if result.error_code is ErrorCode.TOO_MANY_CONCURRENT_ROUNDS:
                return HTTPStatus.TOO_MANY_REQUESTS, result.to_json_dict()
            return HTTPStatus.OK, result.to_json_dict()
        if name == "round_check":
            accepted = c.check_round(params["vertex"], window_ms, _round_request(query))
            return HTTPStatus.OK, {"accepted": accepted}
        subtask = _int_param(query, "subtaskIndex", "0 or more")
        max_records = _int_param(query, "maxRecords", "1–5000")
        if name == "round":
            return HTTPStatus.OK, c.round_result(
                params["roundId"], subtask, max_records
            ).to_json_dict()
        if name == "data_sample":
            return HTTPStatus.OK, c.data_sample(
                params["vertex"], subtask, max_records, _round_request(query)
            ).to_json_dict()
        raise AssertionError(f"route {name} has no handler")  # /healthz is answered above

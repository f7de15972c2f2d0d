"""The driver control endpoint: a small HTTP server in the Spark driver.

The service and the operator start sampling rounds and read their results through it; the
routes are the contract in :mod:`sparkglass.runtime.contract.sample_result` (plus ``GET
/api/v1/vertices``, the vertex names). Every route but ``/healthz`` needs
``Authorization: Bearer <token>`` (compared in constant time); a missing or wrong token gets
401. Bad parameters get 400 with ``{"error": ..., "field": ...}`` naming the field and its
allowed range; unknown vertices and rounds 404 with the known names.

Conf (read when the endpoint starts):

======================================  ==============================================
``spark.sparkglass.control.host``       bind address, default ``127.0.0.1``
``spark.sparkglass.control.port``       0–65535, default ``0`` (any free port)
``spark.sparkglass.control.token``      bearer token; else ``$SPARKGLASS_CONTROL_TOKEN``;
                                        else a random one (see :attr:`ControlEndpoint.token`)
``spark.sparkglass.control.enabled``    serve even with sampling off (answers ``DISABLED``)
======================================  ==============================================

Once started, the endpoint's URL is also in the runtime conf ``spark.sparkglass.control.url``.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.contract.sampling_settings import SamplingSettingsError, parse_duration_ms
from sparkglass.runtime.sampling.rounds import (
    RoundCoordinator,
    UnknownRoundError,
    UnknownVertexError,
)

log = logging.getLogger(__name__)

CONF_PREFIX = "spark.sparkglass.control."
TOKEN_ENV = "SPARKGLASS_CONTROL_TOKEN"

_ROUNDS = re.compile(r"^/api/v1/vertices/([^/]+)/rounds$")
_DATA_SAMPLE = re.compile(r"^/api/v1/vertices/([^/]+)/data-sample$")
_ROUND = re.compile(r"^/api/v1/rounds/([^/]+)$")


@dataclass(frozen=True)
class ControlSettings:
    """Where the endpoint listens and the token it requires."""

    host: str = "127.0.0.1"
    port: int = 0
    token: str = ""

    @classmethod
    def from_spark(cls, spark: Any) -> ControlSettings:
        """Read ``spark.sparkglass.control.*`` (see module docstring).

        Raises :class:`SamplingSettingsError` for a port outside 0–65535.
        """
        host = spark.conf.get(CONF_PREFIX + "host", None) or "127.0.0.1"
        raw_port = spark.conf.get(CONF_PREFIX + "port", None) or "0"
        key = CONF_PREFIX + "port"
        try:
            port = int(raw_port)
        except ValueError:
            raise SamplingSettingsError(
                f"{key}: expected an integer in 0–65535, got {raw_port!r}", field=key
            ) from None
        if not 0 <= port <= 65535:
            raise SamplingSettingsError(f"{key}={port} is out of range: allowed 0–65535", field=key)
        token = (
            spark.conf.get(CONF_PREFIX + "token", None)
            or os.environ.get(TOKEN_ENV)
            or secrets.token_urlsafe(32)
        )
        return cls(host=host, port=port, token=token)


class ControlEndpoint:
    """The HTTP server serving one :class:`RoundCoordinator` (a daemon thread)."""

    def __init__(self, coordinator: RoundCoordinator, settings: ControlSettings) -> None:
        if not settings.token:
            raise ValueError("the control endpoint needs a non-empty token")
        self.coordinator = coordinator
        self.settings = settings
        self._server: ThreadingHTTPServer | None = None
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
        """``http://host:port`` of the running endpoint."""
        host = self.settings.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{shown}:{self.port}"

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises ``OSError`` if the port is taken."""
        endpoint = self

        class Handler(_Handler):
            owner = endpoint

        self._server = ThreadingHTTPServer((self.settings.host, self.settings.port), Handler)
        self._server.daemon_threads = True
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

    # ---------------------------------------------------------------- plumbing
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

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
            )
        return ok

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)  # body unused; drain it to keep the connection sane
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query)
        if method == "GET" and path == "/healthz":
            self._send(HTTPStatus.OK, {"status": "ok"})
            return
        if not self._authorized():
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
        except Exception as exc:  # answer 500 and keep serving
            log.exception("control endpoint: %s %s failed", method, self.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            body = DataSampleResult(
                status=SampleStatus.FAILED, error_code=ErrorCode.INTERNAL_ERROR
            ).to_json_dict() | {"error": str(exc)}
        self._send(status, body)

    # ------------------------------------------------------------------ routes
    def _route(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        c = self.owner.coordinator
        if method == "GET" and path == "/api/v1/pipeline":
            if c.describe is None:
                return HTTPStatus.NOT_FOUND, {"error": "no pipeline attached"}
            return HTTPStatus.OK, c.describe().to_json_dict()
        if method == "GET" and path == "/api/v1/vertices":
            return HTTPStatus.OK, {"vertices": c.vertices()}
        if method == "GET" and path == "/api/v1/settings":
            return HTTPStatus.OK, c.settings().model_dump(mode="json", by_alias=True)
        if m := _ROUNDS.match(path):
            if method != "POST":
                return HTTPStatus.METHOD_NOT_ALLOWED, {"error": "use POST to start a round"}
            window = query.get("samplingWindow")
            window_ms = parse_duration_ms(window[-1], field="samplingWindow") if window else None
            result = c.start_round(unquote(m.group(1)), window_ms)
            if result.status is SampleStatus.PENDING:
                return HTTPStatus.ACCEPTED, result.to_json_dict()
            if result.error_code is ErrorCode.TOO_MANY_CONCURRENT_ROUNDS:
                return HTTPStatus.TOO_MANY_REQUESTS, result.to_json_dict()
            return HTTPStatus.OK, result.to_json_dict()
        if method != "GET":
            return HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{method} not allowed on {path}"}
        subtask = _int_param(query, "subtaskIndex", "0 or more")
        max_records = _int_param(query, "maxRecords", "1–5000")
        if m := _ROUND.match(path):
            return HTTPStatus.OK, c.round_result(
                unquote(m.group(1)), subtask, max_records
            ).to_json_dict()
        if m := _DATA_SAMPLE.match(path):
            return HTTPStatus.OK, c.data_sample(
                unquote(m.group(1)), subtask, max_records
            ).to_json_dict()
        return HTTPStatus.NOT_FOUND, {"error": f"no route {path}"}

"""Prometheus metrics served at ``/metrics``.

Each service instance owns its own :class:`~prometheus_client.CollectorRegistry` so tests can
create many apps in one process.

- ``sparkglass_rounds_total{status}``: rounds that ended, by final status.
- ``sparkglass_rounds_started_total``: rounds this replica started.
- ``sparkglass_round_duration_seconds``: round latency, start to end.
- ``sparkglass_http_requests_total{method,route,code}`` and
  ``sparkglass_http_request_duration_seconds{method,route}``: per route template (not per
  URL, which would create a series per application and vertex).

Every label value comes from a fixed set, so no request can add series: methods outside
:data:`KNOWN_METHODS` count as ``OTHER``, routes are templates (``unmatched`` when none
matched), and codes outside :data:`KNOWN_CODES` count as their class (``2xx`` ... ``5xx``).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


class ServiceMetrics:
    """The service's instruments in their own registry."""

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

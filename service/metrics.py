"""Prometheus metrics served at ``/metrics``.

Each service instance owns its own :class:`~prometheus_client.CollectorRegistry` so tests can
create many apps in one process.

- ``sparkglass_rounds_total{status}``: rounds that ended, by final status.
- ``sparkglass_rounds_started_total``: rounds this replica started.
- ``sparkglass_round_duration_seconds``: round latency, start to end.
- ``sparkglass_http_requests_total{method,route,code}`` and
  ``sparkglass_http_request_duration_seconds{method,route}``: per route template (not per
  URL, which would create a series per application and vertex).
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


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
                method = scope.get("method", "GET")
                self.requests.labels(method, template, str(code)).inc()
                self.request_duration.labels(method, template).observe(
                    time.perf_counter() - start
                )

        return middleware

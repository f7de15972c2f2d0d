"""Pure ASGI middlewares guarding every request before any route runs.

- :class:`BodyLimitMiddleware`: a request body larger than ``max_body_bytes`` is refused with
  413: at once when ``Content-Length`` says so (nothing read), or as soon as a chunked body
  passes the limit (reading stops there).
- :class:`AuthFailureLimiter`: a client address that collected too many 401s under
  ``/api/`` is answered 429 with ``Retry-After`` (token bucket per address), so garbage
  tokens cannot each cost a TokenReview.
- :class:`SecurityHeadersMiddleware`: CSP, ``X-Frame-Options``, ``nosniff``,
  ``Referrer-Policy`` on every response and ``Cache-Control: no-store`` on API responses
  (they carry sampled records and authorization-dependent answers).

They are pure ASGI (not ``BaseHTTPMiddleware``) so that they see the raw ``receive`` and can
answer before the application reads anything.
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The page loads only its own files (``/ui/``: index.html, app.js, style.css) and calls the
#: API on the same origin; nothing inline, nothing from elsewhere, never framed.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
#: FastAPI's Swagger UI (only with ``docs_enabled``) loads its bundle from jsDelivr and starts
#: it with an inline script.
DOCS_CSP = (
    "default-src 'none'; script-src 'self' https://cdn.jsdelivr.net 'unsafe-inline'; "
    "style-src 'self' https://cdn.jsdelivr.net; img-src 'self' data: https://fastapi.tiangolo.com; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DOCS_PATHS = frozenset({"/docs", "/docs/oauth2-redirect"})

_COMMON_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


async def _send_json(
    send: Send, status: int, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _BodyTooLargeError(Exception):
    pass


class BodyLimitMiddleware:
    """413 for request bodies over ``max_bytes`` (see the module docstring); 400 for a
    ``Content-Length`` that is not a non-negative integer."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self._app = app
        self._max = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        too_large = f"request body too large: max_body_bytes allows at most {self._max} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
                if length < 0:
                    await _send_json(send, 400, "Content-Length must be a non-negative integer")
                    return
                if length > self._max:
                    await _send_json(send, 413, too_large)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max:
                    raise _BodyTooLargeError
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self._app(scope, limited_receive, tracking_send)
        except _BodyTooLargeError:
            if not started:
                await _send_json(send, 413, too_large)
            # Else the response is under way; the server closes the connection as the rest
            # of the body is never read.


class AuthFailureLimiter:
    """Per client address: at most ``limit`` failed authentications (401 answers under
    ``/api/``) per ``window_s`` seconds, as a token bucket refilling ``limit / window_s``
    per second. A client with an empty bucket gets 429 with ``Retry-After`` (whole seconds)
    on every ``/api/`` request until one failure is refilled, so its requests reach no
    authenticator. At most ``max_clients`` addresses are tracked (least recently failing
    forgotten first), so the limiter itself is bounded.
    """

    def __init__(
        self, app: ASGIApp, limit: int, window_s: float, max_clients: int = 100_000
    ) -> None:
        self._app = app
        self._capacity = float(limit)
        self._rate = limit / window_s
        self._max_clients = max_clients
        #: address -> (tokens left, monotonic time of that count). Touched on the event loop
        #: only, so no lock.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, client: str, now: float) -> float:
        tokens, at = self._buckets.get(client, (self._capacity, now))
        return min(self._capacity, tokens + (now - at) * self._rate)

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or ``None`` when it may now."""
        if client not in self._buckets:
            return None
        tokens = self._tokens(client, time.monotonic())
        if tokens >= 1.0:
            return None
        return max(1, math.ceil((1.0 - tokens) / self._rate))

    def failed(self, client: str) -> None:
        """Take one failure from ``client``'s budget."""
        now = time.monotonic()
        tokens = self._tokens(client, now) - 1.0
        self._buckets[client] = (max(tokens, 0.0), now)
        self._buckets.move_to_end(client)
        while len(self._buckets) > self._max_clients:
            self._buckets.popitem(last=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            await self._app(scope, receive, send)
            return
        client = (scope.get("client") or ("unknown", 0))[0]
        wait = self.retry_after(client)
        if wait is not None:
            await _send_json(
                send,
                429,
                f"too many failed authentications from this address; retry in {wait} s",
                [(b"retry-after", str(wait).encode())],
            )
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.failed(client)
            await send(message)

        await self._app(scope, receive, counting_send)


class SecurityHeadersMiddleware:
    """Adds the security headers to every HTTP response (headers the route set win)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        extra: list[tuple[bytes, bytes]] = [
            (b"content-security-policy", (DOCS_CSP if path in DOCS_PATHS else PAGE_CSP).encode()),
            *_COMMON_HEADERS,
        ]
        if path.startswith("/api/"):
            extra.append((b"cache-control", b"no-store"))

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend((k, v) for k, v in extra if k not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, with_headers)

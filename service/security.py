"""Pure ASGI middlewares guarding every request before any route runs.

:class:`BodyLimitMiddleware` refuses request bodies over ``max_body_bytes`` (413);
:class:`AuthFailureLimiter` answers 429 to a client address (or one of its tokens) that
collected too many 401s, without refusing users who share its address;
:class:`SecurityHeadersMiddleware` adds CSP and the other security headers. They are pure
ASGI (not ``BaseHTTPMiddleware``) so that they see the raw ``receive`` and can answer before
the application reads anything (docs/security.md, "Limits on clients").
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .settings import IPNetwork

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


@dataclass(frozen=True)
class BodyLimit:
    """A limit other than ``max_body_bytes`` for the requests of ``method`` whose path
    matches ``path`` (a full match); ``setting`` names it in the 413's message."""

    method: str
    path: re.Pattern[str]
    max_bytes: int
    setting: str


class BodyLimitMiddleware:
    """413 for request bodies over ``max_bytes``, or over the first of ``routes`` that
    matches: at once when ``Content-Length`` says so (nothing read), or as soon as a chunked
    body passes the limit (reading stops there); 400 for a ``Content-Length`` that is not a
    non-negative integer."""

    def __init__(self, app: ASGIApp, max_bytes: int, routes: Sequence[BodyLimit] = ()) -> None:
        self._app = app
        self._max = max_bytes
        self._routes = tuple(routes)

    def _limit(self, scope: Scope) -> tuple[int, str]:
        for route in self._routes:
            if scope.get("method") == route.method and route.path.fullmatch(scope["path"]):
                return route.max_bytes, route.setting
        return self._max, "max_body_bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        limit, setting = self._limit(scope)
        too_large = f"request body too large: {setting} allows at most {limit} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = -1
                if length < 0:
                    await _send_json(send, 400, "Content-Length must be a non-negative integer")
                    return
                if length > limit:
                    await _send_json(send, 413, too_large)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
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


class _Buckets:
    """Token buckets by key: each holds at most ``capacity`` units and refills ``rate`` per
    second; at most ``max_keys`` keys are kept (the least recently used forgotten first, which
    gives a forgotten key a full bucket: the bound on memory wins over the bound on tries)."""

    def __init__(self, capacity: float, rate: float, max_keys: int) -> None:
        self.capacity = capacity
        self._rate = rate
        self._max_keys = max_keys
        #: key -> (units left, monotonic time of that count). Event loop only, so no lock.
        self._data: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()

    def _units(self, key: Hashable, now: float) -> float:
        units, at = self._data.get(key, (self.capacity, now))
        return min(self.capacity, units + (now - at) * self._rate)

    def wait_s(self, key: Hashable) -> int | None:
        """Whole seconds until ``key`` has a unit, or ``None`` when it has one now."""
        if key not in self._data:
            return None
        units = self._units(key, time.monotonic())
        if units >= 1.0:
            return None
        return max(1, math.ceil((1.0 - units) / self._rate))

    def add(self, key: Hashable, units: float) -> None:
        """Add ``units`` (negative: take them) to ``key``'s bucket, within 0..capacity."""
        now = time.monotonic()
        left = min(self.capacity, max(0.0, self._units(key, now) + units))
        self._data[key] = (left, now)
        self._data.move_to_end(key)
        while len(self._data) > self._max_keys:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class _KnownTokens:
    """SHA-256 digests of tokens that authenticated, each for ``ttl_s`` after its last
    success; at most ``max_tokens`` (least recently successful forgotten first)."""

    def __init__(self, ttl_s: float, max_tokens: int) -> None:
        self._ttl_s = ttl_s
        self._max = max_tokens
        self._until: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, digest: str) -> bool:
        until = self._until.get(digest)
        if until is None:
            return False
        if until < time.monotonic():
            del self._until[digest]
            return False
        return True

    def remember(self, digest: str) -> None:
        if self._ttl_s <= 0:
            return
        self._until[digest] = time.monotonic() + self._ttl_s
        self._until.move_to_end(digest)
        while len(self._until) > self._max:
            self._until.popitem(last=False)

    def forget(self, digest: str) -> None:
        self._until.pop(digest, None)

    def __len__(self) -> int:
        return len(self._until)


@dataclass
class _Checking:
    """Requests of one (address, unknown token) being answered now, and whether they hold
    a unit of the address's budget (held while the first of them is checked)."""

    requests: int = 0
    holds_unit: bool = False


#: Answers that prove the request's token authenticated: every ``/api/`` route
#: authenticates before it answers 2xx/3xx, and 403 means "authenticated, not allowed"
#: (``tests/security/test_service_auth_limiter_shared_address.py`` checks that every
#: ``/api/`` route answers a bad token 401). 404, 405, 422, 5xx prove nothing: they may come
#: before authentication.
def _authenticated(status: int) -> bool:
    return 200 <= status < 400 or status == 403


def bearer_digest(scope: Scope) -> str:
    """SHA-256 (hex) of the request's bearer token, ``""`` without one (parsed as
    ``HTTPBearer`` does: scheme ``Bearer`` in any case, the rest is the token)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:
                return hashlib.sha256(token.encode("latin-1")).hexdigest()
            return ""
    return ""


def client_address(scope: Scope, trusted: Sequence[IPNetwork]) -> str:
    """The address the request is counted under: the peer's, or, when the peer is one of
    the ``trusted`` proxies, the rightmost ``X-Forwarded-For`` entry that is not a trusted
    proxy itself (entries to its left were written by the client and prove nothing)."""
    peer = str((scope.get("client") or ("unknown", 0))[0])
    if not trusted or not _is_trusted(peer, trusted):
        return peer
    hops: list[str] = []
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-for":
            hops.extend(h.strip() for h in value.decode("latin-1").split(","))
    for hop in reversed(hops):
        if not hop:
            continue
        if not _is_trusted(hop, trusted):
            return hop[:64]
    return peer


def _is_trusted(address: str, trusted: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


class AuthFailureLimiter:
    """Bounds failed authentications (401 answers under ``/api/``) without refusing users
    who share a client address with the one failing.

    * A request whose bearer token authenticated in the last ``known_s`` seconds (an answer
      in 2xx/3xx or 403) is never refused here: it goes to authentication as always, and a
      401 forgets the token at once. Tokens are remembered by their SHA-256 only.
    * Other requests are refused with 429 and ``Retry-After`` (whole seconds) when their
      (address, token) pair has had ``token_limit`` failures in ``window_s`` seconds, or when
      their address has had ``limit`` failures of any tokens: token buckets refilling
      ``limit / window_s`` per second. So a client retrying one bad token is refused alone,
      and an address sending new garbage tokens gets only ``limit`` of them checked (in
      Kubernetes auth mode each costs a TokenReview).
    * A request with an unknown token holds one unit of its address's budget while it is
      answered (requests with the same token share it), and gives it back unless it is
      answered 401: a burst of concurrent garbage cannot get more than ``limit`` checked.
    * The address is the peer's, or for requests from ``trusted_proxies`` the client's in
      ``X-Forwarded-For`` (:func:`client_address`).

    What it cannot do: a valid token it has not seen authenticate, sent from an address that
    has used up its budget, is refused like garbage until the budget refills (telling the
    two apart is the check the budget bounds). Memory is bounded: at most ``max_clients``
    addresses, (address, token) pairs and known tokens each.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        window_s: float,
        max_clients: int = 100_000,
        *,
        token_limit: int | None = None,
        known_s: float = 0.0,
        trusted_proxies: Sequence[IPNetwork] = (),
    ) -> None:
        self._app = app
        per_token = limit if token_limit is None else token_limit
        self._addresses = _Buckets(float(limit), limit / window_s, max_clients)
        self._pairs = _Buckets(float(per_token), per_token / window_s, max_clients)
        self._known = _KnownTokens(known_s, max_clients)
        self._trusted = tuple(trusted_proxies)
        #: (address, digest) -> requests with that unknown token being answered.
        self._checking: dict[tuple[str, str], _Checking] = {}

    def retry_after(self, client: str, digest: str = "") -> int | None:
        """Seconds until ``client`` may try ``digest`` (a token's SHA-256, ``""`` for none)
        again, or ``None`` when it may now."""
        if digest and digest in self._known:
            return None
        pair = self._pairs.wait_s((client, digest))
        if pair is not None:
            return pair
        if (client, digest) in self._checking:
            return None  # the same token is being checked: it shares that unit
        return self._addresses.wait_s(client)

    def failed(self, client: str, digest: str = "") -> None:
        """Count one failure of ``digest`` from ``client`` (both budgets)."""
        self._known.forget(digest)
        self._pairs.add((client, digest), -1.0)
        self._addresses.add(client, -1.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            await self._app(scope, receive, send)
            return
        client = client_address(scope, self._trusted)
        digest = bearer_digest(scope)
        if digest and digest in self._known:
            await self._known_token(scope, receive, send, client, digest)
            return
        key = (client, digest)
        wait = self._pairs.wait_s(key)
        if wait is not None:
            await _send_json(
                send,
                429,
                f"too many failed authentications with this token; retry in {wait} s",
                [(b"retry-after", str(wait).encode())],
            )
            return
        checking = self._checking.get(key)
        if checking is None:
            wait = self._addresses.wait_s(client)
            if wait is not None:
                await _send_json(
                    send,
                    429,
                    f"too many failed authentications from this address; retry in {wait} s",
                    [(b"retry-after", str(wait).encode())],
                )
                return
            # Held while this token is checked: concurrent garbage cannot overdraw.
            self._addresses.add(client, -1.0)
            checking = self._checking[key] = _Checking(holds_unit=True)
        checking.requests += 1
        watching_send, seen = _watch_status(send)
        try:
            await self._app(scope, receive, watching_send)
        finally:
            self._settle(key, checking, seen[0])

    def _settle(self, key: tuple[str, str], checking: _Checking, status: int) -> None:
        client, digest = key
        checking.requests -= 1
        if status == 401:
            self._pairs.add(key, -1.0)
            # The held unit becomes the failure's: kept. The same token failing again while
            # the group is answered costs its (address, token) budget only.
            checking.holds_unit = False
            self._known.forget(digest)
        elif digest and _authenticated(status):
            self._known.remember(digest)
        if checking.requests == 0:
            if self._checking.get(key) is checking:
                del self._checking[key]
            if checking.holds_unit:
                self._addresses.add(client, 1.0)

    async def _known_token(
        self, scope: Scope, receive: Receive, send: Send, client: str, digest: str
    ) -> None:
        watching_send, seen = _watch_status(send)
        try:
            await self._app(scope, receive, watching_send)
        finally:
            if seen[0] == 401:  # revoked or expired since: an unknown token from now on
                self.failed(client, digest)
            elif _authenticated(seen[0]):
                self._known.remember(digest)


class SecurityHeadersMiddleware:
    """Adds the security headers to every HTTP response (headers the route set win): CSP,
    ``X-Frame-Options``, ``nosniff``, ``Referrer-Policy``, and ``Cache-Control: no-store`` on
    API responses (they carry sampled records and authorization-dependent answers)."""

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


def _watch_status(send: Send) -> tuple[Send, list[int]]:
    """``send`` wrapped to pass every message on, and a one-item list holding the answer's
    HTTP status once it starts (0 before; still readable after the app raised)."""
    seen = [0]

    async def watching_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            seen[0] = int(message["status"])
        await send(message)

    return watching_send, seen

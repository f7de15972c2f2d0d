"""Content-coding negotiation: whether a client takes gzip (``Accept-Encoding``, RFC 9110
section 12.5.3), and the service's gzip middleware, which asks it.

Starlette's ``GZipMiddleware`` compresses whenever the header contains the letters "gzip",
so ``Accept-Encoding: gzip;q=0`` (gzip refused) still got gzip. The middleware here hands a
request to it only when gzip is acceptable, and every data-sample answer says
``Vary: Accept-Encoding``, its 304s included, so that a shared cache keeps the two forms
apart.
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The header every representation that depends on ``Accept-Encoding`` carries.
VARY = {"vary": "Accept-Encoding"}


#: A weight as RFC 9110 section 12.4.2 writes it: 0 to 1, at most three decimals.
_QVALUE = re.compile(r"0(\.\d{0,3})?|1(\.0{0,3})?")


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            # A malformed weight (2, inf, 1_0) accepts nothing rather than guess.
            return float(value) if _QVALUE.fullmatch(value) else 0.0
    return 1.0


def accept_encoding(headers: Headers) -> str | None:
    """The ``Accept-Encoding`` field of ``headers``, its lines joined (a field sent on
    several lines is one comma-separated list); ``None`` when absent."""
    lines = headers.getlist("accept-encoding")
    return ", ".join(lines) if lines else None


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value (``None``: absent) accepts gzip: ``gzip`` (or
    its alias ``x-gzip``) listed with a weight above 0, or ``*`` above 0 with gzip not
    listed. An absent or empty header takes no compression here (identity is always safe).
    """
    if not accept_encoding:
        return False
    listed: float | None = None
    star: float | None = None
    for item in accept_encoding.split(","):
        coding, *params = item.split(";")
        coding = coding.strip().lower()
        if coding in ("gzip", "x-gzip"):
            q = _quality(params)
            listed = q if listed is None else max(listed, q)
        elif coding == "*":
            star = _quality(params)
    if listed is not None:
        return listed > 0
    return star is not None and star > 0


class NegotiatedGZipMiddleware:
    """Starlette's ``GZipMiddleware`` for the requests that accept gzip (:func:`accepts_gzip`);
    the others go straight to the application. ``minimum_size``: bytes below which a body is
    sent as it is; ``compresslevel``: 1-9."""

    def __init__(self, app: ASGIApp, minimum_size: int = 500, compresslevel: int = 9) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size, compresslevel=compresslevel)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and accepts_gzip(accept_encoding(Headers(scope=scope))):
            await self.gzip(scope, receive, _one_vary(send))
        else:
            await self.app(scope, receive, send)


def _one_vary(send: Send) -> Send:
    """``send`` with each ``Vary`` field name once: the gzip middleware appends
    ``Accept-Encoding`` to a ``Vary`` that already names it."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            names = [n.strip() for v in headers.getlist("vary") for n in v.split(",")]
            if len(names) > 1:
                unique: dict[str, str] = {}  # field names match in any case; first one wins
                for name in names:
                    if name:
                        unique.setdefault(name.lower(), name)
                del headers["vary"]
                headers["vary"] = ", ".join(unique.values())
        await send(message)

    return sending

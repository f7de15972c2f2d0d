"""Local mode: how the service verifies each registered driver's HTTPS certificate.

An admin registering an application with an ``https://`` driver URL may give the driver's
certificate authority, or its own self-signed certificate (``driverCaPem``: the operator
issues one per application, key ``tls.crt`` of ``<app>-control-token``). The service then
trusts only that certificate for that driver; without one, an ``https://`` driver is
verified against the system's CAs. Either way a certificate that fails verification ends
the connection before the bearer token is sent.

The anchors are kept in this process only (the store has no column for them): after a
restart an ``https://`` driver registered with its own certificate fails verification, and
so gets no token, until it is registered again (documented in ``docs/security.md``).
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import httpx

from sparkglass.runtime.control.client import ControlTLS

__all__ = ["DriverTrust", "driver_location", "driver_tls", "http_url_problem"]


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is no http(s) URL a driver (or the service) can be called at, or None.

    The reasons never quote the URL: it may hold a password (which is itself a reason: the
    URL is stored, shown and logged, and the token is what authenticates).
    """
    if any(c <= " " or c == "\x7f" for c in url):
        return "it holds a space or a control character (CR, LF, ...)"
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        # httpx names the part at fault (the port, an IPv6 address, a control character),
        # never the user name or password.
        reason = str(exc).rstrip(".")
        return reason[:1].lower() + reason[1:]
    if parsed.scheme not in ("http", "https"):
        return "the scheme must be http or https"
    if not parsed.host:
        return "there is no host"
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return "the port must be 1-65535"
    if parsed.userinfo:
        return "it holds a user name or password (which would be stored, shown and logged)"
    return None


def driver_location(url: str) -> str:
    """``scheme://host:port`` of a driver URL, for messages and the audit trail: where rounds
    go, without credentials, path or query the URL might hold."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "an invalid URL"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}"


def driver_tls(field: str, driver_url: str, ca_pem: str | None) -> ControlTLS | None:
    """The :class:`ControlTLS` pinning ``ca_pem`` for ``driver_url`` (None without one).

    Raises ``ValueError`` naming ``field`` when ``ca_pem`` is not a loadable PEM
    certificate, or is given for a URL that is not ``https://`` (the token would travel in
    clear text).
    """
    if not ca_pem:
        return None
    if not driver_url.lower().startswith("https://"):
        raise ValueError(
            f"{field}: a driver certificate needs an https:// driverUrl (over http:// it "
            "would protect nothing)"
        )
    try:
        tls = ControlTLS(ca_pem=ca_pem)
        tls.ssl_context()  # loadable now, not at the first round
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
    return tls


class DriverTrust:
    """The pinned certificate of each registered driver, by (namespace, application).

    Bounded by the applications registered (an admin action); thread-safe.
    """

    def __init__(self) -> None:
        self._anchors: dict[tuple[str, str], ControlTLS] = {}
        self._lock = threading.Lock()

    def set(self, namespace: str, application: str, tls: ControlTLS | None) -> None:
        """Trust ``tls`` for the application's driver (None: the system's CAs)."""
        with self._lock:
            if tls is None:
                self._anchors.pop((namespace, application), None)
            else:
                self._anchors[(namespace, application)] = tls

    def get(self, namespace: str, application: str) -> ControlTLS | None:
        """The pinned certificate of the application's driver, or None."""
        with self._lock:
            return self._anchors.get((namespace, application))

    def forget(self, namespace: str, application: str) -> None:
        """Drop the application's anchor (it was deleted)."""
        self.set(namespace, application, None)

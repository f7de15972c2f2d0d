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

from sparkglass.runtime.control.client import ControlTLS

__all__ = ["DriverTrust", "driver_tls"]


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
            f"{field}: a driver certificate needs an https:// driverUrl, got {driver_url!r}"
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

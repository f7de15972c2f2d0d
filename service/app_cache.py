"""A short-lived in-process cache of application rows (with their vertices).

Every poll needs its application and vertex list; reading them from the store costs a few
milliseconds per request, which dominates a poll served from the result cache. Entries live
``ttl`` seconds, so a registration or deletion made through another replica shows within
that time; this replica drops entries itself when it changes an application.
"""

from __future__ import annotations

import threading
import time

from .store.orm import Application


class ApplicationCache:
    """``(namespace, name) -> Application`` (detached rows, read-only use)."""

    def __init__(self, ttl: float = 2.0) -> None:
        self._ttl = ttl
        self._data: dict[tuple[str, str], tuple[float, Application]] = {}
        self._lock = threading.Lock()

    def get(self, namespace: str, name: str) -> Application | None:
        """The cached row, or ``None`` when absent or expired."""
        with self._lock:
            item = self._data.get((namespace, name))
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    def put(self, app: Application) -> None:
        """Remember ``app`` (its vertices must already be loaded)."""
        with self._lock:
            self._data[(app.namespace, app.name)] = (time.monotonic() + self._ttl, app)

    def invalidate(self, namespace: str | None = None, name: str | None = None) -> None:
        """Forget one application, a namespace, or everything."""
        with self._lock:
            for key in list(self._data):
                if (namespace is None or key[0] == namespace) and (name is None or key[1] == name):
                    del self._data[key]

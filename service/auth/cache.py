"""A small thread-safe TTL cache for authentication and authorization decisions.

Like kube-rbac-proxy, decisions are remembered for seconds so that 200 clients polling
every 3 s do not send 200 reviews every 3 s to the API server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

_MISSING = object()
#: How often (s) ``set`` drops the expired entries.
SWEEP_EVERY_S = 1.0


class TTLCache(Generic[V]):
    """Maps keys to values that expire ``ttl`` seconds after being set (bounded size)."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: dict[Hashable, tuple[float, V]] = {}
        self._lock = threading.Lock()
        self._max = max_entries
        self._swept_at = time.monotonic()

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """``(True, value)`` when present and fresh, else ``(False, None)``."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return False, None
            if item[0] < time.monotonic():
                del self._data[key]
                return False, None
            return True, item[1]

    def set(self, key: Hashable, value: V, ttl: float) -> None:
        """Remember ``value`` for ``ttl`` seconds (``ttl <= 0``: not at all)."""
        if ttl <= 0:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._swept_at >= SWEEP_EVERY_S:
                # An expired entry nobody reads again would stay until the cap (a large
                # value, such as minutes of a pipeline's metrics, held for nothing).
                self._swept_at = now
                for k in [k for k, (expires, _) in self._data.items() if expires < now]:
                    del self._data[k]
            if len(self._data) >= self._max:
                # Dropping everything is crude but bounded and rare; entries live seconds.
                self._data.clear()
            self._data[key] = (now + ttl, value)

    def discard_where(self, doomed: Callable[[Hashable], bool]) -> None:
        """Forget the entries whose key ``doomed`` says."""
        with self._lock:
            for key in [k for k in self._data if doomed(k)]:
                del self._data[key]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._data.clear()

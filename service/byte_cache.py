"""A least-recently-used cache bounded by the bytes of its values, not their number.

Results of one round range from a few hundred bytes to ~50 MB (5000 records of up to
10000 characters), so a cap on entries bounds nothing: the service's result caches use
this instead (``result_cache_bytes``), holding rendered bodies (bytes) whose size is exact.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """``key -> value`` holding at most ``max_bytes`` by the sizes given to :meth:`put`;
    the least recently used entries are dropped first. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, got {max_bytes}")
        self._max = max_bytes
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        """The budget, bytes."""
        return self._max

    @property
    def bytes(self) -> int:
        """Bytes currently held (sum of the sizes of the entries)."""
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or ``None``."""
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            self._data.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Keep ``value`` (``size`` bytes, >= 0), dropping least recently used entries to
        make room. A value larger than the whole budget is not kept; returns whether it was.
        """
        if size < 0:
            raise ValueError(f"size must be 0 or more, got {size}")
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if size > self._max:
                return False
            self._data[key] = (value, size)
            self._bytes += size
            while self._bytes > self._max:
                _, (_, dropped) = self._data.popitem(last=False)
                self._bytes -= dropped
            return True

    def discard_where(self, predicate: Callable[[K], bool]) -> int:
        """Forget every key for which ``predicate`` is true; how many were dropped."""
        with self._lock:
            keys = [k for k in self._data if predicate(k)]
            for k in keys:
                self._bytes -= self._data.pop(k)[1]
            return len(keys)

    def discard(self, key: K) -> None:
        """Forget ``key`` if present."""
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

"""A delaying work queue with a fixed set of workers (client-go's workqueue, in asyncio).

Keys are added to be processed now or after a delay; a key is processed by one worker at a
time; adding a key that is waiting keeps the earlier due time; adding one that is being
processed marks it to run again once that pass ends. The handler returns the delay (seconds)
until the key needs another pass, or None when it needs none until something adds it again;
an exception is logged and the key is retried after ``error_delay`` seconds.

A key that is due costs one heap entry while it waits: there is no timer per object.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Hashable

import structlog

from ..metrics import track_queue

log = structlog.get_logger(__name__)

Handler = Callable[[Hashable], Awaitable[float | None]]


class WorkQueue:
    """See the module docstring. ``workers`` tasks run :meth:`run`'s loop. ``name`` labels
    its metrics (:func:`.metrics.track_queue`); by default the last part of the handler's
    module (``datasample``)."""

    def __init__(
        self,
        handler: Handler,
        *,
        workers: int = 8,
        error_delay: float = 2.0,
        name: str | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers} is out of range: at least 1")
        self._handler, self._workers, self._error_delay = handler, workers, error_delay
        self.name = name or str(getattr(handler, "__module__", "") or "work").rsplit(".", 1)[-1]
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}
        self._active: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Event()
        track_queue(self)

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        """Process ``key`` after ``delay`` seconds (or sooner if already due sooner)."""
        due = time.monotonic() + max(0.0, delay)
        if key in self._active:
            self._again[key] = min(due, self._again.get(key, due))
            return
        if key in self._due and self._due[key] <= due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._changed.set()

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s pending pass (a pass in progress still ends)."""
        self._due.pop(key, None)
        self._again.pop(key, None)

    def pending(self) -> int:
        """Keys waiting for a pass."""
        return len(self._due)

    def backlog(self, now: float | None = None) -> tuple[int, int, float]:
        """``(due, delayed, oldest)`` at ``now`` (``time.monotonic()``): keys due and
        waiting for a worker, keys waiting for a later time, and the seconds the earliest
        due key has been waiting (0.0 when none is due)."""
        now = time.monotonic() if now is None else now
        # Copied in one step: the metrics server's thread calls this while the loop adds.
        times = list(self._due.values())
        due = [t for t in times if t <= now]
        return len(due), len(times) - len(due), now - min(due) if due else 0.0

    async def run(self) -> None:
        """Run the workers until cancelled."""
        tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _next(self) -> Hashable:
        while True:
            while self._heap:
                due, _, key = self._heap[0]
                if self._due.get(key) != due:  # superseded or forgotten
                    heapq.heappop(self._heap)
                    continue
                wait = due - time.monotonic()
                if wait > 0:
                    break
                heapq.heappop(self._heap)
                del self._due[key]
                return key
            self._changed.clear()
            timeout = self._heap[0][0] - time.monotonic() if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def _work(self) -> None:
        while True:
            key = await self._next()
            self._active.add(key)
            delay: float | None
            try:
                delay = await self._handler(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one object's trouble must not stop the others
                log.warning("work item failed; retrying", key=str(key), error=str(exc))
                delay = self._error_delay
            finally:
                self._active.discard(key)
            again = self._again.pop(key, None)
            if again is not None:
                self.add(key, again - time.monotonic())
            if delay is not None:
                self.add(key, delay)

"""One thread-pool call for all concurrent cache misses of the same key.

The route layer remembers "token -> principal" and "(token, namespace, permission) ->
allowed" for a second (``dependencies.authorized_principal``). When such an entry expires
while 50 clients poll, the 50 requests in flight at that moment all miss together; without
this, each sends its own call to the thread pool (and, in Kubernetes mode, its own review
to the API server). With it, the first miss starts the call and the others await the same
one: one call per key per expiry, however many pollers.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")


@dataclass
class _Call(Generic[T]):
    task: asyncio.Future[T]
    waiters: int = 0


class SingleFlight(Generic[T]):
    """Coalesces concurrent calls by key, per event loop: an application driven from two
    loops (a test client without its context, an in-process server) never awaits a call
    that belongs to the other loop."""

    def __init__(self) -> None:
        self._pending: dict[tuple[asyncio.AbstractEventLoop, Hashable], _Call[T]] = {}

    async def run(self, key: Hashable, call: Callable[[], T]) -> T:
        """``call()`` on the thread pool, or the result of the one already running for
        ``key`` on this loop. Raises what ``call`` raised, to every caller that awaited it.
        A cancelled caller (a shutdown, a timeout) does not cancel the call the others
        await; when the last one is cancelled, a call still waiting for a thread is cancelled
        too, so abandoned requests cannot queue work."""
        slot = (asyncio.get_running_loop(), key)
        entry = self._pending.get(slot)
        if entry is None:
            entry = _Call(asyncio.ensure_future(run_in_threadpool(call)))
            self._pending[slot] = entry
            entry.task.add_done_callback(functools.partial(self._forget, slot, entry))
        entry.waiters += 1
        try:
            return await asyncio.shield(entry.task)
        finally:
            entry.waiters -= 1
            if entry.waiters == 0 and not entry.task.done():
                # Every caller left: drop the call so that no later caller joins a
                # cancelled one (anyio still lets a thread that has started finish).
                self._drop(slot, entry)
                entry.task.cancel()

    def in_flight(self) -> int:
        """Calls started and not yet done (running or waiting for a thread)."""
        return len(self._pending)

    def _drop(self, slot: tuple[asyncio.AbstractEventLoop, Hashable], entry: _Call[T]) -> None:
        if self._pending.get(slot) is entry:
            del self._pending[slot]

    def _forget(
        self,
        slot: tuple[asyncio.AbstractEventLoop, Hashable],
        entry: _Call[T],
        done: asyncio.Future[T],
    ) -> None:
        self._drop(slot, entry)
        if not done.cancelled():
            # Marks the exception retrieved: when every awaiter was cancelled, asyncio would
            # otherwise log "exception was never retrieved" for a plain 401.
            done.exception()

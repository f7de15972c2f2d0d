"""One thread-pool call for all concurrent cache misses of the same key.

The route layer remembers "token -> principal" and "(token, namespace, permission) ->
allowed" for a second (``dependencies.authorized_principal``). When such an entry expires
while 50 clients poll, the 50 requests in flight at that moment all miss together; without
this, each sends its own call to the thread pool (and, in Kubernetes mode, to the
authenticator behind it). With it, the first miss starts the call and the others await the
same one: one hop per key per expiry, however many pollers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Coalesces concurrent calls by key. Used from one event loop (the service's), so the
    table needs no lock; each process (uvicorn worker) has its own."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, asyncio.Future[T]] = {}

    async def run(self, key: Hashable, call: Callable[[], T]) -> T:
        """``call()`` on the thread pool, or the result of the one already running for
        ``key``. Raises what ``call`` raised, to every caller that awaited it. A caller that
        is cancelled (its client went away) does not cancel the call the others await."""
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(run_in_threadpool(call))
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(pending)

    def in_flight(self) -> int:
        """Calls running now (for tests and metrics)."""
        return len(self._pending)

    def _forget(self, key: Hashable, done: asyncio.Future[T]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]
        if not done.cancelled():
            # Marks the exception retrieved: when every awaiter was cancelled, asyncio would
            # otherwise log "exception was never retrieved" for a plain 401.
            done.exception()

"""The event loop of a Python worker, shared by its tasks (async vertex, async sink).

PySpark reuses Python worker processes across tasks (``spark.python.worker.reuse``), so
one event loop per process, in a daemon thread, serves every task the worker runs, and
the clients a function opens (an ``aiohttp.ClientSession`` and its connection pool)
live across tasks and micro-batches instead of being rebuilt for each.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

AnyFunction = TypeVar("AnyFunction", bound=Callable[..., Awaitable[Any]])

#: Opened functions a Python worker keeps; older ones are closed.
MAX_OPENED_PER_WORKER = 8
#: How long closing an opened function may take at worker exit (s).
CLOSE_GRACE_S = 5.0


class AsyncFunction:
    """Optional base class for ``fn`` when it holds resources (clients, sessions).

    ``open()`` runs once per Python worker, on the worker's event loop, before the first
    call; ``close()`` when the worker exits (best effort: a killed worker runs nothing).
    The opened instance is reused by every task of the worker, so its resources (say an
    ``aiohttp.ClientSession`` with its connection pool) live across micro-batches.
    """

    async def open(self) -> None:
        """Acquire resources (runs on the worker's event loop)."""

    async def close(self) -> None:
        """Release resources."""

    async def __call__(self, record: dict[str, Any]) -> Any:
        raise NotImplementedError


class _WorkerLoop:
    """The event loop of this Python worker process, in a daemon thread.

    Created on first use and kept for the life of the process. The pid check makes a
    forked child (PySpark's daemon forks workers) build its own: threads do not survive
    ``fork``.
    """

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0
    _opened: dict[str, Any] = {}  # noqa: RUF012 (process-wide cache, by design)

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid() or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="sparkglass-async-loop", daemon=True
                )
                thread.start()
                cls._loop, cls._pid, cls._opened = loop, os.getpid(), {}
                atexit.register(cls._close_opened, loop)
            return cls._loop

    @classmethod
    def function(cls, key: str, fn: AnyFunction) -> AnyFunction:
        """``fn``, opened once per worker (per ``key``) if it is an :class:`AsyncFunction`."""
        loop = cls.get()
        with cls._lock:
            opened = cls._opened.get(key)
        if opened is not None:
            return opened  # type: ignore[no-any-return]
        if isinstance(fn, AsyncFunction):
            asyncio.run_coroutine_threadsafe(fn.open(), loop).result()
        with cls._lock:
            cls._opened[key] = fn
            # Each query (re)build makes a new key; keep the most recent few open.
            stale = list(cls._opened)[:-MAX_OPENED_PER_WORKER]
            closing = [cls._opened.pop(key) for key in stale]
        for old in closing:
            if isinstance(old, AsyncFunction):
                asyncio.run_coroutine_threadsafe(old.close(), loop)
        return fn

    @classmethod
    def _close_opened(cls, loop: asyncio.AbstractEventLoop) -> None:
        for fn in list(cls._opened.values()):
            if isinstance(fn, AsyncFunction) and loop.is_running():
                # Exiting: closing is best effort.
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(fn.close(), loop).result(CLOSE_GRACE_S)


def worker_loop() -> asyncio.AbstractEventLoop:
    """This Python worker's event loop (created on first call, reused across tasks)."""
    return _WorkerLoop.get()


def opened_function(key: str, fn: AnyFunction) -> AnyFunction:
    """The worker's opened instance of the function known as ``key``.

    The first call in a worker runs ``await fn.open()`` on the worker loop (if ``fn`` is
    an :class:`AsyncFunction`) and keeps ``fn``; later calls with the same ``key`` return
    that instance, whatever ``fn`` they pass (each task unpickles its own copy). At most
    :data:`MAX_OPENED_PER_WORKER` are kept; the oldest are closed.
    """
    return _WorkerLoop.function(key, fn)

"""The async sink writer (FLIP-177's pattern) for ``foreachPartition`` / ``foreachBatch``.

Subclass :class:`AsyncSinkWriter`, implement ``async def send(element)`` (runs on the
Python worker's event loop, shared with the async vertex), and write a DataFrame with
:func:`write_partitions`. Writes are bounded in flight, with back-pressure; completions and
retries run in the task thread, so user code needs no locks; a task that fails re-sends its
whole partition (at-least-once). Example and rules: docs/async-operators.md, "Async sink
writer".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pyspark.sql import DataFrame, Row

from sparkglass.runtime.async_ops.errors import (
    AsyncConfigError,
    AsyncRequestError,
    AsyncTimeoutError,
)
from sparkglass.runtime.async_ops.mailbox import MailboxExecutor
from sparkglass.runtime.async_ops.retry import NO_RETRY, RetryStrategy
from sparkglass.runtime.async_ops.worker_loop import worker_loop

T = TypeVar("T")

#: How long ``close()`` waits for cancelled sends to unwind (s).
CLOSE_GRACE_S = 5.0


@dataclass(frozen=True)
class InitContext:
    """What a writer learns about its task (FLIP-177's ``Sink.InitContext``).

    ``subtask_id``: the Spark partition id (0-based). ``number_of_parallel_subtasks``:
    the number of partitions being written. ``attempt_number``: 0 for the first attempt
    of this task, 1 for the first retry, …. ``mailbox_executor``: runs actions in the
    task thread. ``stage_id`` and ``task_attempt_id`` are Spark's, for logs.
    """

    subtask_id: int
    number_of_parallel_subtasks: int
    attempt_number: int
    mailbox_executor: MailboxExecutor
    stage_id: int = -1
    task_attempt_id: int = -1

    @classmethod
    def for_current_task(cls, number_of_parallel_subtasks: int) -> InitContext:
        """The context of the running Spark task (call it in the task thread).

        Outside a Spark task (tests, the driver) it describes subtask 0 of
        ``number_of_parallel_subtasks``, attempt 0.
        """
        from pyspark import TaskContext

        mailbox = MailboxExecutor()
        task = TaskContext.get()
        if task is None:
            return cls(0, number_of_parallel_subtasks, 0, mailbox)
        return cls(
            subtask_id=task.partitionId(),
            number_of_parallel_subtasks=number_of_parallel_subtasks,
            attempt_number=task.attemptNumber(),
            mailbox_executor=mailbox,
            stage_id=task.stageId(),
            task_attempt_id=task.taskAttemptId(),
        )


class AsyncSinkWriter(ABC, Generic[T]):
    """Bounded asynchronous writes with back-pressure.

    ``capacity``: sends in flight at most (1–100000). ``retry``: a strategy of
    :mod:`sparkglass.runtime.async_ops.retry`. ``timeout_s``: seconds per element, retries
    included. Raises :class:`AsyncConfigError` for a bad parameter. Use one writer per
    task, from the task thread. For example::

        class Post(AsyncSinkWriter[Row]):
            async def send(self, row):
                async with session.post(url, json=row.asDict()) as r:
                    r.raise_for_status()

        write_partitions(df, lambda ctx: Post(ctx, capacity=50, retry=FixedDelayRetry()))
        # streaming: df.writeStream.foreachBatch(lambda b, _id: write_partitions(b, make)).start()

    Semantics:

    - ``write()`` returns once the element was sent; while ``capacity`` writes are in flight
      it blocks, **yielding to the mailbox** (so completions keep arriving): back-pressure.
      At most ``capacity`` sends are ever in flight.
    - Completions, result predicates, retries and :meth:`on_result` run in the **task
      thread** through the mailbox: no locks in user code. A retry is re-sent from the task
      thread after the strategy's back-off.
    - ``timeout_s`` bounds one element's attempts and back-offs together (like the async
      vertex). An element that fails for good makes the next ``write()``/``flush()`` raise
      :class:`AsyncRequestError`; the task fails and Spark retries it, re-sending its whole
      partition, so the target must accept repeats (at-least-once; idempotent writes make
      the effect exactly once).
    - ``flush()`` waits for every write; ``close()`` cancels what is left. Cancelling the
      Spark job kills the task's Python worker within ``spark.python.task.killTimeout``
      (2 s by default); :meth:`cancel` interrupts a waiting ``write()`` or ``flush()``
      in-process at once with :class:`WriterInterruptedError`.
    """

    def __init__(
        self,
        context: InitContext,
        *,
        capacity: int = 100,
        retry: RetryStrategy = NO_RETRY,
        timeout_s: float = 30.0,
    ) -> None:
        if not 1 <= capacity <= 100_000:
            raise AsyncConfigError(f"AsyncSinkWriter.capacity must be 1–100000, got {capacity}")
        if not 0 < timeout_s <= 86_400:
            raise AsyncConfigError(
                f"AsyncSinkWriter.timeout_s must be in (0, 86400] s, got {timeout_s}"
            )
        if not isinstance(retry, RetryStrategy):
            raise AsyncConfigError(f"AsyncSinkWriter.retry must be a RetryStrategy, got {retry!r}")
        self.context = context
        self.capacity = capacity
        self.retry = retry
        self.timeout_s = timeout_s
        self._mailbox = context.mailbox_executor
        self._loop = worker_loop()
        self._active = 0  # elements not yet finished (in flight or waiting to retry)
        self._in_flight: set[concurrent.futures.Future[Any]] = set()
        self._failure: BaseException | None = None
        self.completed = 0  # elements that finished successfully

    # -- the user's part
    @abstractmethod
    async def send(self, element: T) -> Any:
        """Send one element (runs on the worker's event loop); return the service's answer.

        Raise to signal failure (the retry strategy decides what is retried).
        """

    def on_result(self, element: T, result: Any) -> None:
        """Called in the task thread once ``element`` was written (default: nothing)."""

    # -- task thread API
    @property
    def in_flight(self) -> int:
        """Elements written but not finished (sending, or waiting to be retried)."""
        return self._active

    def write(self, element: T) -> None:
        """Send ``element``; block, yielding to the mailbox, while ``capacity`` are in flight.

        Raises :class:`AsyncRequestError` if an earlier element failed for good, and
        :class:`WriterInterruptedError` if the writer was cancelled while waiting.
        """
        self._raise_if_failed()
        while self._active >= self.capacity:
            self._mailbox.yield_()
            self._raise_if_failed()
        self._active += 1
        self._send(element, 1, time.monotonic() + self.timeout_s)

    def flush(self) -> None:
        """Block, yielding to the mailbox, until every written element finished.

        Raises like :meth:`write`.
        """
        while self._active > 0:
            self._raise_if_failed()
            self._mailbox.yield_()
        self._raise_if_failed()

    def cancel(self, reason: str = "cancelled") -> None:
        """Interrupt a waiting ``write()``/``flush()`` (any thread may call this)."""
        self._mailbox.cancel(reason)

    def close(self) -> None:
        """Cancel sends still in flight and wait (bounded) until they unwound."""
        futures = list(self._in_flight)
        for future in futures:
            future.cancel()
        concurrent.futures.wait(futures, timeout=CLOSE_GRACE_S)

    # -- internals (task thread unless noted)
    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _send(self, element: T, attempt: int, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        future = asyncio.run_coroutine_threadsafe(self._bounded(element, remaining), self._loop)
        self._in_flight.add(future)
        future.add_done_callback(
            # Runs on the loop thread: hand the completion to the task thread.
            lambda f: self._mailbox.execute(
                functools.partial(self._complete, element, attempt, deadline, f),
                "completion of a write",
            )
        )

    async def _bounded(self, element: T, remaining_s: float) -> Any:
        # The loop thread: one attempt, bounded by what is left of the element's time.
        if remaining_s <= 0:
            raise _Expired()
        try:
            async with asyncio.timeout(remaining_s) as deadline:
                return await self.send(element)
        except TimeoutError:
            if deadline.expired():
                raise _Expired() from None
            raise

    def _complete(
        self, element: T, attempt: int, deadline: float, future: concurrent.futures.Future[Any]
    ) -> None:
        self._in_flight.discard(future)
        if future.cancelled():
            self._active -= 1
            return
        error = future.exception()
        strategy = self.retry
        if isinstance(error, _Expired):
            self._fail(
                element,
                attempt,
                AsyncTimeoutError(
                    f"write timed out after {self.timeout_s} s ({attempt} attempt(s))",
                    attempts=attempt,
                ),
            )
            return
        if error is None:
            result = future.result()
            if strategy.can_retry(attempt) and strategy.retries_result(result):
                self._retry_later(element, attempt, deadline)
                return
            self._active -= 1
            self.completed += 1
            self.on_result(element, result)
            return
        if strategy.can_retry(attempt) and strategy.retries_exception(error):
            self._retry_later(element, attempt, deadline)
            return
        failure = AsyncRequestError(
            f"write failed after {attempt} attempt(s): {type(error).__name__}: {error}",
            attempts=attempt,
        )
        failure.__cause__ = error
        self._fail(element, attempt, failure)

    def _fail(self, element: T, attempt: int, failure: AsyncRequestError) -> None:
        self._active -= 1
        if self._failure is None:  # the first failure is the one to report
            self._failure = failure

    def _retry_later(self, element: T, attempt: int, deadline: float) -> None:
        delay = self.retry.backoff_s(attempt)
        resend = functools.partial(self._send, element, attempt + 1, deadline)
        # The timer runs on the loop; the re-send itself runs in the task thread.
        self._loop.call_soon_threadsafe(
            self._loop.call_later, delay, self._mailbox.execute, resend, "retry of a write"
        )


class _Expired(Exception):
    """An element's time ran out (internal: becomes :class:`AsyncTimeoutError`)."""


def write_partitions(
    df: DataFrame, make_writer: Callable[[InitContext], AsyncSinkWriter[Row]]
) -> None:
    """Write every row of ``df`` with one writer per partition (``foreachPartition``).

    ``make_writer(context)`` runs in each task; the writer gets each row, then ``flush``,
    then ``close`` (also on failure). Raises the Spark job's failure (a task whose
    writer failed for good, after Spark's task retries).
    """
    rdd = df.rdd
    partitions = rdd.getNumPartitions()

    def run(rows: Iterable[Row]) -> None:
        writer = make_writer(InitContext.for_current_task(partitions))
        try:
            for row in rows:
                writer.write(row)
            writer.flush()
        finally:
            writer.close()

    rdd.foreachPartition(run)

"""Errors of the async operators (async vertex, retry strategies, async sink writer).

A request that still fails after its retries raises :class:`AsyncRequestError` in the
Spark task, which fails the task on purpose: Spark retries it, and past
``spark.task.maxFailures`` the micro-batch fails and the query restarts from its last
committed offsets (nothing in flight is ever stored, so nothing else can recover it).
"""

from __future__ import annotations

from sparkglass.runtime.contract.errors import SparkglassError


class AsyncConfigError(SparkglassError, ValueError):
    """A parameter of an async operator or retry strategy is out of range.

    The message names the class and field, the allowed range and the value given.
    """


class AsyncRequestError(SparkglassError):
    """One request failed for good (its retries are exhausted); the task fails with it.

    ``record`` is a short rendering of the input record (at most 200 characters);
    ``attempts`` how many times the request was tried. The original exception is the
    ``__cause__``.
    """

    def __init__(self, message: str, *, record: str = "", attempts: int = 0) -> None:
        super().__init__(message)
        self.record = record
        self.attempts = attempts


class AsyncTimeoutError(AsyncRequestError, TimeoutError):
    """A request (with its retries) did not finish within the operator's ``timeout``
    and no timeout hook turned it into a fallback result."""


class WriterInterruptedError(SparkglassError, InterruptedError):
    """The async sink writer was cancelled while ``write()``/``flush()`` waited."""

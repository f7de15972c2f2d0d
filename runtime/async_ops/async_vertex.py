"""The async vertex: call an external service per record, bounded, ordered, losing nothing.

:func:`async_map` runs ``await fn(record)`` for every row of a DataFrame on the executors (a
``mapInArrow``), with at most ``capacity`` requests of one task outstanding, one event loop
per Python worker, results in input order or as they arrive, a timeout per record and a
retry strategy. Nothing in flight is stored: a task returns only after all its requests
finished, and a request that fails for good fails the task (or, opted in, becomes an error
row). docs/async-operators.md has the example, the rules and the trade-offs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import queue
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkglass.runtime.async_ops.errors import (
    AsyncConfigError,
    AsyncRequestError,
    AsyncTimeoutError,
)
from sparkglass.runtime.async_ops.retry import (
    NO_RETRY,
    Attempts,
    RetryStrategy,
    call_with_retry,
    validation_message,
)
from sparkglass.runtime.async_ops.worker_loop import AsyncFunction, opened_function, worker_loop
from sparkglass.runtime.contract.error_rows import ERROR_COLUMN, OnFailure, error_text
from sparkglass.runtime.failing_row import record_error
from sparkglass.runtime.python_errors import error_row

__all__ = [
    "AsyncFunction",
    "AsyncOptions",
    "OutputSchema",
    "Record",
    "RecordFunction",
    "TimeoutHook",
    "async_map",
    "make_options",
    "run_partition",
]

Record = dict[str, Any]
#: ``await fn(record)``: a dict (one row), ``None`` (no row) or a list of dicts.
RecordFunction = Callable[[Record], Awaitable[Any]]
#: ``on_timeout(record)``: the fallback result (same shapes as ``fn``'s), sync or async;
#: raising fails the request.
TimeoutHook = Callable[[Record], Any]
#: The output rows' schema: a ``StructType``, a DDL string, a function of the input schema,
#: or ``None`` (the input schema).
OutputSchema = StructType | str | Callable[[StructType], StructType] | None

#: How long a failing or closed task waits for its cancelled requests to unwind (s).
CANCEL_GRACE_S = 5.0


class AsyncOptions(BaseModel):
    """Validated parameters of an async vertex (see :func:`async_map`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    capacity: int = Field(default=100, ge=1, le=100_000)
    timeout_s: float = Field(default=30.0, gt=0.0, le=86_400.0)
    ordered: bool = True
    retry: RetryStrategy = NO_RETRY
    on_timeout: TimeoutHook | None = None
    max_batch_rows: int = Field(default=10_000, ge=1, le=1_000_000)
    on_failure: OnFailure = OnFailure.FAIL
    #: Input columns whose values are masked in error messages (the application's redaction).
    secret_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Plan:
    """What a task needs; pickled with the ``mapInArrow`` function."""

    key: str  # identifies ``fn`` across tasks, so a worker opens it once
    fn: RecordFunction
    options: AsyncOptions
    schema: StructType
    #: The pipeline's vertex: a request failing for good then fails its task naming it.
    vertex: str | None = None


# --------------------------------------------------------------------------- driver side
def make_options(**values: Any) -> AsyncOptions:
    """:class:`AsyncOptions` from keyword values; :class:`AsyncConfigError` names a bad one."""
    try:
        return AsyncOptions(**values)
    except ValidationError as exc:
        raise AsyncConfigError(validation_message("async operator", exc)) from None


def async_map(
    df: DataFrame,
    fn: RecordFunction,
    *,
    capacity: int = 100,
    timeout_s: float = 30.0,
    ordered: bool = True,
    retry: RetryStrategy = NO_RETRY,
    on_timeout: TimeoutHook | None = None,
    output_schema: OutputSchema = None,
    max_batch_rows: int = 10_000,
    on_failure: OnFailure | str = OnFailure.FAIL,
    secret_columns: tuple[str, ...] = (),
    vertex: str | None = None,
) -> DataFrame:
    """``df`` mapped through ``await fn(record)``, at most ``capacity`` requests of one task
    outstanding at a time.

    ``capacity``: outstanding requests per task (1–100000). ``timeout_s``: seconds per
    request including retries (> 0). ``output_schema``: a ``StructType``, a DDL string, or
    a function of the input schema returning one (default: ``df.schema``).
    ``max_batch_rows``: rows per output Arrow batch. ``on_failure``: ``"fail"`` (default:
    a request failing for good fails the task) or ``"emit_error"`` (it becomes an error row;
    the output then has the extra string column ``__sg_error``, see below).
    ``secret_columns``: the input columns a redaction rule names; when there are any, an
    error row's message is withheld
    (:func:`~sparkglass.runtime.contract.error_rows.error_text`). ``vertex``: the pipeline's
    vertex name; with it a request failing for good fails its task with
    :class:`~sparkglass.runtime.failing_row.FailingRowError` naming its record (values
    withheld under ``secret_columns``), without it with :class:`AsyncRequestError`.
    Raises :class:`AsyncConfigError` for a bad parameter, ``TypeError`` if ``fn`` is not
    an async callable. Works on batch and streaming DataFrames.

    ``fn`` gets each row as a ``dict`` (column → Python value) and returns a ``dict`` for one
    output row (missing columns become null), ``None`` for no row, or a ``list`` of dicts.
    Output rows follow ``output_schema``. How it runs:

    - **One event loop per Python worker**, in a daemon thread, reused by every task the
      worker runs (PySpark reuses workers), and so are the resources ``fn`` opens
      (:class:`~sparkglass.runtime.async_ops.worker_loop.AsyncFunction`, e.g. one
      ``aiohttp.ClientSession`` per worker; see :mod:`sparkglass.runtime.async_ops.worker_loop`).
    - **Back-pressure**: the task thread hands each input Arrow batch to the loop and reads
      the next one only when every record so far has started and a slot is free. The loop
      starts a waiting record the moment a slot frees, so slots never wait for the task
      thread to be scheduled; the two threads meet a few times per batch, not per record.
    - **Ordered** mode emits results in input order (a result waits for its predecessors and
      counts against ``capacity`` until emitted, as in Flink's ordered ``AsyncWaitOperator``);
      **unordered** mode emits results as they arrive.
    - **Timeout**: each request, retries and back-offs included (as in Flink), gets
      ``timeout_s`` seconds; then ``on_timeout(record)`` (sync or async) returns a fallback
      result, or, without a hook, the request fails with :class:`AsyncTimeoutError`.
    - **Stateless ordered wait**: nothing in flight is stored anywhere. The task returns only
      after every one of its requests finished; a request that fails for good raises
      :class:`AsyncRequestError` in the task (the other requests are cancelled), so Spark
      retries the task and, past ``spark.task.maxFailures``, fails the micro-batch; the
      query then restarts from its last committed offsets. A slow outlier holds its task,
      and a failure recomputes the whole partition: see ``docs/async-operators.md``.
    - **Skipping failed requests** (opt-in, ``on_failure="emit_error"``): a request that
      fails for good (its retries spent, or its timeout passed without an ``on_timeout``
      hook) does not fail the task; its record becomes one *error row* in its place (ordered
      mode: in input order): the output columns with the input's values of the same name and
      the error in the extra string column ``__sg_error``
      (:mod:`sparkglass.runtime.contract.error_rows`); good rows have it null. A pipeline's
      async vertex routes error rows to its ``errors`` output (rounds of kind ``errors``) and
      drops the column; a direct caller filters on it. The record is then *not* retried by
      Spark: choose this only when skipping a record is acceptable.
    """
    if not callable(fn) or not _is_async_callable(fn):
        raise TypeError(f"async_map needs an async callable (async def), got {fn!r}")
    options = make_options(
        capacity=capacity,
        timeout_s=timeout_s,
        ordered=ordered,
        retry=retry,
        on_timeout=on_timeout,
        max_batch_rows=max_batch_rows,
        on_failure=on_failure,
        secret_columns=secret_columns,
    )
    schema = _resolve_schema(df, output_schema)
    if options.on_failure is OnFailure.EMIT_ERROR:
        from pyspark.sql.types import StringType, StructField

        if ERROR_COLUMN in schema.names:
            raise AsyncConfigError(f"output_schema may not have a column named {ERROR_COLUMN!r}")
        schema = StructType([*schema.fields, StructField(ERROR_COLUMN, StringType(), True)])
    plan = _Plan(key=uuid.uuid4().hex, fn=fn, options=options, schema=schema, vertex=vertex)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return run_partition(plan, batches)

    return df.mapInArrow(run, schema)


def _is_async_callable(fn: Any) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 (we want the bound coroutine method)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _resolve_schema(df: DataFrame, schema: OutputSchema) -> StructType:
    if schema is None:
        return df.schema
    if isinstance(schema, StructType):
        return schema
    if callable(schema):
        derived = schema(df.schema)
        if not isinstance(derived, StructType):
            raise AsyncConfigError(
                f"output_schema({df.schema.simpleString()}) must return a "
                f"StructType, got {type(derived).__name__}"
            )
        return derived
    from pyspark.sql.types import _parse_datatype_string

    parsed = _parse_datatype_string(schema)
    if not isinstance(parsed, StructType):
        raise AsyncConfigError(f"output_schema must describe a struct, got {schema!r}")
    return parsed


# ------------------------------------------------------------------------- worker side
class _Failure:
    """A request's final exception, carried from the loop thread to the task thread."""

    __slots__ = ("attempts", "error", "record")

    def __init__(self, error: BaseException, attempts: int, record: Record | None = None) -> None:
        self.error = error
        self.attempts = attempts
        self.record = record


class _ErrorRow:
    """A request that failed for good, emitted as an error row (``on_failure=emit_error``)."""

    __slots__ = ("row",)

    def __init__(self, row: Record) -> None:
        self.row = row


class _TaskRun:
    """One task's requests. The task thread feeds input and takes output; everything
    per request — starting, retrying, completing, ordering, refilling free slots — runs
    on the worker loop, so a request slot never waits for the task thread to be scheduled.

    The loop talks to the task thread through ``events`` only, a few times per input
    batch: ``("more", None)`` once every record fed so far has started and a slot is free
    (back-pressure: the task thread reads no input before that), ``("rows", rows)`` when
    ``max_batch_rows`` output rows are ready, ``("done", rows)`` after the last request,
    ``("error", failure)`` for a request that failed for good.
    """

    def __init__(
        self,
        plan: _Plan,
        loop: asyncio.AbstractEventLoop,
        fn: RecordFunction,
        arrow_schema: pa.Schema | None = None,
    ) -> None:
        self.options = plan.options
        #: The output's Arrow types: an error row keeps only input values that fit them.
        self.arrow_schema = arrow_schema
        self.loop = loop
        self.fn = fn
        self.events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Loop-thread state from here on.
        self.backlog: collections.deque[tuple[int, Record]] = collections.deque()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.started = 0  # requests started (indices 0 .. started-1)
        self.emitted = 0  # results emitted, in order when ordered
        self.ready: dict[int, Any] = {}  # ordered: results waiting for a predecessor
        self.rows: list[Record] = []
        self.total: int | None = None  # records fed in all, once the input ended
        self.wants_input = False
        self.failed = False

    # -- task thread
    def feed(self, start: int, records: list[Record]) -> None:
        self.loop.call_soon_threadsafe(self._feed, start, records)

    def finish(self, total: int) -> None:
        self.loop.call_soon_threadsafe(self._finish, total)

    def cancel(self) -> None:
        """Cancel what is still running and wait (bounded) until it unwound."""
        if self.loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop)
        # The task is failing or closing already; its own error is the one to keep.
        with contextlib.suppress(Exception):
            future.result(CANCEL_GRACE_S)

    # -- loop thread
    def _feed(self, start: int, records: list[Record]) -> None:
        self.backlog.extend(enumerate(records, start))
        self.wants_input = True
        self._fill()

    def _finish(self, total: int) -> None:
        self.total = total
        self._check_done()

    def _has_room(self) -> bool:
        # Ordered: a finished result holds its slot until emitted (as in Flink).
        held = self.started - self.emitted if self.options.ordered else len(self.tasks)
        return held < self.options.capacity

    def _fill(self) -> None:
        while self.backlog and not self.failed and self._has_room():
            index, record = self.backlog.popleft()
            task = self.loop.create_task(self._one(index, record))
            self.tasks[index] = task
            self.started += 1
        if self.wants_input and not self.backlog and self._has_room():
            self.wants_input = False
            self.events.put(("more", None))

    async def _cancel_all(self) -> None:
        self.failed = True
        self.backlog.clear()
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, index: int, record: Record) -> None:
        attempts = Attempts()
        try:
            outcome = await self._call(record, attempts)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # reported to the task thread, which raises it
            outcome = self._failed(exc, record, attempts)
        finally:
            self.tasks.pop(index, None)
        if self.failed:
            return
        try:
            self._complete(index, outcome)
        except Exception as exc:  # a bad return value of fn: fail the task with it
            self._complete(index, _Failure(exc, attempts.count))

    def _failed(self, exc: BaseException, record: Record, attempts: Attempts) -> Any:
        """A request's final failure: a :class:`_Failure` failing the task, or (opted in, for
        an ``Exception``) an :class:`_ErrorRow` taking the record's place."""
        if self.options.on_failure is OnFailure.EMIT_ERROR and isinstance(exc, Exception):
            failure = _request_error(_Failure(exc, attempts.count))
            message = error_text(failure, record, self.options.secret_columns)
            schema = self.arrow_schema if self.arrow_schema is not None else ()
            return _ErrorRow(error_row(record, schema, message))
        return _Failure(exc, attempts.count, record)

    def _complete(self, index: int, outcome: Any) -> None:
        if isinstance(outcome, _Failure):
            self.failed = True
            self.events.put(("error", outcome))
            return
        if self.options.ordered:
            self.ready[index] = outcome
            while self.emitted in self.ready:
                _add_rows(self.rows, self.ready.pop(self.emitted))
                self.emitted += 1
                self._pass_full_batch()
        else:
            _add_rows(self.rows, outcome)
            self.emitted += 1
            self._pass_full_batch()
        self._check_done()
        self._fill()

    def _pass_full_batch(self) -> None:
        if len(self.rows) >= self.options.max_batch_rows:
            rows, self.rows = self.rows, []
            self.events.put(("rows", rows))

    def _check_done(self) -> None:
        if self.total is not None and self.emitted == self.total and not self.failed:
            rows, self.rows = self.rows, []
            self.events.put(("done", rows))

    async def _call(self, record: Record, attempts: Attempts) -> Any:
        options = self.options
        try:
            async with asyncio.timeout(options.timeout_s) as deadline:
                return await call_with_retry(lambda: self.fn(record), options.retry, attempts)
        except TimeoutError:
            # Only our deadline counts as the operator timeout; a TimeoutError the user's
            # own client raised is an ordinary (already retried) exception.
            if not deadline.expired():
                raise
            if options.on_timeout is None:
                raise AsyncTimeoutError(
                    f"request timed out after {options.timeout_s} s ({attempts.count} attempt(s))",
                    record=_short(record),
                    attempts=attempts.count,
                ) from None
            fallback = options.on_timeout(record)
            if inspect.isawaitable(fallback):
                fallback = await fallback
            return fallback


def _add_rows(rows: list[Record], outcome: Any) -> None:
    """Append ``fn``'s result to ``rows``; ``TypeError`` for a result of the wrong shape."""
    if outcome is None:
        return
    if isinstance(outcome, _ErrorRow):
        rows.append(outcome.row)
    elif isinstance(outcome, Mapping):
        rows.append(dict(outcome))
    elif isinstance(outcome, list):
        for row in outcome:
            if not isinstance(row, Mapping):
                raise TypeError(
                    f"async fn returned a list holding {type(row).__name__}; "
                    "expected dicts (one per output row)"
                )
            rows.append(dict(row))
    else:
        raise TypeError(
            f"async fn returned {type(outcome).__name__}; expected a dict "
            "(one row), None (no row) or a list of dicts"
        )


def _short(record: Record, limit: int = 200) -> str:
    text = repr(record)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _request_error(failure: _Failure) -> AsyncRequestError:
    if isinstance(failure.error, AsyncRequestError):
        return failure.error
    return AsyncRequestError(
        f"async request failed after {failure.attempts} attempt(s): "
        f"{type(failure.error).__name__}: {failure.error}",
        attempts=failure.attempts,
    )


def _task_error(plan: _Plan, failure: _Failure) -> Exception:
    """What fails the task for ``failure``: the request's error, or in a pipeline (the plan
    names its vertex) the record it failed on with it (:mod:`sparkglass.runtime.failing_row`,
    which also decides what is chained)."""
    error = _request_error(failure)
    if plan.vertex is None or failure.record is None:
        if error is not failure.error:
            error.__cause__ = failure.error
        return error
    secrets = plan.options.secret_columns
    return record_error(plan.vertex, failure.record, error, secrets=secrets, cause=failure.error)


def run_partition(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body: one task's input batches in, output batches out.

    Returns only after every request of the task completed. Raises
    :class:`AsyncRequestError` (or :class:`AsyncTimeoutError`) for a request that failed
    for good, after cancelling the others; ``TypeError`` if ``fn`` returned a bad shape.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(plan.schema, timezone="UTC")
    loop = worker_loop()
    run = _TaskRun(plan, loop, opened_function(plan.key, plan.fn), arrow_schema)
    finished = False

    def until(wanted: str) -> Iterator[pa.RecordBatch]:
        # Block on the loop's events, passing output on, until ``wanted`` arrives.
        while True:
            kind, payload = run.events.get()
            if kind == "error":
                raise _task_error(plan, payload)
            if kind in ("rows", "done") and payload:
                yield pa.RecordBatch.from_pylist(payload, schema=arrow_schema)
            if kind == wanted:
                return

    try:
        fed = 0
        for batch in batches:
            records = batch.to_pylist()
            if not records:
                continue
            run.feed(fed, records)
            fed += len(records)
            # Back-pressure: read no more input until all of it started and a slot is free.
            yield from until("more")
        run.finish(fed)
        yield from until("done")
        finished = True
    finally:
        if not finished:
            # Failing or closed early: leave nothing running into the next task.
            run.cancel()

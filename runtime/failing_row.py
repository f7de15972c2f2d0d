"""The row a vertex died on, named in the failure of its task and its query.

A Python batch vertex that raises fails its task (the default, ``on_error="fail"``), and
Spark's failure text says only where in the worker the exception came from. Before the task
fails, the vertex's batch is run again one row at a time (as ``on_error="emit_error"`` does,
:mod:`sparkglass.runtime.python_errors`) to find the first row that raises; the task then
fails with :class:`FailingRowError`, whose message carries the vertex, that row and its error
as one JSON object after :data:`MARK`. Spark carries the message to the driver in the
query's exception, where :func:`failing_row_in` finds it again, so the pipeline's ``failed``
reason names the row, not a stack trace; so does an async request failing for good.

With a redaction rule on the vertex's input (``secrets``) only the row's column names and the
error's type are kept, as for error rows (``error_rows.error_text``). Only failures pay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkglass.runtime.contract.error_rows import error_text

#: What precedes the JSON object in the task's failure message.
MARK = "sparkglass-failing-row:"
#: The row's JSON is cut to this many characters (the pipeline's ``failed`` reason is at most
#: 4096, the SparkApplication's status keeps 1000).
MAX_ROW_CHARS = 600
#: What stands for the row's values when redaction rules apply to the vertex's input.
WITHHELD_ROW = "(values withheld: redaction rules apply to this vertex's columns)"


class FailingRowError(RuntimeError):
    """A vertex raised on a row (a Python vertex's, an async request's record): its task
    fails naming it (module docstring)."""


@dataclass(frozen=True)
class FailingRow:
    """What the driver learns of the row a vertex raised on: ``vertex``, ``row`` (its JSON,
    at most :data:`MAX_ROW_CHARS` characters, or the columns and :data:`WITHHELD_ROW`),
    ``error`` (``Type: message``, at most 1000 characters) and whether the row was
    ``found`` (``False``: the batch raised, but no row alone did)."""

    vertex: str
    row: str
    error: str
    found: bool = True

    def summary(self) -> str:
        """One line for the pipeline's ``failed`` reason."""
        if not self.found:
            return f"vertex {self.vertex!r} raised on a batch (no row alone): {self.error}"
        return f"vertex {self.vertex!r} raised on row {self.row}: {self.error}"


def _row_text(record: dict[str, Any], withheld: bool) -> str:
    if withheld:
        return json.dumps({"columns": list(record), "values": WITHHELD_ROW})
    text = json.dumps(record, default=str, ensure_ascii=False)
    return text if len(text) <= MAX_ROW_CHARS else text[: MAX_ROW_CHARS - 1] + "…"


def failing_row_error(
    vertex: str,
    fn: Any,
    batch: pa.RecordBatch,
    error: Exception,
    *,
    secrets: tuple[str, ...],
) -> FailingRowError:
    """The error to fail the task with, after ``fn(batch)`` raised ``error`` at ``vertex``:
    ``fn`` is run on each row of ``batch`` in turn until one raises (the rows before it are
    run for nothing: the task fails anyway). ``secrets``: the input's columns redaction
    rules name; any withholds the row's values and the error's message (module docstring).
    Chained to ``error`` as :func:`record_error` chains."""
    for i in range(batch.num_rows):
        row = batch.slice(i, 1)
        try:
            fn(row)
        except Exception as exc:
            return record_error(vertex, row.to_pylist()[0], exc, secrets=secrets, cause=error)
    found = FailingRow(vertex, "", error_text(error, {}, secrets), found=False)
    return _error(found, error, secrets)


def record_error(
    vertex: str,
    record: dict[str, Any],
    error: BaseException,
    *,
    secrets: tuple[str, ...],
    cause: BaseException | None = None,
) -> FailingRowError:
    """The error to fail the task with when ``error`` was raised on ``record`` at ``vertex``
    (a Python vertex's row, an async vertex's request that failed for good); ``secrets`` as
    for :func:`failing_row_error`. Chained to ``cause`` (default ``error``), except under
    redaction rules: the original's message may quote a redacted value, and Spark would put
    it in the failure text, its logs and the query's exception."""
    text = _row_text(record, bool(secrets))
    found = FailingRow(vertex, text, error_text(error, record, secrets))
    return _error(found, error if cause is None else cause, secrets)


def _error(found: FailingRow, cause: BaseException, secrets: tuple[str, ...]) -> FailingRowError:
    payload = {"vertex": found.vertex, "row": found.row, "error": found.error, "found": found.found}
    failing = FailingRowError(MARK + json.dumps(payload))
    failing.__cause__ = None if secrets else cause
    failing.__suppress_context__ = True  # raised while handling the original: not shown
    return failing


def failing_row_in(text: str) -> FailingRow | None:
    """The :class:`FailingRow` a task's failure ``text`` (a query's exception) carries, or
    ``None`` when it carries none (another kind of failure)."""
    at = text.rfind(MARK)
    if at < 0:
        return None
    try:
        payload, _ = json.JSONDecoder().raw_decode(text, at + len(MARK))
        return FailingRow(
            vertex=str(payload["vertex"]),
            row=str(payload["row"]),
            error=str(payload["error"]),
            found=bool(payload.get("found", True)),
        )
    except (ValueError, KeyError, TypeError):
        return None  # cut by Spark, or not ours

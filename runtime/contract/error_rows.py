"""Error rows: records a vertex could not process, routed to its ``errors`` output.

By default a record that fails fails its task (Spark retries the task, then fails the
micro-batch; nothing is lost). A vertex may instead opt in to *skip* such records and keep
them for inspection:

- an async vertex with ``on_failure="emit_error"``: a request that still fails after its
  retries (or times out without an ``on_timeout`` hook);
- a Python batch vertex with ``on_error="emit_error"``: the rows its function raised on.

Such a record leaves the vertex function as an *error row*: the output columns with the
input's values of the same name (others null) and, in the column :data:`ERROR_COLUMN`, the
error (exception type and message, cut to :data:`MAX_ERROR_CHARS` characters). The pipeline
splits error rows off right after the function: rounds of kind ``errors`` capture them
there, through the JVM tap (its rate limits, caps and the application's redaction), and
everything downstream sees only the good rows and no :data:`ERROR_COLUMN`.

An error message may quote the record; when the application has redaction rules, the values
of the columns they name are replaced by ``***`` in the message on the executor
(:func:`error_text`), as the masked corrupt-record column keeps raw input lines out of
samples. Spark-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from sparkglass.runtime.contract.redaction import MASK

#: The column of an error row holding its error (``__sg_`` names are the runtime's own: no
#: round request may name them).
ERROR_COLUMN = "__sg_error"
#: An error message is cut to this many characters on the executor.
MAX_ERROR_CHARS = 1000
#: Shortest value scrubbed from a message (shorter ones, say ``1``, would mask every digit
#: of the message and hide nothing a reader could not guess).
MIN_SCRUBBED_CHARS = 2


class OnFailure(StrEnum):
    """What a vertex does with a record it could not process."""

    #: Fail the task (Spark retries it; past ``spark.task.maxFailures`` the micro-batch fails).
    FAIL = "fail"
    #: Skip the record: it becomes an error row, sampled by rounds of kind ``errors``.
    EMIT_ERROR = "emit_error"


def parse_on_failure(value: object, field: str) -> OnFailure:
    """``value`` as an :class:`OnFailure`; ``ValueError`` naming ``field`` and the allowed
    values otherwise."""
    try:
        return OnFailure(str(value))
    except ValueError:
        allowed = ", ".join(repr(v.value) for v in OnFailure)
        raise ValueError(f"{field}={value!r} is not allowed: one of {allowed}") from None


def error_text(error: BaseException, record: Mapping[str, Any], secrets: Iterable[str]) -> str:
    """``Type: message`` of ``error`` with the values of ``record``'s ``secrets`` columns
    replaced by ``***``, cut to :data:`MAX_ERROR_CHARS` characters."""
    text = f"{type(error).__name__}: {error}"
    return scrub(text, record, secrets)


def scrub(text: str, record: Mapping[str, Any], secrets: Iterable[str]) -> str:
    """``text`` with each value of ``record``'s ``secrets`` columns (as ``str`` and ``repr``)
    replaced by ``***`` (longest first), cut to :data:`MAX_ERROR_CHARS` characters."""
    values: set[str] = set()
    for column in secrets:
        value = record.get(column)
        if value is None:
            continue
        for form in (str(value), repr(value)):
            if len(form) >= MIN_SCRUBBED_CHARS:
                values.add(form)
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text[:MAX_ERROR_CHARS]

"""Error rows: records a vertex could not process, routed to its ``errors`` output.

By default a record that fails fails its task (Spark retries the task, then fails the
micro-batch; nothing is lost). A vertex may instead opt in to skip such records and keep
them for inspection (an async vertex's ``on_failure="emit_error"``, a Python batch vertex's
``on_error="emit_error"``): each leaves the vertex function as an *error row*, the output
columns with the input's values of the same name and the error in :data:`ERROR_COLUMN`
(:func:`error_text`). The pipeline splits error rows off right after the function, for
rounds of kind ``errors``. Spark-free. The rules: docs/architecture.md, "Round kinds".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

#: The column of an error row holding its error (``__sg_`` names are the runtime's own: no
#: round request may name them).
ERROR_COLUMN = "__sg_error"
#: An error message is cut to this many characters on the executor.
MAX_ERROR_CHARS = 1000
#: What stands for the message of an error on a vertex whose input has redacted columns.
#: Fixed text: nothing of the record, however encoded, can reach a round through it.
WITHHELD_NOTE = "(message withheld: redaction rules apply to this vertex's columns)"


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
    """The error of an error row: ``Type: message`` of ``error``, cut to
    :data:`MAX_ERROR_CHARS` characters; only ``Type: ``:data:`WITHHELD_NOTE` when ``secrets``
    (the vertex's input columns a redaction rule names) is not empty.

    An error message may quote the record in any form: URL-encoded, JSON-escaped,
    upper-cased, hashed or cut. Replacing the redacted values in the message, as this used
    to do, caught only their exact ``str``/``repr`` and let ``jane.doe%40corp.com`` through;
    so with redaction only the exception type is kept. Without it the message is kept as is.

    ``record`` is not read: a message is withheld whatever the record's values (a null in a
    redacted column today says nothing about what another part of the message derived from
    it), and the record stays a parameter so that callers need not change.
    """
    del record  # see the docstring: the decision depends on the rules, not on the values
    name = type(error).__name__
    if any(True for _ in secrets):
        return f"{name}: {WITHHELD_NOTE}"[:MAX_ERROR_CHARS]
    return f"{name}: {error}"[:MAX_ERROR_CHARS]

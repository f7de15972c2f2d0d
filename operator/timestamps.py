"""Timestamps in the objects the operator writes and reads: RFC 3339 in UTC, as Kubernetes
writes them (``metav1.Time`` to the second, ``MicroTime`` to the microsecond), and epoch
seconds inside the operator."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

#: Digits after the second: Kubernetes' ``Time`` has none, ``MicroTime`` six.
Precision = Literal["seconds", "milliseconds", "microseconds"]


def rfc3339(epoch: float | None = None, precision: Precision = "seconds") -> str:
    """``epoch`` (seconds; now when None) as RFC 3339 in UTC: ``2026-01-02T03:04:05Z``, or
    with ``.123`` / ``.123456`` before the ``Z``."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, UTC)
    return moment.isoformat(timespec=precision).replace("+00:00", "Z")


def now_rfc3339() -> str:
    """The current UTC time to the second (a ``metav1.Time``)."""
    return rfc3339()


def epoch_of(text: str | None) -> float:
    """An RFC 3339 timestamp (any offset, any fraction) as epoch seconds; 0 when absent.
    Raises ValueError when ``text`` is no timestamp."""
    if not text:
        return 0.0
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def epoch_or_zero(value: Any) -> float:
    """:func:`epoch_of` for a field anyone may have written: 0 when it is absent, not a
    string or not a timestamp."""
    try:
        return epoch_of(value) if isinstance(value, str) else 0.0
    except ValueError:
        return 0.0

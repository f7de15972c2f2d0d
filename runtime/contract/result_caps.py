"""Caps a driver's sampled result must keep, checked by whoever stores or serves it.

The driver enforces them when it builds a result; the service and the operator check them
again before a result reaches the store, a response or a status, because a driver is the
application's own code. The figures are the FLIP's: at most
:data:`~sparkglass.runtime.contract.sample_result.MAX_RECORDS_PER_RESPONSE` (5000) records in
all and :data:`~sparkglass.runtime.contract.sample_result.MAX_RECORDS_PER_SUBTASK` (1000) per
subtask.
"""

from __future__ import annotations

from .sample_result import MAX_RECORDS_PER_RESPONSE, MAX_RECORDS_PER_SUBTASK, SubtaskSamples

__all__ = ["MAX_DATA_TYPE_LENGTH", "ResultCaps", "ResultRejected"]


class ResultRejected(Exception):
    """A driver's result broke the contract (a cap) or could not be fetched whole; the
    message says how. The round fails; nothing of the result is stored."""


#: Longest ``dataType`` a record may carry, characters (Spark's ``simpleString`` of a
#: schema; 64 Ki characters hold well over a thousand columns).
MAX_DATA_TYPE_LENGTH = 64 * 1024


class ResultCaps:
    """Checks a driver's records against the contract's caps, one subtask at a time.

    The shape was checked when each answer was decoded (pydantic); here the caps: at most
    5000 records in all and 1000 per subtask, each subtask once, no record longer than
    ``max_record_length`` characters, no ``dataType`` longer than
    :data:`MAX_DATA_TYPE_LENGTH`. :meth:`check` raises :class:`ResultRejected` saying
    which cap broke, so nothing beyond the caps is ever stored or sent.
    """

    def __init__(self, max_record_length: int) -> None:
        self._max_length = max_record_length
        self._total = 0
        self._seen: set[int] = set()

    def check(self, sub: SubtaskSamples) -> None:
        """Account for ``sub``; :class:`ResultRejected` when a cap is broken."""
        if sub.subtask_index in self._seen:
            raise ResultRejected(f"subtask {sub.subtask_index} appears twice")
        self._seen.add(sub.subtask_index)
        if len(sub.records) > MAX_RECORDS_PER_SUBTASK:
            raise ResultRejected(
                f"subtask {sub.subtask_index} has {len(sub.records)} records "
                f"(at most {MAX_RECORDS_PER_SUBTASK})"
            )
        self._total += len(sub.records)
        if self._total > MAX_RECORDS_PER_RESPONSE:
            raise ResultRejected(f"more than {MAX_RECORDS_PER_RESPONSE} records")
        for rec in sub.records:
            if len(rec.data) > self._max_length:
                raise ResultRejected(
                    f"a record of subtask {sub.subtask_index} has {len(rec.data)} characters "
                    f"(max-record-length {self._max_length})"
                )
            # The type string rides on every record: uncapped, a driver could store and send
            # 5000 copies of megabytes of it past max-record-length.
            if len(rec.data_type) > MAX_DATA_TYPE_LENGTH:
                raise ResultRejected(
                    f"a record of subtask {sub.subtask_index} has a dataType of "
                    f"{len(rec.data_type)} characters (at most {MAX_DATA_TYPE_LENGTH})"
                )

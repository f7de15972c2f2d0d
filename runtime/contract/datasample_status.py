"""A round's result in a ``DataSample`` status and back: the one codec of that status.

The operator writes a final result into the DataSample's ``status`` with :func:`encode`;
the service (Kubernetes mode) reads it back with :func:`decode` when the operator has not
saved the full result in the store. The field names are a user-visible contract, described
in the ``status`` schema of ``crds/datasample.yaml``.

etcd objects are small (1.5 MiB at most, and every watcher receives every version), so the
status holds the counters and only as many records as fit in ``max_bytes`` of JSON. Records
are taken round-robin over subtasks, so a cut sample still shows every subtask. The full
result is in the store, served at ``resultsURL``.

Spark-free: the service and the operator import it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final

from pydantic import ValidationError

from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus

log = logging.getLogger(__name__)

#: Bytes of records a DataSample status holds by default, and at most (the operator's
#: --max-status-bytes). etcd stores an object of at most 1.5 MiB and every watcher receives
#: every version: at the largest setting a whole DataSample (records, counters, 10,000 failed
#: subtasks, conditions, the largest spec) stays under a third of it.
DEFAULT_STATUS_BYTES: Final = 64 * 1024
MAX_STATUS_BYTES: Final = 256 * 1024

#: The phase of a DataSample whose application went away before the round ended.
ABANDONED: Final = "Abandoned"

#: DataSample phase of each final result status.
PHASES: Final[dict[SampleStatus, str]] = {
    SampleStatus.COMPLETE: "Complete",
    SampleStatus.PARTIAL: "Partial",
    SampleStatus.NO_DATA: "NoData",
    SampleStatus.FAILED: "Failed",
    SampleStatus.DISABLED: "Disabled",
}

#: Final DataSample phase -> result status. ``Abandoned`` is a failure.
STATUSES: Final[dict[str, SampleStatus]] = {
    **{phase: status for status, phase in PHASES.items()},
    ABANDONED: SampleStatus.FAILED,
}

# The result counters copied as they are between the result and the status.
_COUNTERS: Final = (
    "endTimestamp",
    "totalRecordCount",
    "totalTruncated",
    "droppedByContention",
    "droppedByRateLimit",
    "errorCode",
    "failedSubtasks",
    "filterStoppedSubtasks",
    "noDataReason",
    "lastMicroBatchTimestamp",
    "materializedAt",
)


def phase_of(result: DataSampleResult) -> str:
    """The final DataSample phase for ``result`` (``Failed`` for a ``PENDING`` result,
    which is not final)."""
    return PHASES.get(result.status, PHASES[SampleStatus.FAILED])


def encode(result: DataSampleResult, max_bytes: int) -> dict[str, Any]:
    """The status fields of a final ``result``, its records bounded to ``max_bytes``.

    Returns a dict for a JSON merge patch of ``status``: ``phase`` (:func:`phase_of`),
    ``endTimestamp`` (ms since the epoch), ``totalRecordCount``, ``totalTruncated``,
    ``droppedByContention``, ``droppedByRateLimit``, ``errorCode``, ``failedSubtasks``,
    ``samples`` (``[{"subtaskIndex", "records"}]``), ``recordsInStatus`` (records kept in
    ``samples``) and ``samplesTruncated`` (true when records were left out). ``errorCode``
    and ``endTimestamp`` are ``None`` when the result has none: in a merge patch that
    deletes a value left by an earlier step.

    ``max_bytes`` bounds the records: each costs the length of its compact JSON as
    ``json.dumps`` writes it (non-ASCII escaped as ``\\uXXXX``, so never less than its
    UTF-8 size) plus one byte for its separator. Records are taken round-robin over
    subtasks in subtask order (each subtask keeps its earliest records) until the next one
    does not fit.

    Lost in encoding: the records beyond the byte bound (the counters still describe the
    whole result), subtasks left with no record in ``samples``, and ``roundId`` and
    ``stale`` (:func:`decode` takes the round id from its caller).

    Raises ``ValueError`` when ``max_bytes`` is negative.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes={max_bytes} is out of range: allowed 0 or more")
    queues = [
        (s.subtask_index, [r.to_json_dict() for r in s.records])
        for s in sorted(result.samples, key=lambda s: s.subtask_index)
    ]
    kept: dict[int, list[dict[str, Any]]] = {index: [] for index, _ in queues}
    total = sum(len(records) for _, records in queues)
    used, count, full = 0, 0, False
    depth = 0
    while not full and count < total:
        for index, records in queues:
            if depth >= len(records):
                continue
            size = len(json.dumps(records[depth], separators=(",", ":"))) + 1
            if used + size > max_bytes:
                full = True
                break
            kept[index].append(records[depth])
            used += size
            count += 1
        depth += 1
    return {
        "phase": phase_of(result),
        "endTimestamp": result.end_timestamp,
        "totalRecordCount": result.total_record_count,
        "totalTruncated": result.total_truncated,
        "droppedByContention": result.dropped_by_contention,
        "droppedByRateLimit": result.dropped_by_rate_limit,
        "errorCode": result.error_code.value if result.error_code else None,
        "failedSubtasks": list(result.failed_subtasks),
        # None deletes a list an earlier step left (merge patch): empty says nothing.
        "filterStoppedSubtasks": list(result.filter_stopped_subtasks) or None,
        "noDataReason": result.no_data_reason.value if result.no_data_reason else None,
        "lastMicroBatchTimestamp": result.last_micro_batch_timestamp,
        "materializedAt": result.materialized_at,
        "samples": [
            {"subtaskIndex": index, "records": records}
            for index, records in kept.items()
            if records
        ],
        "recordsInStatus": count,
        "samplesTruncated": count < total,
    }


def decode(status: dict[str, Any], round_id: str) -> DataSampleResult | None:
    """The result in a DataSample ``status``, with ``round_id`` as its ``roundId``.

    Returns ``None`` while the phase is not final (or missing). The counters and
    ``samples`` are taken as they are; absent or ``null`` fields get the result's defaults.
    ``Abandoned`` becomes ``FAILED`` with ``TASK_TERMINATED``, and any ``FAILED`` without an
    ``errorCode`` gets ``INTERNAL_ERROR``. A status that does not match the result contract
    gives a ``FAILED`` result with ``INTERNAL_ERROR`` ended now (logged, never raised).

    ``recordsInStatus`` and ``samplesTruncated`` are not read: a status cut by the byte
    bound decodes to fewer records than ``totalRecordCount``, and ``totalTruncated`` keeps
    the value written (true only when ``maxRecords`` or the 5000-record cap cut records,
    not for the byte bound).
    """
    phase = status.get("phase")
    if phase not in STATUSES:
        return None
    fields = {k: status[k] for k in (*_COUNTERS, "samples") if status.get(k) is not None}
    try:
        result = DataSampleResult.model_validate(
            {**fields, "status": STATUSES[phase].value, "roundId": round_id}
        )
    except ValidationError:
        log.warning("DataSample status does not match the result contract")
        return DataSampleResult(
            status=SampleStatus.FAILED,
            error_code=ErrorCode.INTERNAL_ERROR,
            round_id=round_id,
            end_timestamp=int(time.time() * 1000),
        )
    if phase == ABANDONED and result.error_code is None:
        result.error_code = ErrorCode.TASK_TERMINATED
    if result.status is SampleStatus.FAILED and result.error_code is None:
        result.error_code = ErrorCode.INTERNAL_ERROR
    return result

"""A round's result as a byte-bounded ``DataSample`` status.

etcd objects are small (1.5 MiB at most, and every watcher receives every version), so the
status holds the counters and only as many records as fit in ``max_bytes`` of JSON. Records
are taken round-robin over subtasks, so a cut sample still shows every subtask. The full
result is in the store, served at ``resultsURL``.
"""

from __future__ import annotations

import json
from typing import Any

from sparkglass.runtime.contract.sample_result import DataSampleResult, SampleStatus

#: DataSample phase of each final result status.
PHASES: dict[SampleStatus, str] = {
    SampleStatus.COMPLETE: "Complete",
    SampleStatus.PARTIAL: "Partial",
    SampleStatus.NO_DATA: "NoData",
    SampleStatus.FAILED: "Failed",
    SampleStatus.DISABLED: "Disabled",
}


def bounded_status(result: DataSampleResult, max_bytes: int) -> dict[str, Any]:
    """Status fields for a final ``result``: counters, ``samples`` within ``max_bytes``
    (JSON size of the records), ``recordsInStatus`` and ``samplesTruncated``."""
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
        "endTimestamp": result.end_timestamp,
        "totalRecordCount": result.total_record_count,
        "totalTruncated": result.total_truncated,
        "droppedByContention": result.dropped_by_contention,
        "droppedByRateLimit": result.dropped_by_rate_limit,
        "errorCode": result.error_code.value if result.error_code else None,
        "failedSubtasks": list(result.failed_subtasks),
        "samples": [
            {"subtaskIndex": index, "records": records}
            for index, records in kept.items()
            if records
        ],
        "recordsInStatus": count,
        "samplesTruncated": count < total,
    }

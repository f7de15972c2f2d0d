"""Query-parameter post-filters applied to a cached result (``subtaskIndex``, ``maxRecords``).

The cached result is never changed; each caller gets a filtered copy.
"""

from __future__ import annotations

from sparkglass.runtime.sample_result import DataSampleResult, SubtaskSamples


def apply_filters(
    result: DataSampleResult, *, subtask_index: int | None, max_records: int | None
) -> DataSampleResult:
    """Keep only ``subtask_index``'s records, then at most ``max_records`` records.

    ``max_records`` is shared fairly: records are taken round-robin across subtasks (each
    subtask keeps its oldest first), so one busy partition cannot crowd out the others.
    Cutting records sets ``totalTruncated``; ``totalRecordCount`` counts what is returned.
    """
    samples = result.samples
    if subtask_index is not None:
        samples = [s for s in samples if s.subtask_index == subtask_index]
    truncated = result.total_truncated
    if max_records is not None and sum(len(s.records) for s in samples) > max_records:
        keep = {s.subtask_index: 0 for s in samples}
        left = max_records
        while left > 0:
            progressed = False
            for s in samples:
                if left and keep[s.subtask_index] < len(s.records):
                    keep[s.subtask_index] += 1
                    left -= 1
                    progressed = True
            if not progressed:
                break
        samples = [
            SubtaskSamples(
                subtask_index=s.subtask_index, records=s.records[: keep[s.subtask_index]]
            )
            for s in samples
        ]
        truncated = True
    if samples is result.samples:
        return result
    count = sum(len(s.records) for s in samples)
    return result.model_copy(
        update={"samples": samples, "total_record_count": count, "total_truncated": truncated}
    )


def record_count(result: DataSampleResult) -> int:
    """How many records a result carries."""
    return sum(len(s.records) for s in result.samples)


__all__ = ["apply_filters", "record_count"]

"""Query-parameter post-filters applied to a cached result (``subtaskIndex``, ``maxRecords``).

The cached result is never changed; each caller gets a filtered copy.
"""

from __future__ import annotations

from sparkglass.runtime.contract.sample_result import DataSampleResult, post_filter


def apply_filters(
    result: DataSampleResult, *, subtask_index: int | None, max_records: int | None
) -> DataSampleResult:
    """Keep only ``subtask_index``'s records, then at most ``max_records`` records (a copy).

    The same cut the driver makes (:func:`sparkglass.runtime.contract.sample_result.post_filter`):
    ``max_records`` is shared in proportion to each subtask's records, each subtask keeps
    its oldest; cutting sets ``totalTruncated``, ``totalRecordCount`` counts what is returned.
    """
    return post_filter(result, subtask_index, max_records)


def record_count(result: DataSampleResult) -> int:
    """How many records a result carries."""
    return sum(len(s.records) for s in result.samples)


__all__ = ["apply_filters", "record_count"]

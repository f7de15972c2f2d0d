"""The post-filters (``subtaskIndex``, ``maxRecords``) that the driver and the service share."""

from __future__ import annotations

from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
    post_filter,
)


def skewed() -> DataSampleResult:
    # 8 records on subtask 0, 2 on subtask 1: proportional and round-robin sharing differ.
    samples = [
        SubtaskSamples(
            subtask_index=i,
            records=[
                SampledRecord(sample_timestamp=t, data=f'{{"i":{t}}}', data_type="x")
                for t in range(n)
            ],
        )
        for i, n in ((0, 8), (1, 2))
    ]
    return DataSampleResult(
        status=SampleStatus.PARTIAL,
        round_id="r-1",
        total_record_count=10,
        failed_subtasks=[2],
        samples=samples,
    )


def test_max_records_is_shared_in_proportion_like_the_driver() -> None:
    result = skewed()
    got = post_filter(result, None, 5)
    assert [len(s.records) for s in got.samples] == [4, 1]  # round-robin would give [3, 2]
    assert got.total_truncated and got.total_record_count == 5
    assert result.total_record_count == 10 and len(result.samples[0].records) == 8  # untouched


def test_subtask_index_narrows_records_and_failed_subtasks() -> None:
    got = post_filter(skewed(), 1, None)
    assert [s.subtask_index for s in got.samples] == [1]
    assert got.failed_subtasks == [] and got.total_record_count == 2
    assert post_filter(skewed(), 2, None).failed_subtasks == [2]

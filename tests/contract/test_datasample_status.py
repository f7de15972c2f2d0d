"""The DataSample status codec: result -> byte-bounded status -> result, checked against the
``status`` schema of ``crds/datasample.yaml`` (what the API server would accept and keep)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sparkglass.runtime.contract.datasample_status import (
    ABANDONED,
    PHASES,
    STATUSES,
    decode,
    encode,
    phase_of,
)
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    ErrorCode,
    NoDataReason,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
)
from tests.support.crd_schema import yaml_documents

CRD = Path(__file__).resolve().parents[2] / "crds" / "datasample.yaml"
RID = "round-7f3a"
BIG = 1_000_000


def _status_schema() -> dict[str, Any]:
    crd = yaml_documents(CRD)[0]
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    # OpenAPI v3 schemas are draft-4 JSON Schema plus x-kubernetes-* keys (ignored here).
    jsonschema.Draft4Validator.check_schema(schema)
    return schema


STATUS_SCHEMA = _status_schema()


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies the operator's status patch: null deletes."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def undeclared_keys(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Keys the API server would prune silently (a structural schema drops unknown fields)."""
    found: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            if key not in props:
                found.append(f"{path}.{key}")
            else:
                found += undeclared_keys(item, props[key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            found += undeclared_keys(item, schema["items"], f"{path}[{i}]")
    return found


def stored(encoded: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    """The status the API server keeps after the patch, validated against the CRD."""
    status = merge_patch(before or {}, encoded)
    jsonschema.Draft4Validator(STATUS_SCHEMA).validate(status)
    assert undeclared_keys(status, STATUS_SCHEMA) == []
    return status


def record(i: int, data: str | None = None, truncated: bool = False) -> SampledRecord:
    return SampledRecord(
        sample_timestamp=1_700_000_000_000 + i,
        data=data if data is not None else json.dumps({"i": i, "carrier": "AA"}),
        data_type="struct<i:int,carrier:string>",
        truncated=truncated,
    )


def samples(**counts: int) -> list[SubtaskSamples]:
    """``samples(s0=3, s2=1)``: subtask 0 with 3 records, subtask 2 with 1."""
    return [
        SubtaskSamples(subtask_index=int(k[1:]), records=[record(i) for i in range(n)])
        for k, n in counts.items()
    ]


FINAL_RESULTS = {
    "Complete": DataSampleResult(
        status=SampleStatus.COMPLETE,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        total_record_count=5,
        total_truncated=True,
        dropped_by_contention=2,
        dropped_by_rate_limit=7,
        samples=samples(s0=3, s1=2),
    ),
    "Partial": DataSampleResult(
        status=SampleStatus.PARTIAL,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        total_record_count=2,
        error_code=ErrorCode.EXECUTOR_UNREACHABLE,
        failed_subtasks=[1, 3],
        samples=samples(s0=1, s2=1),
    ),
    "NoData": DataSampleResult(
        status=SampleStatus.NO_DATA,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        no_data_reason=NoDataReason.NO_MICRO_BATCH,
        last_micro_batch_timestamp=1_700_000_000_500,
    ),
    "Failed": DataSampleResult(
        status=SampleStatus.FAILED,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        error_code=ErrorCode.TIMEOUT,
    ),
    "Disabled": DataSampleResult(status=SampleStatus.DISABLED, round_id=RID),
}


def test_every_final_status_has_a_phase_and_back() -> None:
    final = {s for s in SampleStatus if s is not SampleStatus.PENDING}
    assert set(PHASES) == final
    assert {PHASES[r.status]: r.status for r in FINAL_RESULTS.values()} == {
        phase: r.status for phase, r in FINAL_RESULTS.items()
    }
    reverse = {**{p: s for s, p in PHASES.items()}, "Abandoned": SampleStatus.FAILED}
    assert reverse == STATUSES
    assert ABANDONED == "Abandoned"
    assert set(STATUSES) <= set(STATUS_SCHEMA["properties"]["phase"]["enum"])


@pytest.mark.parametrize("phase", list(FINAL_RESULTS))
def test_round_trip_of_each_final_status(phase: str) -> None:
    result = FINAL_RESULTS[phase]
    encoded = encode(result, BIG)
    assert encoded["phase"] == phase == phase_of(result)
    assert encoded["recordsInStatus"] == result.record_count()
    assert encoded["samplesTruncated"] is False
    # A retried round may have left an errorCode: the patch's nulls clear it.
    before = {"phase": "InProgress", "errorCode": "TOO_MANY_CONCURRENT_ROUNDS", "retries": 1}
    status = stored(encoded, before)
    assert status.get("errorCode") == (result.error_code.value if result.error_code else None)
    assert decode(status, RID) == result
    assert decode(encoded, RID) == result  # the nulls themselves decode to the defaults


def test_partial_keeps_failed_subtasks_and_error_code() -> None:
    status = stored(encode(FINAL_RESULTS["Partial"], BIG))
    assert status["failedSubtasks"] == [1, 3] and status["errorCode"] == "EXECUTOR_UNREACHABLE"
    decoded = decode(status, RID)
    assert decoded is not None
    assert decoded.failed_subtasks == [1, 3]
    assert decoded.error_code is ErrorCode.EXECUTOR_UNREACHABLE


def test_bounded_status_is_round_robin_and_within_bytes() -> None:
    def record(i: int) -> dict[str, Any]:
        return {
            "sampleTimestamp": i,
            "data": json.dumps({"i": i, "p": "x" * 80}),
            "dataType": "struct<i:int,p:string>",
        }

    result = DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "totalRecordCount": 30,
            "samples": [
                {"subtaskIndex": 2, "records": [record(i) for i in range(20)]},
                {"subtaskIndex": 0, "records": [record(i) for i in range(10)]},
            ],
        }
    )
    out = encode(result, 1500)
    kept = {s["subtaskIndex"]: len(s["records"]) for s in out["samples"]}
    assert set(kept) == {0, 2} and abs(kept[0] - kept[2]) <= 1
    assert out["recordsInStatus"] == sum(kept.values()) < 30 and out["samplesTruncated"]
    assert len(json.dumps([r for s in out["samples"] for r in s["records"]])) <= 1500 + 50
    everything = encode(result, 1_000_000)
    assert everything["recordsInStatus"] == 30 and not everything["samplesTruncated"]
    assert everything["errorCode"] is None  # merge-patch null: cleared


def _cost(rec: dict[str, Any]) -> int:
    return len(json.dumps(rec, separators=(",", ":"))) + 1


def test_a_result_cut_by_the_byte_bound_keeps_every_subtask() -> None:
    result = DataSampleResult(
        status=SampleStatus.COMPLETE,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        total_record_count=73,
        samples=samples(s5=50, s1=3, s0=20),
    )
    max_bytes = 2000
    encoded = encode(result, max_bytes)
    status = stored(encoded)
    kept = {s["subtaskIndex"]: s["records"] for s in status["samples"]}
    full = {s.subtask_index: [r.to_json_dict() for r in s.records] for s in result.samples}
    # Every subtask is there, in subtask order, each with its earliest records.
    assert [s["subtaskIndex"] for s in status["samples"]] == [0, 1, 5]
    assert all(kept[i] == full[i][: len(kept[i])] for i in kept)
    assert len(kept[1]) == 3  # the short subtask is exhausted before the cut
    assert abs(len(kept[0]) - len(kept[5])) <= 1 and len(kept[0]) >= len(kept[5])
    # Within the bound, and maximal: the next record in round-robin order does not fit.
    used = sum(_cost(r) for records in kept.values() for r in records)
    assert used <= max_bytes
    nxt = min((i for i in full if len(kept[i]) < len(full[i])), key=lambda i: (len(kept[i]), i))
    assert used + _cost(full[nxt][len(kept[nxt])]) > max_bytes
    # Counts: recordsInStatus is what the status holds; the counters describe the result.
    assert status["recordsInStatus"] == sum(map(len, kept.values())) < 73
    assert status["samplesTruncated"] is True
    assert status["totalRecordCount"] == 73 and status["totalTruncated"] is False
    # Decoding gives the records the status holds; totalTruncated is not set for the byte
    # bound (it speaks of maxRecords and the 5000 cap), totalRecordCount stays the result's.
    decoded = decode(status, RID)
    assert decoded is not None
    assert decoded.record_count() == status["recordsInStatus"]
    assert decoded.total_record_count == 73 and decoded.total_truncated is False
    assert decoded.model_copy(update={"samples": result.samples}) == result


def test_the_bound_counts_each_record_and_its_separator() -> None:
    records = [record(i) for i in range(10, 40)]  # two-digit i: every record has one size
    cost = _cost(records[0].to_json_dict())
    assert {_cost(r.to_json_dict()) for r in records} == {cost}
    result = DataSampleResult(
        status=SampleStatus.COMPLETE,
        total_record_count=30,
        samples=[
            SubtaskSamples(subtask_index=i, records=records[i * 10 : i * 10 + 10]) for i in range(3)
        ],
    )
    for k in (1, 7, 29, 30):
        assert encode(result, k * cost)["recordsInStatus"] == k
        assert encode(result, k * cost - 1)["recordsInStatus"] == k - 1
    assert encode(result, 30 * cost)["samplesTruncated"] is False
    assert encode(result, 30 * cost - 1)["samplesTruncated"] is True


def test_a_zero_byte_bound_keeps_the_counters_only() -> None:
    status = stored(encode(FINAL_RESULTS["Complete"], 0))
    assert status["samples"] == [] and status["recordsInStatus"] == 0
    assert status["samplesTruncated"] is True and status["totalRecordCount"] == 5


def test_a_negative_byte_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_bytes=-1 is out of range: allowed 0 or more"):
        encode(FINAL_RESULTS["Complete"], -1)


TEXTS = [
    json.dumps({"city": "Zürich", "to": "東京", "mood": "😀"}, ensure_ascii=False),
    '{"html":"<script>alert(\\"x\\")</script> &amp; <b>bold</b>"}',
    '{"odd":"back\\\\slash \\n newline \u2028 separator \u0000 nul"}',
    "<?xml version='1.0'?><row a=\"1\">ü &lt;</row>",
]


def test_records_with_non_ascii_and_markup_round_trip() -> None:
    result = DataSampleResult(
        status=SampleStatus.COMPLETE,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        total_record_count=len(TEXTS),
        samples=[
            SubtaskSamples(
                subtask_index=i,
                records=[record(i, text, truncated=i % 2 == 1)],
            )
            for i, text in enumerate(TEXTS)
        ],
    )
    # Through real JSON, as the API server stores and serves it.
    status = json.loads(json.dumps(stored(encode(result, BIG)), ensure_ascii=False))
    assert decode(status, RID) == result
    assert [s["records"][0]["data"] for s in status["samples"]] == TEXTS


def test_the_byte_bound_holds_in_utf8_for_non_ascii_records() -> None:
    records = [record(i, TEXTS[i % len(TEXTS)] * 5) for i in range(40)]
    result = DataSampleResult(
        status=SampleStatus.COMPLETE,
        total_record_count=40,
        samples=[SubtaskSamples(subtask_index=0, records=records)],
    )
    max_bytes = 3000
    status = stored(encode(result, max_bytes))
    kept = status["samples"][0]["records"]
    assert 0 < len(kept) == status["recordsInStatus"] < 40
    utf8 = sum(
        len(json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode()) + 1 for r in kept
    )
    assert utf8 <= sum(_cost(r) for r in kept) <= max_bytes


def test_the_schema_check_is_live() -> None:
    # Unpatched, the nulls are not valid status values: stored() must apply the patch.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(STATUS_SCHEMA).validate(encode(FINAL_RESULTS["NoData"], BIG))
    assert undeclared_keys({"samples": [{"subtaskIndex": 0, "extra": 1}]}, STATUS_SCHEMA) == [
        "status.samples[0].extra"
    ]


@pytest.mark.parametrize("phase", [None, "Pending", "InProgress", "Unknown"])
def test_no_result_before_a_final_phase(phase: str | None) -> None:
    status = {"totalRecordCount": 3} if phase is None else {"phase": phase, "totalRecordCount": 3}
    assert decode(status, RID) is None


def test_abandoned_is_a_failure_with_task_terminated() -> None:
    decoded = decode({"phase": "Abandoned", "message": "driver gone"}, RID)
    assert decoded == DataSampleResult(
        status=SampleStatus.FAILED, round_id=RID, error_code=ErrorCode.TASK_TERMINATED
    )
    kept = decode({"phase": "Abandoned", "errorCode": "TIMEOUT"}, RID)
    assert kept is not None and kept.error_code is ErrorCode.TIMEOUT


def test_failed_without_error_code_is_an_internal_error() -> None:
    decoded = decode({"phase": "Failed"}, RID)
    assert decoded is not None and decoded.status is SampleStatus.FAILED
    assert decoded.error_code is ErrorCode.INTERNAL_ERROR


def test_a_pending_result_is_written_as_failed() -> None:
    pending = DataSampleResult(status=SampleStatus.PENDING, round_id=RID)
    status = stored(encode(pending, BIG))
    assert status["phase"] == "Failed"
    decoded = decode(status, RID)
    assert decoded is not None
    assert (decoded.status, decoded.error_code) == (SampleStatus.FAILED, ErrorCode.INTERNAL_ERROR)


@pytest.mark.parametrize(
    "bad",
    [
        {"totalRecordCount": "many"},
        {"samples": [{"subtaskIndex": -1, "records": []}]},
        {"errorCode": "OUT_OF_CHEESE"},
    ],
)
def test_a_status_off_contract_is_an_internal_error_ended_now(bad: dict[str, Any]) -> None:
    before = int(time.time() * 1000)
    decoded = decode({"phase": "Complete", **bad}, RID)
    after = int(time.time() * 1000)
    assert decoded is not None
    assert (decoded.status, decoded.error_code, decoded.round_id) == (
        SampleStatus.FAILED,
        ErrorCode.INTERNAL_ERROR,
        RID,
    )
    assert decoded.end_timestamp is not None and before <= decoded.end_timestamp <= after


MORE_RESULTS = [
    *(
        DataSampleResult(
            status=SampleStatus.NO_DATA,
            round_id=RID,
            end_timestamp=1_700_000_003_000,
            no_data_reason=reason,
            last_micro_batch_timestamp=None
            if reason is NoDataReason.QUERY_NOT_ACTIVE
            else 1_700_000_002_000,
        )
        for reason in NoDataReason
    ),
    # A round on a materialized vertex: its rows and when they were written.
    DataSampleResult(
        status=SampleStatus.COMPLETE,
        round_id=RID,
        end_timestamp=1_700_000_003_000,
        total_record_count=2,
        samples=samples(s0=2),
        materialized_at=1_700_000_001_000,
    ),
]


@pytest.mark.parametrize("result", MORE_RESULTS, ids=lambda r: r.no_data_reason or "materialized")
def test_round_trip_of_every_no_data_reason_and_a_materialized_result(
    result: DataSampleResult,
) -> None:
    status = stored(encode(result, BIG))
    assert decode(status, RID) == result

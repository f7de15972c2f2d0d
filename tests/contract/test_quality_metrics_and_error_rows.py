"""The wire form of expectation counts in PipelineMetrics, and the error-row helpers
(Spark-free contracts the driver, the service and the operator share)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from sparkglass.runtime.contract.error_rows import (
    ERROR_COLUMN,
    MAX_ERROR_CHARS,
    OnFailure,
    error_text,
    parse_on_failure,
    scrub,
)
from sparkglass.runtime.contract.expectations import MAX_EXPECTATIONS_PER_VERTEX
from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
from sparkglass.runtime.python_errors import error_row


def test_expectation_counts_round_trip_in_camel_case() -> None:
    wire = {
        "state": "ACTIVE",
        "vertices": {
            "parse": {
                "rowsLastMicroBatch": 10,
                "expectations": {
                    "has-tailnum": {
                        "action": "warn",
                        "passedLastMicroBatch": 9,
                        "failedLastMicroBatch": 1,
                        "passedTotal": 90,
                        "failedTotal": 10,
                    },
                    "not-early": {"action": "drop"},
                },
            },
            "flights": {"rowsLastMicroBatch": 12},
        },
    }
    metrics = PipelineMetrics.model_validate(wire)
    parse = metrics.vertices["parse"].expectations
    assert list(parse) == ["has-tailnum", "not-early"]
    assert parse["not-early"].failed_total == 0  # counts default to 0
    back = metrics.to_json_dict()
    assert back["vertices"]["parse"]["expectations"]["has-tailnum"] == (
        wire["vertices"]["parse"]["expectations"]["has-tailnum"]
    )
    assert back["vertices"]["flights"]["expectations"] == {}
    # An older driver (or operator status) without the field still validates.
    assert PipelineMetrics.model_validate({"vertices": {"v": {}}}).vertices["v"].expectations == {}


@pytest.mark.parametrize(
    ("expectations", "wanted"),
    [
        ({"Not A Label": {"action": "warn"}}, "pattern"),
        ({"ok": {"action": "explode"}}, "action"),
        ({"ok": {"action": "warn", "failedTotal": -1}}, "failedTotal"),
        (
            {f"e{i}": {"action": "warn"} for i in range(MAX_EXPECTATIONS_PER_VERTEX + 1)},
            "at most 32",
        ),
    ],
)
def test_bad_expectation_counts_are_refused_naming_the_field(
    expectations: dict[str, object], wanted: str
) -> None:
    with pytest.raises(ValidationError, match=wanted):
        PipelineMetrics.model_validate({"vertices": {"parse": {"expectations": expectations}}})


_INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ({"activeQueries": 2**63}, "activeQueries"),
        ({"microBatches": 10**400}, "microBatches"),
        ({"observedAt": 2**63}, "observedAt"),
        ({"lastMicroBatchTimestamp": -(2**63) - 1}, "lastMicroBatchTimestamp"),
        ({"vertices": {"v": {"rowsTotal": 10**400}}}, "vertices.v.rowsTotal"),
        ({"vertices": {"v": {"rowsLastMicroBatch": 2**63}}}, "vertices.v.rowsLastMicroBatch"),
        *(
            (
                {"vertices": {"v": {"expectations": {"e": {"action": "warn", key: 10**400}}}}},
                f"vertices.v.expectations.e.{key}",
            )
            for key in (
                "passedTotal", "failedTotal", "passedLastMicroBatch", "failedLastMicroBatch"
            )
        ),
    ],
)
def test_every_int_is_bounded_to_int64_naming_the_field_and_the_bound(
    wire: dict[str, object], field: str
) -> None:
    # Prometheus' text format cannot write a larger int: /metrics failed on every scrape.
    with pytest.raises(ValidationError) as caught:
        PipelineMetrics.model_validate(wire)
    text = str(caught.value)
    assert field in text, text
    assert str(_INT64_MAX) in text or "greater than or equal to -9223372036854775808" in text


def test_int64_bounds_themselves_are_accepted() -> None:
    m = PipelineMetrics.model_validate(
        {
            "microBatches": _INT64_MAX,
            "observedAt": _INT64_MAX,
            "lastMicroBatchTimestamp": -(2**63),
            "vertices": {
                "v": {
                    "rowsTotal": _INT64_MAX,
                    "expectations": {"e": {"action": "warn", "passedTotal": _INT64_MAX}},
                }
            },
        }
    )
    assert m.vertices["v"].expectations["e"].passed_total == _INT64_MAX


def test_on_failure_values() -> None:
    assert parse_on_failure("emit_error", "on_failure") is OnFailure.EMIT_ERROR
    with pytest.raises(ValueError, match=r"on_error='drop' is not allowed: one of 'fail', "):
        parse_on_failure("drop", "on_error")


def test_error_text_masks_redacted_values_and_is_bounded() -> None:
    record = {"tailnum": "N14228", "flight": 1545, "seat": 7, "carrier": "UA"}
    err = KeyError(f"no tail N14228 on flight 1545 seat 7 ({record!r})")
    text = error_text(err, record, ("tailnum", "flight", "seat"))
    assert text.startswith("KeyError: ")
    assert "N14228" not in text and "1545" not in text
    assert "seat 7" in text  # one-character values are not scrubbed (they would mask all 7s)
    assert "UA" in text  # not redacted
    assert len(scrub("x" * 10 * MAX_ERROR_CHARS, {}, ())) == MAX_ERROR_CHARS


def test_error_row_keeps_input_values_that_fit_the_output() -> None:
    schema = pa.schema(
        [("carrier", pa.string()), ("flight", pa.int64()), ("seats", pa.int32()),
         (ERROR_COLUMN, pa.string())]
    )
    row = error_row({"carrier": "UA", "flight": "not-a-number", "extra": 1}, schema, "boom")
    assert row == {"carrier": "UA", "flight": None, "seats": None, ERROR_COLUMN: "boom"}
    assert pa.RecordBatch.from_pylist([row], schema=schema).num_rows == 1

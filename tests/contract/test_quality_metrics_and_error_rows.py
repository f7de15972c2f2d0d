"""The wire form of expectation counts in PipelineMetrics, and the error-row helpers
(Spark-free contracts the driver, the service and the operator share)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import ValidationError

from sparkglass.runtime.contract.error_rows import (
    ERROR_COLUMN,
    MAX_ERROR_CHARS,
    WITHHELD_NOTE,
    OnFailure,
    error_text,
    parse_on_failure,
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


_JANE = {"id": 7, "email": "jane.doe@corp.com", "name": "Jane Doe", "carrier": "UA"}


@pytest.mark.parametrize(
    "message",
    [
        # An async request failing with the URL it called: the value URL-encoded.
        "request failed: url 'https://crm/u?email=jane.doe%40corp.com'",
        # JSON-escaped, as a client library quotes a request body.
        'bad body {"email": "jane.doe\\u0040corp.com"}',
        # Case changed, cut, derived from the value.
        "no user JANE.DOE@CORP.COM",
        "no mailbox jane.doe at corp",
        "name 'Jane Doe' not found (jane_doe)",
        # The exact value (which the old scrubbing did catch) stays out too.
        "no user jane.doe@corp.com",
    ],
)
def test_a_redacted_vertex_keeps_only_the_exception_type(message: str) -> None:
    text = error_text(LookupError(message), _JANE, ("email", "name"))
    assert text == f"LookupError: {WITHHELD_NOTE}"
    for leak in ("jane", "JANE", "corp", "doe", "%40", "u0040"):
        assert leak not in text


def test_the_message_is_withheld_even_when_the_redacted_value_is_null() -> None:
    # The rule decides, not the record: a message may quote a value derived elsewhere.
    record = {"email": None, "user": "jane.doe%40corp.com"}
    assert error_text(KeyError("jane.doe%40corp.com"), record, ["email"]) == (
        f"KeyError: {WITHHELD_NOTE}"
    )


def test_without_redaction_the_message_is_kept_and_bounded() -> None:
    record = {"tailnum": "N14228", "flight": 1545, "carrier": "UA"}
    err = KeyError(f"no tail N14228 on flight 1545 ({record!r})")
    assert error_text(err, record, ()) == f"KeyError: {err}"
    assert len(error_text(ValueError("x" * 10 * MAX_ERROR_CHARS), {}, ())) == MAX_ERROR_CHARS


def test_error_row_keeps_input_values_that_fit_the_output() -> None:
    schema = pa.schema(
        [("carrier", pa.string()), ("flight", pa.int64()), ("seats", pa.int32()),
         (ERROR_COLUMN, pa.string())]
    )
    row = error_row({"carrier": "UA", "flight": "not-a-number", "extra": 1}, schema, "boom")
    assert row == {"carrier": "UA", "flight": None, "seats": None, ERROR_COLUMN: "boom"}
    assert pa.RecordBatch.from_pylist([row], schema=schema).num_rows == 1

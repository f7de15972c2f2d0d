"""The data-sample result: the JSON body users see (docs/architecture.md, "REST contract").

One model serves the driver control endpoint, the REST service and the ``DataSample``
status, so the three can never drift apart. JSON keys are camelCase. Here too: the statuses
and error codes, the hard caps (:data:`MAX_RECORDS_PER_RESPONSE`,
:data:`MAX_CONCURRENT_ROUNDS`, :data:`MAX_RECORDS_PER_SUBTASK`) and the ``subtaskIndex`` /
``maxRecords`` post-filters (:func:`post_filter`). The driver's routes are
:data:`sparkglass.runtime.control.routes.ROUTES` (docs/architecture.md, "The driver control
endpoint").
"""

from __future__ import annotations

import itertools
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.doc_sections import DocSection
from sparkglass.runtime.contract.errors import InvalidParameterError

#: Hard caps (docs/architecture.md): records per response, concurrent rounds per application,
#: records per subtask buffer.
MAX_RECORDS_PER_RESPONSE = 5000
MAX_CONCURRENT_ROUNDS = 5
MAX_RECORDS_PER_SUBTASK = 1000


class SampleStatus(StrEnum):
    """Where a sampling round is, or how it ended."""

    PENDING = "PENDING"
    COMPLETE = "COMPLETE"
    PARTIAL = "PARTIAL"
    NO_DATA = "NO_DATA"
    DISABLED = "DISABLED"
    FAILED = "FAILED"


class ErrorCode(StrEnum):
    """Why a round is ``FAILED`` or ``PARTIAL``."""

    TIMEOUT = "TIMEOUT"
    EXECUTOR_UNREACHABLE = "EXECUTOR_UNREACHABLE"
    TOO_MANY_CONCURRENT_ROUNDS = "TOO_MANY_CONCURRENT_ROUNDS"
    TASK_TERMINATED = "TASK_TERMINATED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class NoDataReason(StrEnum):
    """Why a ``NO_DATA`` round saw no row (an addition to the FLIP fields)."""

    #: The streaming queries that run the vertex ran no micro-batch during the round
    #: (``lastMicroBatchTimestamp`` says when the last one ended).
    NO_MICRO_BATCH = "NO_MICRO_BATCH"
    #: The vertex's tasks ran through the tap during the round but emitted no row.
    NO_ROWS = "NO_ROWS"
    #: No streaming query that runs the vertex is active.
    QUERY_NOT_ACTIVE = "QUERY_NOT_ACTIVE"


#: The largest counter and timestamp a result may carry (a Kubernetes int64).
MAX_INT64 = 2**63 - 1
#: The largest subtask (Spark partition) index: Spark's partition ids are Java ints.
MAX_SUBTASK_INDEX = 2**31 - 1
#: Subtasks a result lists as failed or filter-stopped: the first this many, by index (the
#: DataSample status holds no more, and a round over more partitions still says which).
MAX_LISTED_SUBTASKS = 10_000

# A driver's answer is the application's code speaking: every number is bounded as its
# DataSample status field is, so no answer can make the status unwritable.
_Count = Annotated[int, Field(ge=0, le=MAX_INT64)]
_Subtask = Annotated[int, Field(ge=0, le=MAX_SUBTASK_INDEX)]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, object]:
        """The camelCase JSON-ready dict (the wire form)."""
        return self.model_dump(mode="json", by_alias=True)


class SampledRecord(_Model):
    """One record captured at a vertex output."""

    sample_timestamp: _Count = Field(description="When the row was captured, ms since the epoch.")
    data: str = Field(
        description="The row as Spark's to_json(struct(*)), cut to max-record-length."
    )
    data_type: str = Field(
        description="The row's Spark type, e.g. struct<carrier:string,n:bigint>."
    )
    truncated: bool = Field(default=False, description="True when data was cut.")
    # The FLIP record has four fields: the labels appear only on the rounds that set them.
    expectations: list[str] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Rounds of kind violations: the expectations this row failed.",
    )
    error: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Rounds of kind errors: why the vertex could not process it.",
    )


class SubtaskSamples(_Model):
    """The records of one subtask (Spark partition index)."""

    subtask_index: _Subtask
    records: list[SampledRecord] = Field(default_factory=list)


class DataSampleResult(_Model):
    """The body of ``GET .../data-sample`` and of a round's result. The field descriptions are
    the docs' table of it (:data:`SECTION`) and the DataSample status's counters."""

    status: SampleStatus = Field(description="Where the round is, or how it ended.")
    end_timestamp: _Count | None = Field(
        default=None, description="When the round ended, ms since the epoch."
    )
    round_id: str | None = Field(
        default=None,
        description="The round this result (or the running round, with `PENDING`) belongs to.",
    )
    stale: bool = Field(
        default=False,
        description="True when this is the previous result, answered while a newer round runs "
        "or is due.",
    )
    total_record_count: _Count = Field(default=0, description="Records in this answer.")
    total_truncated: bool = Field(
        default=False,
        description="True when the 5000-record cap or `maxRecords` cut records, or, for a "
        "round read from a materialized (end-of-input) output, the 1000-per-subtask cap left "
        "written rows out.",
    )
    dropped_by_contention: _Count = Field(
        default=0,
        description="Rows the taps admitted by rate but refused: rendering budget used up, "
        "subtask buffer full, or report size cap.",
    )
    dropped_by_rate_limit: _Count = Field(
        default=0,
        description="Rows the rate limit (`max-sample-rate`) left out: rows between two it "
        "took, and records thinned out to keep a subtask within it.",
    )
    error_code: ErrorCode | None = Field(
        default=None, description="Why the round is `FAILED` or `PARTIAL`."
    )
    failed_subtasks: list[_Subtask] = Field(
        default_factory=list,
        max_length=MAX_LISTED_SUBTASKS,
        description="Partitions seen by executors that did not report.",
    )
    filter_stopped_subtasks: list[_Subtask] = Field(
        default_factory=list,
        max_length=MAX_LISTED_SUBTASKS,
        exclude_if=lambda v: not v,
        description="Partitions where the round's `filter` used up its CPU budget (the tap's "
        "`tostring-budget-ms` for each second of the round) and was stopped for the rest of "
        "the round, so that no filter can hold the job's tasks: fewer rows were looked at "
        "there than the window let through. Absent when none.",
    )
    samples: list[SubtaskSamples] = Field(
        default_factory=list,
        description="`[{subtaskIndex, records: [{sampleTimestamp, data, dataType, "
        "truncated}]}]`, by subtask index, records by `sampleTimestamp`; a record of a "
        "`violations` round adds `expectations` (the names it failed), of an `errors` round "
        "`error`.",
    )
    no_data_reason: NoDataReason | None = Field(
        default=None,
        description="With `NO_DATA`, why the round saw no row: `NO_MICRO_BATCH`, `NO_ROWS` or "
        "`QUERY_NOT_ACTIVE`.",
    )
    last_micro_batch_timestamp: _Count | None = Field(
        default=None,
        description="Streaming vertices: when the last micro-batch of the vertex's queries "
        "ended, ms since the epoch.",
    )
    materialized_at: _Count | None = Field(
        default=None,
        description="Set when the records are the vertex's materialized output (an "
        "end-of-input vertex), each row at most once: when it was written, ms since the epoch.",
    )

    def record_count(self) -> int:
        """How many records this result carries (after any post-filter)."""
        return sum(len(s.records) for s in self.samples)


# The query parameters are post-filters on a cached result, and the driver and the service
# must cut the same way: one implementation, here with the contract.
def fair_truncate(
    samples: list[SubtaskSamples], cap: int, counts: list[int] | None = None
) -> tuple[list[SubtaskSamples], bool]:
    """Keep at most ``cap`` records, each subtask's share proportional to its count.

    Quotas are ``floor(n_i * cap / N)``; leftover slots go to the largest remainders (ties:
    lower subtask index). Each subtask keeps its earliest records. ``counts`` (one per
    subtask, default: how many records each holds) are the records each subtask had before
    the driver cut its report down: the driver keeps ``floor(n_i * cap / N) + 1`` or more of
    them, so the cut is the one the whole reports would have given. Returns the new list and
    whether anything was cut.
    """
    ns = [len(s.records) for s in samples]
    if counts is not None:  # a count below the records held would let the cap be passed
        ns = [max(n, c) for n, c in zip(ns, counts, strict=True)]
    total = sum(ns)
    if total <= cap:
        return samples, False
    quotas = [n * cap // total for n in ns]
    remainders = sorted(
        range(len(samples)), key=lambda i: (-(ns[i] * cap % total), samples[i].subtask_index)
    )
    for i in itertools.islice(itertools.cycle(remainders), cap - sum(quotas)):
        quotas[i] += 1
    cut = [
        SubtaskSamples(subtask_index=s.subtask_index, records=s.records[:q])
        for s, q in zip(samples, quotas, strict=True)
    ]
    return cut, True


def validate_post_filter(
    subtask_index: int | None, max_records: int | None
) -> tuple[int | None, int | None]:
    """Check the ``subtaskIndex`` (0 or more) and ``maxRecords`` (1–5000) query parameters.

    Raises :class:`~sparkglass.runtime.contract.errors.InvalidParameterError` naming the
    parameter and its allowed range.
    """
    if subtask_index is not None and subtask_index < 0:
        raise InvalidParameterError(
            f"subtaskIndex={subtask_index} is out of range: allowed 0 or more", field="subtaskIndex"
        )
    if max_records is not None and not 1 <= max_records <= MAX_RECORDS_PER_RESPONSE:
        raise InvalidParameterError(
            f"maxRecords={max_records} is out of range: allowed 1–{MAX_RECORDS_PER_RESPONSE}",
            field="maxRecords",
        )
    return subtask_index, max_records


def post_filter(
    result: DataSampleResult, subtask_index: int | None, max_records: int | None
) -> DataSampleResult:
    """Apply the ``subtaskIndex`` / ``maxRecords`` query parameters to a result (a copy)."""
    if subtask_index is None and max_records is None:
        return result.model_copy(deep=True)
    samples = result.samples
    failed = result.failed_subtasks
    stopped = result.filter_stopped_subtasks
    if subtask_index is not None:
        samples = [s for s in samples if s.subtask_index == subtask_index]
        failed = [f for f in failed if f == subtask_index]
        stopped = [f for f in stopped if f == subtask_index]
    truncated = result.total_truncated
    if max_records is not None:
        samples, cut = fair_truncate(samples, max_records)
        truncated = truncated or cut
    return result.model_copy(
        update={
            "samples": [s.model_copy(deep=True) for s in samples],
            "failed_subtasks": list(failed),
            "filter_stopped_subtasks": list(stopped),
            "total_record_count": sum(len(s.records) for s in samples),
            "total_truncated": truncated,
        }
    )


def _json_type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A reader's name for a JSON schema type: ``integer or null``, ``integer list``."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in schema:
        kinds = [_json_type(s, defs) for s in schema["anyOf"]]
        nullable = " or null" if "null" in kinds else ""
        return " or ".join(k for k in kinds if k != "null") + nullable
    if schema.get("type") == "array":
        item = _json_type(schema.get("items", {}), defs)
        return f"{item} list" if item in ("integer", "string") else "list"
    if "enum" in schema:
        return "string"
    return str(schema.get("type", "object"))


def result_fields_table() -> str:
    """The fields of :class:`DataSampleResult` as a Markdown table (docs/architecture.md)."""
    schema = DataSampleResult.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    lines = ["| field | type | meaning |", "|---|---|---|"]
    for name, field in DataSampleResult.model_fields.items():
        alias = field.alias or name
        kind = _json_type(schema["properties"][alias], defs)
        lines.append(f"| `{alias}` | {kind} | {field.description} |")
    return "\n".join(lines) + "\n"


#: The table in the docs, generated from the model's field descriptions.
SECTION = DocSection(
    "result fields",
    "python -m sparkglass.runtime.contract.sample_result",
    Path("docs/architecture.md"),
    result_fields_table,
)


if __name__ == "__main__":
    raise SystemExit(SECTION.main(sys.argv[1:]))

"""Live metrics of a running pipeline: the body of the driver's ``GET /api/v1/progress`` and
of the service's ``GET /api/v1/namespaces/{ns}/applications/{app}/progress``.

One model for both, so the page, the service and the driver agree. JSON keys are camelCase;
rates are rows per second, timestamps ms since the epoch. The numbers come from Spark's
``StreamingQueryProgress`` and the pipeline's observed metrics (one ``count`` per vertex
output, see ``sparkglass.runtime.Pipeline``), and the pass and fail counts of each expectation
(``sparkglass.runtime.quality``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.expectations import (
    MAX_EXPECTATIONS_PER_VERTEX,
    NAME_PATTERN,
    ExpectationAction,
    ExpectationCounts,
)

#: The largest int any field here may hold: int64, as the CRD's ``status.progress`` says.
#: A driver is the application's own code, and an unbounded int (``10**400``) used to pass
#: the contract and make Prometheus' ``generate_latest`` raise ``OverflowError`` on every
#: ``/metrics`` scrape while the service kept the snapshot.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

#: A count of rows, micro-batches or queries: 0 to :data:`INT64_MAX`.
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
#: A timestamp in ms since the epoch, within int64 like the counts.
Millis = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class QueryState(StrEnum):
    """Where the pipeline's streaming queries are, as one word.

    ``NOT_STARTED``: ``start()`` has not started a streaming query (or the pipeline is
    bounded and ran no query). ``ACTIVE``: at least one query runs. ``STOPPED``: every query
    ended without an error. ``FAILED``: a query ended with an exception (``failed`` says
    which and why).
    """

    NOT_STARTED = "NOT_STARTED"
    ACTIVE = "ACTIVE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, object]:
        """The camelCase JSON-ready dict (the wire form)."""
        return self.model_dump(mode="json", by_alias=True)


class ExpectationMetrics(_Model):
    """Rows that passed and failed one expectation of a vertex.

    ``passed_last_micro_batch`` / ``failed_last_micro_batch``: in the latest micro-batch that
    ran the vertex; ``passed_total`` / ``failed_total``: since the pipeline started. Counted by
    Spark's observed metrics, so on streaming vertices only (a bounded vertex's stay 0). A row
    that fails several expectations counts as failed for each.
    """

    action: ExpectationAction
    passed_last_micro_batch: Count = 0
    failed_last_micro_batch: Count = 0
    passed_total: Count = 0
    failed_total: Count = 0


#: An expectation's name as a key (a DNS-1123 label, like the vertex names): the service puts
#: these names into metric labels and URLs, so the contract checks them on the way in.
ExpectationName = Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]


class VertexMetrics(_Model):
    """Rows at one vertex's output.

    ``rows_last_micro_batch``: rows in the latest micro-batch that ran the vertex.
    ``rows_per_second``: those rows divided by the time since the previous micro-batch of the
    same query started (Spark's definition of ``inputRowsPerSecond``; the batch's duration
    for a query's first micro-batch). ``rows_total``: rows since the pipeline started.
    Several queries reading the same vertex each count it; the largest count is kept.
    """

    rows_last_micro_batch: Count = 0
    rows_per_second: float = Field(default=0.0, ge=0)
    rows_total: Count = 0
    #: Per expectation name, in declaration order (empty: the vertex declares none).
    expectations: dict[ExpectationName, ExpectationMetrics] = Field(
        default_factory=dict, max_length=MAX_EXPECTATIONS_PER_VERTEX
    )


class PipelineMetrics(_Model):
    """A snapshot of the pipeline's streaming progress.

    ``micro_batches``: completed micro-batches over all its queries. ``input_rows_per_second``
    and ``processed_rows_per_second``: the largest of the queries' last reported rates.
    ``last_micro_batch_timestamp``: when the latest micro-batch ended (ms), ``None`` before the
    first. ``observed_at``: when the driver took the snapshot (ms). ``vertices``: per vertex
    name, for the vertices a micro-batch counted rows at and the vertices that declare
    expectations (there with their counts, 0 before the first micro-batch and on bounded
    vertices); other bounded vertices are absent.
    """

    state: QueryState = QueryState.NOT_STARTED
    active_queries: Count = 0
    failed: str | None = None
    micro_batches: Count = 0
    input_rows_per_second: float = Field(default=0.0, ge=0)
    processed_rows_per_second: float = Field(default=0.0, ge=0)
    last_micro_batch_timestamp: Millis | None = None
    observed_at: Millis = 0
    vertices: dict[str, VertexMetrics] = Field(default_factory=dict)

    def expectation_counts(self) -> list[ExpectationCounts]:
        """The expectations' counts as the driver's ``GET /api/v1/expectations`` lists them:
        one entry per (vertex, expectation), vertices in this snapshot's order, expectations
        in declaration order."""
        return [
            ExpectationCounts(
                vertex=vertex,
                name=name,
                action=counts.action,
                passed=counts.passed_total,
                failed=counts.failed_total,
                passed_last_batch=counts.passed_last_micro_batch,
                failed_last_batch=counts.failed_last_micro_batch,
            )
            for vertex, metrics in self.vertices.items()
            for name, counts in metrics.expectations.items()
        ]

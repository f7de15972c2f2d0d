"""Emitting only the latest row per key per micro-batch (the use of ``idempotent(key)``).

A streaming vertex can emit many rows for one key in one micro-batch (a per-record "current
status" of a carrier, a running counter): each is the final result for its key *at that
time*, so only the latest matters downstream (FLIP-365's idea). :func:`latest_per_key` keeps
it with a grouping on the key and the micro-batch's timestamp, so the vertex stays an
ordinary streaming DataFrame that any downstream step can use.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkglass.runtime.contract.errors import PlanError

log = logging.getLogger(__name__)

#: Internal column names (Spark column names; vertex outputs never start with "__sg").
BATCH_TIME_COLUMN = "__sg_batch_time"
ROW_COLUMN = "__sg_row"

#: Logical plan nodes that already keep per-key state; another one after them is not safe.
_STATEFUL_NODES = frozenset(
    {
        "FlatMapGroupsWithState",
        "FlatMapGroupsInPandasWithState",
        "TransformWithState",
        "TransformWithStateInPySpark",
        "Deduplicate",
        "DeduplicateWithinWatermark",
    }
)


def _node_names(jplan: Any) -> set[str]:
    names: set[str] = set()
    stack = [jplan]
    while stack:
        node = stack.pop()
        names.add(str(node.nodeName()))
        children = node.children()
        stack.extend(children.apply(k) for k in range(children.size()))
    return names


def stateful_operators(df: DataFrame) -> set[str]:
    """Names of the stateful logical operators in ``df``'s analyzed plan (``Aggregate``, …)."""
    names = _node_names(df._jdf.queryExecution().analyzed())
    return names & (_STATEFUL_NODES | {"Aggregate"})


def latest_per_key(
    df: DataFrame, key: Sequence[str], *, order_by: str | None = None, vertex: str
) -> DataFrame:
    """``df`` reduced to its latest row per ``key`` per micro-batch (same columns and order).

    A bounded ``df`` is returned unchanged (its one output is final), and so is a stream that
    already aggregates or keeps other per-key state (see the limits below). Raises
    :class:`PlanError` naming ``vertex`` when a key or ``order_by`` column is missing.

    How, in Structured Streaming. A streaming plan has no "current micro-batch" grouping and
    no window functions, and ``monotonically_increasing_id`` is rejected on streams, so:

    * every row gets the micro-batch's timestamp (``current_timestamp()`` is fixed per
      micro-batch in a streaming query) as a column with a zero-delay watermark;
    * rows are grouped by ``(key…, batch timestamp)`` and each group keeps
      ``max_by(row, order_by)`` — or, without ``order_by``, ``last(row)``: the last row each
      task emitted (rows of one key from different tasks of the same micro-batch have no
      order; one of them is kept).

    Each group lives in exactly one micro-batch, so the state store holds at most one row per
    key of the current batch, and the watermark evicts it right after. In *update* output
    mode the row leaves in the same micro-batch; in *append* mode it leaves when the
    watermark passes, i.e. in the next (possibly no-data) micro-batch, which Spark runs at
    once. The alternative, ``foreachBatch`` with a window function, would have to take over
    the sink (its writer, output mode and checkpoint) and re-run downstream vertices per
    batch.

    Limits: a vertex that already is a streaming aggregation emits one row per group per
    micro-batch (update/complete mode), so it is returned unchanged — and Spark could not
    chain a second aggregation after it in those modes anyway; likewise a vertex with another
    stateful operator is left unchanged (logged). With other event-time watermarks in the
    query, Spark's global watermark is their minimum, which would hold our groups back in
    append mode; use update mode there.
    """
    wanted = [*key, *([order_by] if order_by else [])]
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise PlanError(
            f"vertex {vertex!r} is idempotent by {list(key)}"
            + (f" ordered by {order_by!r}" if order_by else "")
            + f", but its output has no column(s) {missing}; columns: {df.columns}",
            vertex=vertex,
        )
    if not df.isStreaming:
        return df
    stateful = stateful_operators(df)
    if "Aggregate" in stateful:
        log.info("%s: a streaming aggregation already emits one row per group per batch", vertex)
        return df
    if stateful:
        log.warning("%s: not thinned: it already has stateful operators %s", vertex, stateful)
        return df
    row = F.struct(*[df[c] for c in df.columns])
    latest = F.max_by(row, df[order_by]) if order_by else F.last(row)
    stamped = df.withColumn(BATCH_TIME_COLUMN, F.current_timestamp()).withWatermark(
        BATCH_TIME_COLUMN, "0 seconds"
    )
    grouped = stamped.groupBy(*[stamped[k] for k in key], stamped[BATCH_TIME_COLUMN])
    return grouped.agg(latest.alias(ROW_COLUMN)).select(f"{ROW_COLUMN}.*")

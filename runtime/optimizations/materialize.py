"""Materializing an end-of-input vertex's output once, reliably (the use of FLIP-331's attribute).

The output of a ``noOutputUntilEndOfInput`` chain is written once as Parquet files and read
back; downstream steps (a stream-static join's static side above all) then scan those files
instead of recomputing the chain for every job or micro-batch.

Why written files and not ``cache()``/``localCheckpoint()``: cached and locally checkpointed
blocks live on executors, so losing an executor loses them (a local checkpoint cannot even be
recomputed, its lineage is cut). Files under the pipeline's checkpoint root live on the
storage streaming checkpoints already need to be reliable (a shared volume or object store on
Kubernetes), so the output survives executor loss, and Parquet keeps column pruning and
statistics for the readers. Why not ``DataFrame.checkpoint()``: it needs
``SparkContext.setCheckpointDir`` (a global setting we should not take over) and stores
opaque RDD blocks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pyspark.sql import DataFrame

from sparkglass.runtime.contract.errors import PlanError

log = logging.getLogger(__name__)


def materialize(df: DataFrame, path: str | Path, *, vertex: str) -> DataFrame:
    """Write bounded ``df`` once under ``path`` (Parquet, overwriting) and return its read-back.

    Blocks until the write finished: that is the phase boundary. The returned DataFrame has
    the same columns and types (Parquet reads every column back as nullable). ``vertex`` names
    the vertex in errors and logs. Raises :class:`PlanError` if ``df`` is streaming (an
    unbounded output never ends, so it cannot be materialized).
    """
    if df.isStreaming:
        raise PlanError(
            f"vertex {vertex!r} is declared noOutputUntilEndOfInput but its output is a stream; "
            "only a bounded output can be materialized",
            vertex=vertex,
        )
    target = str(path)
    started = time.monotonic()
    df.write.mode("overwrite").parquet(target)
    log.info("materialized %s to %s in %.2f s", vertex, target, time.monotonic() - started)
    restored = df.sparkSession.read.parquet(target)
    # Parquet may reorder nothing, but be explicit: downstream code selects by position too.
    return restored.select(*[restored[c] for c in df.columns])

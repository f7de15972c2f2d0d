"""A pipeline's progress counts its own queries only: Spark delivers every query's progress
events to every listener of the session, so another pipeline (or any other query) must not
add its micro-batches and rows, even under the same vertex names; nor may an earlier run on
the same checkpoint (the same query id, another run id). Stand-in progress events
here (the fields the listener reads); on Spark in
``tests/runtime/test_pipeline_metrics.py::test_two_pipelines_of_one_session_count_their_own``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sparkglass.runtime.pipeline import OBSERVATION_PREFIX, UNCLAIMED_PROGRESS, Pipeline


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


@dataclass
class Progress:
    """A ``StreamingQueryProgress`` of one micro-batch in which ``parse`` emitted ``rows``."""

    runId: str
    batchId: int
    rows: int
    timestamp: str = field(default_factory=_now_iso)
    batchDuration: int = 100
    inputRowsPerSecond: float = 10.0
    processedRowsPerSecond: float = 10.0

    @property
    def id(self) -> str:  # the query's id: the same for every run on its checkpoint
        return "query-of-the-checkpoint"

    @property
    def observedMetrics(self) -> dict[str, Any]:
        return {f"{OBSERVATION_PREFIX}parse": {"rows": self.rows}}


@dataclass
class Query:
    """A running streaming query as far as ``progress()`` reads it."""

    runId: str
    id: str = "query-of-the-checkpoint"
    isActive: bool = True


def test_another_runs_progress_is_not_counted() -> None:
    p = Pipeline("mine")
    p._note_query("out", Query("run-mine"))  # type: ignore[arg-type]
    p._on_progress(Progress("run-other", 0, 1000))  # another run on the same checkpoint
    p._on_progress(Progress("run-mine", 0, 7))
    got = p.progress()
    assert got.micro_batches == 1
    assert got.vertices["parse"].rows_total == 7


def test_progress_before_the_query_id_was_noted_is_counted_once_noted() -> None:
    p = Pipeline("mine")
    # The listener bus can deliver a fast first micro-batch before start() noted the id.
    p._on_progress(Progress("run-mine", 0, 5))
    p._on_progress(Progress("run-other", 0, 1000))
    assert p.progress().micro_batches == 0
    p._note_query("out", Query("run-mine"))  # type: ignore[arg-type]
    p._on_progress(Progress("run-mine", 1, 6))
    got = p.progress()
    assert got.micro_batches == 2 and got.vertices["parse"].rows_total == 11


def test_other_queries_progress_kept_aside_is_bounded() -> None:
    p = Pipeline("mine")
    for batch in range(UNCLAIMED_PROGRESS * 10):
        p._on_progress(Progress("run-other", batch, 1))
    assert len(p._unclaimed) == UNCLAIMED_PROGRESS
    p._note_query("out", Query("run-mine"))  # type: ignore[arg-type]
    assert p.progress().micro_batches == 0

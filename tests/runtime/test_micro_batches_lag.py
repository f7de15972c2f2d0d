"""``Pipeline.micro_batches`` while the query listener lags: each query's own latest progress
answers, read at most every ``QUERY_PROGRESS_CACHE_S``; an idle query's no-data progress is
not a micro-batch. Stand-in queries (only ``lastProgress`` is read); the real query path is
tested on Spark in ``tests/sampling/test_spark_rounds.py``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkglass.runtime.pipeline import Pipeline, _MicroBatch

NOW_MS = int(time.time() * 1000)


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


@dataclass
class Progress:
    timestamp: str
    batchDuration: int
    id: str = "query-1"
    durationMs: dict[str, int] = field(default_factory=lambda: {"addBatch": 5})


class Query:
    """A streaming query as far as the fallback reads it."""

    def __init__(self, progress: Progress | None = None, error: Exception | None = None) -> None:
        self.progress, self.error, self.reads = progress, error, 0

    @property
    def lastProgress(self) -> Progress | None:
        self.reads += 1
        if self.error is not None:
            raise self.error
        return self.progress


def pipeline_with(query: Query, listened: list[_MicroBatch] | None = None) -> Pipeline:
    p = Pipeline("lagging")
    p._queries = {"out": query}  # type: ignore[dict-item]
    p._query_ids = {"out": "query-1"}
    p._sinks_downstream_of = lambda vertex: {"out"}  # type: ignore[method-assign]
    for batch in listened or []:
        p._batches.append(batch)
    return p


def test_a_batch_the_listener_has_not_delivered_counts_without_rows() -> None:
    q = Query(Progress(_iso(NOW_MS - 1000), 200))
    seen = pipeline_with(q).micro_batches("v", NOW_MS - 5000)
    assert seen is not None
    assert (seen.completed, seen.rows, seen.last_end_ms) == (1, None, NOW_MS - 800)


def test_idle_no_data_progress_is_not_a_micro_batch() -> None:
    idle = Progress(_iso(NOW_MS - 1000), 3, durationMs={"latestOffset": 1, "triggerExecution": 3})
    seen = pipeline_with(Query(idle)).micro_batches("v", NOW_MS - 5000)
    assert seen is not None and (seen.completed, seen.last_end_ms) == (0, None)


def test_an_earlier_batch_gives_when_the_last_one_ended_but_no_count() -> None:
    q = Query(Progress(_iso(NOW_MS - 9000), 500))
    seen = pipeline_with(q).micro_batches("v", NOW_MS - 5000)
    assert seen is not None and (seen.completed, seen.last_end_ms) == (0, NOW_MS - 8500)


@pytest.mark.parametrize("error", [RuntimeError("py4j: gateway gone"), ValueError("bad time")])
def test_a_query_that_cannot_answer_counts_nothing(error: Exception) -> None:
    seen = pipeline_with(Query(error=error)).micro_batches("v", NOW_MS - 5000)
    assert seen is not None and seen.completed == 0


def test_the_query_is_read_at_most_every_cache_interval() -> None:
    q = Query(Progress(_iso(NOW_MS - 9000), 500))
    p = pipeline_with(q)
    for _ in range(20):  # a round's monitor, every 50 ms while it waits
        p.micro_batches("v", NOW_MS - 5000)
    assert q.reads == 1


def test_the_listener_answers_alone_when_it_has_a_batch(monkeypatch: Any) -> None:
    q = Query(Progress(_iso(NOW_MS - 1000), 200))
    listened = _MicroBatch("query-1", NOW_MS - 3000, NOW_MS - 2900, {"v": 7})
    seen = pipeline_with(q, [listened]).micro_batches("v", NOW_MS - 5000)
    assert seen is not None and (seen.completed, seen.rows) == (1, 7)
    assert q.reads == 0  # no Py4J call while the listener keeps up

"""The async vertex's task body without Spark: batching, back-pressure, order, errors."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from sparkglass.runtime.async_ops.async_vertex import _Plan, make_options, run_partition
from sparkglass.runtime.async_ops.errors import AsyncRequestError

SCHEMA = StructType([StructField("id", LongType())])


def plan(fn: Any, **options: Any) -> _Plan:
    return _Plan(key=uuid.uuid4().hex, fn=fn, options=make_options(**options), schema=SCHEMA)


def batches(*sizes: int) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        out.append(
            pa.RecordBatch.from_pylist(
                [{"id": i} for i in range(start, start + size)],
                schema=pa.schema([("id", pa.int64())]),
            )
        )
        start += size
    return out


class Tracker:
    """Sleeps a random few ms per record; records the peak number running at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.rng = random.Random(1)

    async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.rng.uniform(0, 0.004))
        finally:
            self.running -= 1
        return record


@pytest.mark.parametrize("ordered", [True, False])
def test_many_batches_small_output_batches(ordered: bool) -> None:
    tracker = Tracker()
    out = list(
        run_partition(
            plan(tracker, capacity=16, ordered=ordered, max_batch_rows=50),
            iter(batches(100, 0, 37, 250)),
        )
    )
    ids = [row["id"] for b in out for row in b.to_pylist()]
    assert sorted(ids) == list(range(387))
    if ordered:
        assert ids == list(range(387))
    assert all(b.num_rows <= 50 for b in out)
    assert tracker.peak == 16


def test_input_is_read_only_when_a_slot_is_free() -> None:
    events: list[str] = []

    async def fn(record: dict[str, Any]) -> dict[str, Any]:
        events.append(f"call {record['id']}")
        await asyncio.sleep(0.01)
        return record

    def source():  # type: ignore[no-untyped-def]
        for batch in batches(4, 4, 4):
            events.append(f"read {batch.to_pylist()[0]['id']}")
            yield batch

    out = list(run_partition(plan(fn, capacity=4), source()))
    assert sum(b.num_rows for b in out) == 12
    # Batch 2 is read only after all of batch 1 started *and* one of them finished.
    assert events.index("read 4") > events.index("call 3")


def test_empty_partition() -> None:
    async def fn(record: dict[str, Any]) -> None:
        raise AssertionError("never called")

    assert list(run_partition(plan(fn), iter([]))) == []


def test_bad_return_value_fails_the_task() -> None:
    async def fn(record: dict[str, Any]) -> Any:
        return 42

    with pytest.raises(AsyncRequestError, match="expected a dict"):
        list(run_partition(plan(fn), iter(batches(5))))


def test_failure_cancels_the_rest() -> None:
    started: list[int] = []
    cancelled: list[int] = []

    async def fn(record: dict[str, Any]) -> dict[str, Any]:
        started.append(record["id"])
        if record["id"] == 3:
            raise ConnectionError("down")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(record["id"])
            raise
        return record

    with pytest.raises(AsyncRequestError, match="ConnectionError: down"):
        list(run_partition(plan(fn, capacity=8), iter(batches(100))))
    assert len(started) == 8 and sorted(cancelled) == [i for i in range(8) if i != 3]

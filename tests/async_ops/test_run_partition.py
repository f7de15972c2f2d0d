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
from sparkglass.runtime.contract.error_rows import WITHHELD_NOTE

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


def _error_plan(fn: Any, **options: Any) -> _Plan:
    """A plan emitting error rows: the schema has the error column, as ``async_map`` adds it."""
    from pyspark.sql.types import StringType

    from sparkglass.runtime.contract.error_rows import ERROR_COLUMN

    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField(ERROR_COLUMN, StringType()),
        ]
    )
    opts = make_options(on_failure="emit_error", **options)
    return _Plan(key=uuid.uuid4().hex, fn=fn, options=opts, schema=schema)


@pytest.mark.parametrize("ordered", [True, False])
def test_emit_error_puts_an_error_row_in_place_of_a_failed_request(ordered: bool) -> None:
    from sparkglass.runtime.async_ops.retry import FixedDelayRetry

    calls: dict[int, int] = {}

    async def fn(record: dict[str, Any]) -> dict[str, Any]:
        calls[record["id"]] = calls.get(record["id"], 0) + 1
        if record["id"] % 3 == 0:
            raise ConnectionError(f"lookup of secret-{record['id']:03d} refused")
        return {"id": record["id"], "name": f"n{record['id']}"}

    rows = [
        row
        for b in run_partition(
            _error_plan(
                fn,
                ordered=ordered,
                retry=FixedDelayRetry(max_attempts=3, delay_s=0.001),
                secret_columns=("secret",),
            ),
            iter(
                [
                    pa.RecordBatch.from_pylist(
                        [{"id": i, "secret": f"secret-{i:03d}"} for i in range(10)]
                    )
                ]
            ),
        )
        for row in b.to_pylist()
    ]
    assert sorted(r["id"] for r in rows) == list(range(10))  # nothing lost, nothing raised
    if ordered:
        assert [r["id"] for r in rows] == list(range(10))
    for row in rows:
        if row["id"] % 3:
            assert row["__sg_error"] is None and row["name"] == f"n{row['id']}"
        else:
            assert row["name"] is None  # the input has no such column
            # The input has a redacted column: the message (which quotes it) is withheld.
            assert row["__sg_error"] == f"AsyncRequestError: {WITHHELD_NOTE}"
            assert calls[row["id"]] == 3  # retried first


def test_emit_error_keeps_only_input_values_that_fit_the_output_type() -> None:
    async def fn(record: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("x" * 5000)

    rows = [
        row
        for b in run_partition(
            _error_plan(fn), iter([pa.RecordBatch.from_pylist([{"id": 1, "name": 7}])])
        )
        for row in b.to_pylist()
    ]
    from sparkglass.runtime.contract.error_rows import MAX_ERROR_CHARS

    assert rows[0]["id"] == 1 and rows[0]["name"] is None  # an int is no string: null
    assert len(rows[0]["__sg_error"]) == MAX_ERROR_CHARS  # cut on the executor


def test_emit_error_does_not_swallow_a_bad_return_value() -> None:
    async def fn(record: dict[str, Any]) -> Any:
        return 42  # a bug in fn, not a failed request: the task still fails

    with pytest.raises(AsyncRequestError, match="returned int"):
        list(
            run_partition(
                _error_plan(fn), iter([pa.RecordBatch.from_pylist([{"id": 1, "name": "a"}])])
            )
        )


def test_on_failure_is_checked_by_name() -> None:
    from sparkglass.runtime.async_ops.errors import AsyncConfigError

    with pytest.raises(AsyncConfigError, match=r"on_failure.*'fail' or 'emit_error'"):
        make_options(on_failure="skip")

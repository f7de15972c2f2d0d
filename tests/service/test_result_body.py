"""Bodies written from the store a page at a time (service/result_body.py) are byte for byte
what the whole result's ``model_dump_json`` gives, post-filters included, on SQLite and
PostgreSQL; a page holds at most ``PAGE_BYTES`` of record data (or one larger record), and
the stream gate lets a bounded number of bodies through at once."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import DataSampleResult, post_filter
from sparkglass.service import result_body
from sparkglass.service.result_body import plan_body, render_body
from sparkglass.service.store import get_round, load_result, open_store, repository, save_round


def records(subtask: int, n: int) -> list[dict[str, Any]]:
    # Quotes, backslashes, newlines and non-ASCII: the escaping must match pydantic's.
    return [
        {
            "sampleTimestamp": 1_700_000_000_000 + i,
            "data": f'{subtask}-{i}-"é\\\n' * (i % 5 + 1),
            "dataType": "string",
            "truncated": i % 3 == 0,
        }
        for i in range(n)
    ]


@pytest.mark.parametrize(
    "filters",
    [(None, None), (2, None), (None, 7), (0, 5), (9, None), (None, 1), (4, 3), (None, 5000)],
)
def test_rendered_body_is_the_whole_results_json(
    db_url: str, filters: tuple[int | None, int | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small pages and chunks: many pages per subtask, many chunks per body.
    monkeypatch.setattr(result_body, "PAGE_BYTES", 300)
    monkeypatch.setattr(result_body, "CHUNK_BYTES", 1000)
    sessions = open_store(db_url)
    result = DataSampleResult.model_validate(
        {
            "status": "PARTIAL",
            "errorCode": "EXECUTOR_UNREACHABLE",
            "failedSubtasks": [4, 2],
            "samples": [
                {"subtaskIndex": s, "records": records(s, n)} for s, n in [(0, 70), (2, 3), (5, 40)]
            ],
            "lastMicroBatchTimestamp": 5,
        }
    )
    with sessions.begin() as session:
        save_round(
            session, namespace="local", application="a", vertex="v", result=result, round_id="r1"
        )
    with sessions() as session:
        row = get_round(session, "r1")
        assert row is not None
        whole = load_result(session, row)
        plan = plan_body(session, repository.round_head(row), *filters)
    chunks = list(render_body(sessions, plan))
    want = post_filter(whole, *filters).model_dump_json(by_alias=True).encode()
    assert b"".join(chunks) == want
    assert plan.record_count == post_filter(whole, *filters).record_count()
    assert max(len(c) for c in chunks) < 1000 + 200  # a chunk passes the size by a record at most
    sessions.kw["bind"].dispose()


# ------------------------------------------------------------------------ pages by bytes
def test_page_planner_bounds_pages_in_bytes_and_never_splits_a_record() -> None:
    plan = result_body.plan_pages
    assert plan([], 100) == []
    sizes = [(1, 40), (2, 40), (3, 40), (5, 250), (8, 10), (9, 100), (12, 1)]
    pages = plan(sizes, 100)
    assert [(p.after_id, p.last_id, p.count, p.size) for p in pages] == [
        (None, 2, 2, 80),  # 40 + 40; one more would pass 100
        (2, 3, 1, 40),
        (3, 5, 1, 250),  # larger than the budget alone: a page of its own
        (5, 8, 1, 10),
        (8, 9, 1, 100),
        (9, 12, 1, 1),
    ]
    # Every record exactly once, in order; every page within the budget unless one record.
    rng = random.Random(7)
    sizes = [(i * 3 + 1, rng.choice([0, 1, 500, 9_000, 1_000_000, 2_000_000])) for i in range(3000)]
    pages = plan(sizes, result_body.PAGE_BYTES)
    assert sum(p.count for p in pages) == len(sizes)
    assert all(p.size <= result_body.PAGE_BYTES or p.count == 1 for p in pages)
    assert all(p.count <= result_body.PAGE_MAX_RECORDS for p in pages)
    ids = iter(i for i, _ in sizes)
    after = None
    for p in pages:
        assert p.after_id == after
        for _ in range(p.count):
            last = next(ids)
        assert p.last_id == last
        after = last


def test_pages_read_from_the_store_stay_within_the_byte_budget(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records of up to max-record-length (1,000,000 characters), some of multi-byte
    # characters: a page of 100 records used to be read whole (~100 MB).
    sessions = open_store(db_url)
    rng = random.Random(3)
    widths = [rng.choice([10, 20_000, 300_000, 1_000_000]) for _ in range(60)]
    recs = [
        {
            "sampleTimestamp": i,
            "data": ("é" if i % 4 == 0 else "x") * w,
            "dataType": "string",
            "truncated": False,
        }
        for i, w in enumerate(widths)
    ]
    result = DataSampleResult.model_validate(
        {"status": "COMPLETE", "samples": [{"subtaskIndex": 3, "records": recs}]}
    )
    with sessions.begin() as session:
        save_round(
            session, namespace="local", application="a", vertex="v", result=result, round_id="big"
        )
    read: list[int] = []
    real_read_page = result_body.read_page

    def measured(*args: Any) -> Any:
        page = real_read_page(*args)
        read.append(sum(len(r.data.encode()) + len(r.data_type.encode()) for _, r in page))
        assert len(page) == 1 or read[-1] <= result_body.PAGE_BYTES, read[-1]
        return page

    monkeypatch.setattr(result_body, "read_page", measured)
    with sessions() as session:
        row = get_round(session, "big")
        assert row is not None
        plan = plan_body(session, repository.round_head(row))
    body = b"".join(render_body(sessions, plan))
    assert len(read) > 20  # many pages
    assert max(read) <= max(result_body.PAGE_BYTES, 2 * 1_000_000 + 6)
    parsed = DataSampleResult.model_validate_json(body)
    assert [len(r.data) for r in parsed.samples[0].records] == widths
    sessions.kw["bind"].dispose()


def test_records_saved_again_meanwhile_are_not_read_in_place_of_the_planned_ones(
    db_url: str,
) -> None:
    # The operator may save a round again (restart), and SQLite may give the new records the
    # old ids: a page is bounded by its planned size where it is read, and comes back short
    # (the body then ends early) rather than larger than planned.
    sessions = open_store(db_url)
    small = DataSampleResult.model_validate(
        {"status": "COMPLETE", "samples": [{"subtaskIndex": 0, "records": records(0, 5)}]}
    )
    with sessions.begin() as session:
        save_round(
            session, namespace="local", application="a", vertex="v", result=small, round_id="again"
        )
    with sessions() as session:
        sizes = result_body.record_sizes(session, "again", 0, 5)
        pages = result_body.plan_pages(sizes, 10**9)
    big = DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [
                        {"sampleTimestamp": i, "data": "y" * 300_000, "dataType": "string"}
                        for i in range(5)
                    ],
                }
            ],
        }
    )
    with sessions.begin() as session:
        save_round(
            session, namespace="local", application="a", vertex="v", result=big, round_id="again"
        )
    with sessions() as session:
        page = result_body.read_page(session, "again", 0, pages[0])
    # Within what was planned (5 small records) or PAGE_BYTES, whatever the ids.
    assert sum(len(r.data) for _, r in page) <= max(pages[0].size, result_body.PAGE_BYTES)
    # PostgreSQL never reuses ids (nothing planned is left); SQLite may: then 3 records of
    # 300 kB fit in PAGE_BYTES (1 MiB), a 4th would not.
    assert len(page) == (0 if db_url.startswith("postgresql") else 3)
    sessions.kw["bind"].dispose()


# --------------------------------------------------------------------------- stream gate
async def test_stream_gate_waits_in_order_times_out_and_survives_cancellation() -> None:
    gate = result_body.StreamGate(1)
    assert await gate.acquire(0)
    assert not await gate.acquire(0)  # full: refused at once with no wait
    began = time.monotonic()
    assert not await gate.acquire(0.2)  # waited, then gave up
    assert time.monotonic() - began >= 0.19
    order: list[str] = []

    async def wait(name: str) -> None:
        assert await gate.acquire(5)
        order.append(name)
        gate.release()

    first = asyncio.create_task(wait("first"))
    await asyncio.sleep(0.01)
    cancelled = asyncio.create_task(gate.acquire(5))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    gate.release()  # from the holder: to the first waiter still waiting
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert order == ["first", "second"]
    assert gate.in_use == 0


async def test_stream_gate_is_released_from_another_thread() -> None:
    gate = result_body.StreamGate(1)
    assert await gate.acquire(0)
    waiting = asyncio.create_task(gate.acquire(5))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(gate.release)
    assert await asyncio.wait_for(waiting, 5)
    assert gate.in_use == 1
    gate.release()
    assert gate.in_use == 0

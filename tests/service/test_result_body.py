"""Bodies written from the store a page at a time (service/result_body.py) are byte for byte
what the whole result's ``model_dump_json`` gives, post-filters included, on SQLite and
PostgreSQL."""

from __future__ import annotations

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
    monkeypatch.setattr(result_body, "PAGE_RECORDS", 7)
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
        save_round(session, namespace="local", application="a", vertex="v", result=result,
                   round_id="r1")
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

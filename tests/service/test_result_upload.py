"""The operator hands a DataSample's result to the service (``operator/results.py``, the
route ``service/routers/results.py``), which saves it in its store: PostgreSQL and SQLite."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

from sqlalchemy import text

from sparkglass.operator.results import ResultPush
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.store import count_rounds, finished_result, open_store, save_round
from tests.support.result_service import ResultService, serve_results

RESULT = DataSampleResult.model_validate(
    {
        "status": "COMPLETE",
        "samples": [
            {
                "subtaskIndex": 0,
                "records": [{"sampleTimestamp": 1, "data": '{"a":1}', "dataType": "struct<a:int>"}],
            }
        ],
        "totalRecordCount": 1,
    }
)


def test_first_rounds_of_an_application_saved_at_once_both_land(
    postgres_database: Callable[[str], AbstractContextManager[str]], tmp_path: Path
) -> None:
    """Two DataSamples of an application the store does not know yet finish together: both
    saves create its row, the second one fails on the unique key once the first commits, and
    the store saves it again in a fresh transaction instead of failing the DataSample's step."""
    with postgres_database("sg_results") as url, serve_results(url, tmp_path) as service:
        sessions = open_store(url)  # migrated by the service
        with sessions() as first, ThreadPoolExecutor(1) as pool:
            # The first save holds the new application row, uncommitted.
            save_round(
                first, namespace="ns", application="flights", vertex="parse", result=RESULT,
                round_id="first",
            )  # fmt: skip
            second = pool.submit(
                asyncio.run,
                push(service).save(
                    namespace="ns", application="flights", vertex="parse", result=RESULT,
                    uid="second",  # no round bound to it: saved under the uid
                    name="ds-2",
                    started_at_ms=None,
                    request_key="",
                    max_record_length=100,
                ),
            )  # fmt: skip

            def waiting_on_a_lock() -> bool:
                with sessions() as s:
                    return bool(
                        s.execute(
                            text(
                                "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock'"
                            )
                        ).first()
                    )

            deadline = time.monotonic() + 60
            while not waiting_on_a_lock():  # the second insert waits for the first commit
                assert not second.done(), second.result()
                assert time.monotonic() < deadline, "the second save never reached the row lock"
                time.sleep(0.05)
            first.commit()
            assert second.result(timeout=60) == "second"
        with sessions() as s:
            assert count_rounds(s) == 2
            assert s.execute(text("SELECT count(*) FROM applications")).scalar_one() == 1
            stored = finished_result(s, "second")
            assert stored is not None and stored.total_record_count == 1


def push(service: ResultService) -> ResultPush:
    """The operator's client for ``service``."""
    return ResultPush(service.url, str(service.token_file))

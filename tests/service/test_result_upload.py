"""Saving full results in the service's store (``operator/results.py``) on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from sqlalchemy import text

from sparkglass.operator.results import ResultStore
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.store import count_rounds, finished_result, save_round

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
    postgres_database: Callable[[str], AbstractContextManager[str]],
) -> None:
    """Two DataSamples of an application the store does not know yet finish together: both
    saves create its row, the second one fails on the unique key once the first commits, and
    the store saves it again in a fresh transaction instead of failing the DataSample's step."""
    with postgres_database("sg_results") as url:
        store = ResultStore(url)
        sessions = store._open()  # migrated
        with sessions() as first, ThreadPoolExecutor(1) as pool:
            # The first save holds the new application row, uncommitted.
            save_round(
                first, namespace="ns", application="flights", vertex="parse", result=RESULT,
                round_id="first",
            )  # fmt: skip
            second = pool.submit(
                asyncio.run,
                store.save(
                    namespace="ns", application="flights", vertex="parse", result=RESULT,
                    uid="second",  # no round bound to it: saved under the uid
                    name="ds-2",
                    started_at_ms=None,
                    request_key="",
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

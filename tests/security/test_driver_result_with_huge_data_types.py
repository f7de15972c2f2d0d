"""Attack on the service's result caps from a hostile driver: huge ``dataType`` strings.

The service (local execution mode) checks a driver's result one subtask at a time against
the contract's caps: 5000 records, 1000 per subtask, each record's ``data`` at most
``max-record-length`` characters. The ``dataType`` string every record carries was not
capped, so a driver (the application's own code) answered records of one character with a
type of hundreds of kilobytes each, and the service accepted and stored all of it: 5000
such records are gigabytes, past every budget ``max-record-length`` was meant to keep. Now a
``dataType`` longer than 64 Ki characters fails the round (nothing stored), saying which cap.

The service's executor against the fake driver over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import pytest

from sparkglass.runtime.contract.result_caps import MAX_DATA_TYPE_LENGTH, ResultRejected
from sparkglass.service.execution.base import RoundRequest
from sparkglass.service.execution.local import LocalDriverExecutor
from tests.service.fake_driver import ServerThread
from tests.support.scripted_driver import PIPELINE, TOKEN, FakeDriver, VertexScript

pytestmark = pytest.mark.timeout(120)

TYPE_CHARS = 200_000  # one record's dataType: ~3x the cap, 20 MB for 100 records


def hostile_script(vertex: str) -> VertexScript:
    """Records of one character whose type (the vertex's) is hundreds of kilobytes."""
    records = [{"sampleTimestamp": 1, "data": "x"} for _ in range(100)]
    return VertexScript(
        partitions=lambda: [{"subtaskIndex": 0, "records": records}],
        data_type="s" * TYPE_CHARS,
        delay_s=0.1,
    )


def test_records_with_huge_data_types_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = FakeDriver(pending_seconds=0.1)
    monkeypatch.setattr(driver, "script", hostile_script)
    executor = LocalDriverExecutor()
    try:
        with ServerThread(driver.app()) as server:
            request = RoundRequest(
                round_id="r1",
                namespace="local",
                application="flights",
                vertex=PIPELINE.vertices[0].name,
                sampling_window=None,
                timeout_s=30,
                poll_interval_s=0.05,
                requested_by="test",
                driver_url=server.url,
                driver_token=TOKEN,
            )
            outcome = executor.run(request)
            assert outcome.samples is not None, outcome.result
            with pytest.raises(ResultRejected) as refused:
                stored = sum(len(r.data_type) for sub in outcome.samples for r in sub.records)
                pytest.fail(f"{stored} characters of dataType accepted")
            assert "dataType" in str(refused.value)
            assert str(MAX_DATA_TYPE_LENGTH) in str(refused.value)
    finally:
        executor.close()

"""Attack (review item A4): the service's memory was bounded per page of records, not per
request, and not across requests. A page was 100 records, and a record may be
``max-record-length`` (1,000,000) characters, so one page of a stored round could be about
100 MB; bodies streamed from the store had no concurrency gate, so 40 parallel polls of a
large result could take gigabytes.

Now a page holds about ``PAGE_BYTES`` (1 MiB) of record data (at least one record), and at
most ``stream_concurrency`` bodies are written from the store at once; a request beyond
waits up to ``stream_wait_seconds`` for a slot (holding no records meanwhile), then gets
503 with ``Retry-After``.

Against the real service (``sparkglass serve`` on 127.0.0.1, SQLite store) holding a stored
round of 40 records of 1,000,000 characters, read by clients that stop reading (so each
body stays open, holding whatever its writer holds).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.store import open_store, repository
from tests.security.service_process import TOKENS, ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(300)

RECORDS = 40
WIDTH = 1_000_000  # the largest max-record-length
ROUND = "big-round-0001"
ROUND_PATH = f"/api/v1/namespaces/local/applications/flights/rounds/{ROUND}"
SAMPLE_PATH = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
MB = 1024 * 1024


def store_big_round(svc: ServiceProcess) -> None:
    """A finished round of ``parse`` with ``RECORDS`` records of ``WIDTH`` characters, saved
    in the service's store as the operator or a driver round would."""
    sessions = open_store(f"sqlite:///{svc.tmp / 'service.db'}")
    records = [
        {
            "sampleTimestamp": 1_700_000_000_000 + i,
            "data": f"{i:04d}" + "x" * (WIDTH - 4),
            "dataType": "string",
            "truncated": False,
        }
        for i in range(RECORDS)
    ]
    result = DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "endTimestamp": repository.now_ms(),
            "totalRecordCount": RECORDS,
            "samples": [{"subtaskIndex": 0, "records": records}],
        }
    )
    with sessions.begin() as session:
        repository.save_round(
            session,
            namespace="local",
            application="flights",
            vertex="parse",
            result=result,
            round_id=ROUND,
        )
    sessions.kw["bind"].dispose()


def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


class StalledReader:
    """A client that asks for ``path``, reads the head and the first body bytes, then stops
    reading: the service's writer is left blocked with whatever it holds."""

    def __init__(self, svc: ServiceProcess, path: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", svc.port), timeout=30)
        # A small receive buffer, so that the kernel holds little of the body for us.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        token = TOKENS["viewer"]
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 1:
            chunk = self.sock.recv(4096)
            assert chunk, f"closed before the body started: {data[:300]!r}"
            data += chunk
        self.status = int(data.split(b" ", 2)[1])

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    driver = FakeDriver()
    with ServerThread(driver.app()) as server:
        running: list[ServiceProcess] = []

        def start_service(**settings: str) -> ServiceProcess:
            folder = tmp_path / f"svc{len(running)}"
            folder.mkdir()
            svc = ServiceProcess(
                folder,
                server.url,
                SPARKGLASS_RESULT_CACHE_BYTES="0",  # every body is written from the store
                SPARKGLASS_REFRESH_INTERVAL_SECONDS="600",
                **settings,
            ).__enter__()
            running.append(svc)
            store_big_round(svc)
            return svc

        yield start_service
        for svc in running:
            svc.__exit__(None, None, None)


def stable_rss_kb(svc: ServiceProcess) -> int:
    """The service's RSS once it stopped moving (three equal-ish readings in a row)."""
    readings: list[int] = []

    def settled() -> bool:
        readings.append(svc.rss_kb())
        last = readings[-3:]
        return len(last) == 3 and max(last) - min(last) < 2048

    until(settled, 20, "the service's memory settled")
    return readings[-1]


def test_open_bodies_of_huge_records_hold_about_a_page_each(
    start: Callable[..., ServiceProcess],
) -> None:
    svc = start(SPARKGLASS_STREAM_CONCURRENCY="8")
    # Warm up (imports, the store's first queries) with a whole body read once.
    with httpx.Client(base_url=svc.url, timeout=120) as http:
        r = http.get(ROUND_PATH, headers=bearer("viewer"))
        assert r.status_code == 200 and r.json()["totalRecordCount"] == RECORDS
        assert len(r.json()["samples"][0]["records"][39]["data"]) == WIDTH
    base = stable_rss_kb(svc)
    readers = [StalledReader(svc, ROUND_PATH if i % 2 else SAMPLE_PATH) for i in range(6)]
    try:
        assert [r.status for r in readers] == [200] * 6
        grown_mb = (stable_rss_kb(svc) - base) / 1024
        print(f"RSS grew {grown_mb:.1f} MB for 6 open bodies of 40 MB each")
        # Each open body holds about one page (1 MiB) and one record (1 MB) besides its
        # chunk: about 20 MB for six (248 MB when a page was 100 records, ~40 MB here).
        assert grown_mb < 60, f"{grown_mb:.0f} MB for 6 open bodies"
    finally:
        for r in readers:
            r.close()


def test_bodies_beyond_stream_concurrency_wait_then_get_503(
    start: Callable[..., ServiceProcess],
) -> None:
    svc = start(SPARKGLASS_STREAM_CONCURRENCY="2", SPARKGLASS_STREAM_WAIT_SECONDS="1")
    held = [StalledReader(svc, ROUND_PATH), StalledReader(svc, SAMPLE_PATH)]
    try:
        with httpx.Client(base_url=svc.url, timeout=60) as http:
            for path in (ROUND_PATH, SAMPLE_PATH):
                began = time.monotonic()
                r = http.get(path, headers=bearer("viewer"))
                waited = time.monotonic() - began
                assert r.status_code == 503, r.text[:200]
                assert int(r.headers["retry-after"]) >= 1
                assert "stream_concurrency" in r.json()["detail"]
                assert waited >= 0.9, waited  # it waited for a slot first
        held.pop().close()

        def served() -> bool:
            with httpx.Client(base_url=svc.url, timeout=120) as http:
                return http.get(ROUND_PATH, headers=bearer("viewer")).status_code == 200

        until(served, 30, "a body was served once a slot was free")
    finally:
        for r in held:
            r.close()


def test_a_waiting_body_is_served_when_a_slot_frees(
    start: Callable[..., ServiceProcess],
) -> None:
    svc = start(SPARKGLASS_STREAM_CONCURRENCY="1", SPARKGLASS_STREAM_WAIT_SECONDS="60")
    holder = StalledReader(svc, ROUND_PATH)

    def read() -> tuple[int, int]:
        with httpx.Client(base_url=svc.url, timeout=120) as http:
            r = http.get(ROUND_PATH, headers=bearer("viewer"))
            return r.status_code, len(r.content)

    def waiting_for_a_slot() -> bool:
        with httpx.Client(base_url=svc.url, timeout=30) as http:
            text = http.get("/metrics").text
        return (
            "sparkglass_result_streams_waiting 1.0" in text
            and "sparkglass_result_streams_in_use 1.0" in text
        )

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(read)
        # The service says the request waits for the one slot, so the 200 below was served
        # after a wait, not to a request that arrived once the slot was free.
        until(waiting_for_a_slot, 60, "the request to wait for the slot")
        assert not waiting.done()
        holder.close()
        status, size = waiting.result(timeout=120)
    assert status == 200 and size > RECORDS * WIDTH


def test_stream_settings_are_bounded() -> None:
    from pydantic import ValidationError

    from sparkglass.service.settings import Settings

    with pytest.raises(ValidationError, match="stream_concurrency"):
        Settings(stream_concurrency=0)
    with pytest.raises(ValidationError, match="stream_wait_seconds"):
        Settings(stream_wait_seconds=-1)

"""AsyncSinkWriter (FLIP-177 pattern): back-pressure, mailbox completions, retries,
cancellation; in-process and in real Spark tasks against the real service."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pyspark import cloudpickle

from sparkglass.runtime.async_ops.async_sink import AsyncSinkWriter, InitContext, write_partitions
from sparkglass.runtime.async_ops.errors import (
    AsyncConfigError,
    AsyncRequestError,
    AsyncTimeoutError,
    WriterInterruptedError,
)
from sparkglass.runtime.async_ops.mailbox import MailboxExecutor
from sparkglass.runtime.async_ops.retry import ExponentialBackoffRetry, FixedDelayRetry
from sparkglass.runtime.async_ops.worker_loop import worker_loop

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class EchoWriter(AsyncSinkWriter[Any]):
    """Writes each element (an int or a Row with ``id``) as GET /echo/{id}."""

    def __init__(
        self,
        context: InitContext,
        url: str,
        *,
        delay_ms: int | None = None,
        report_dir: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(context, **options)
        self.url = url
        self.delay_ms = delay_ms
        self.report_dir = report_dir
        self.session: aiohttp.ClientSession | None = None
        self.results: list[tuple[int, int]] = []
        self.result_threads: set[int] = set()

    async def send(self, element: Any) -> int:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        key = element if isinstance(element, int) else element["id"]
        params = {} if self.delay_ms is None else {"delay_ms": str(self.delay_ms)}
        async with self.session.get(f"{self.url}/echo/{key}", params=params) as resp:
            resp.raise_for_status()
            return int((await resp.json())["served"])

    def on_result(self, element: Any, result: int) -> None:
        key = element if isinstance(element, int) else element["id"]
        self.results.append((key, result))
        self.result_threads.add(threading.get_ident())

    def close(self) -> None:
        super().close()
        if self.report_dir is not None:
            ctx = self.context
            report = {
                "subtask": ctx.subtask_id,
                "of": ctx.number_of_parallel_subtasks,
                "attempt": ctx.attempt_number,
                "written": self.completed,
            }
            Path(self.report_dir, f"{ctx.subtask_id}.json").write_text(json.dumps(report))
        if self.session is not None:
            asyncio.run_coroutine_threadsafe(self.session.close(), worker_loop()).result(5)


def local_context() -> InitContext:
    return InitContext.for_current_task(1)


def test_capacity_bounds_in_flight_and_results_run_in_the_task_thread(weather) -> None:
    weather.configure(latency_ms=10, jitter_ms=20)
    writer = EchoWriter(local_context(), weather.url, capacity=8)
    for i in range(200):
        writer.write(i)
        assert writer.in_flight <= 8
    writer.flush()
    writer.close()
    assert writer.completed == 200 and writer.in_flight == 0
    assert sorted(k for k, _ in writer.results) == list(range(200))
    assert writer.result_threads == {threading.get_ident()}
    assert 1 < weather.stats().max_in_flight <= 8


def test_retries_go_through_the_mailbox(weather) -> None:
    weather.configure(fail_times=2, fail_keys=["3", "7"])
    writer = EchoWriter(
        local_context(),
        weather.url,
        capacity=4,
        retry=ExponentialBackoffRetry(max_attempts=3, initial_delay_s=0.01),
    )
    for i in range(10):
        writer.write(i)
    writer.flush()
    assert dict(writer.results)[3] == dict(writer.results)[7] == 3
    assert writer.result_threads == {threading.get_ident()}


def test_final_failure_raises_from_flush(weather) -> None:
    weather.configure(fail_times=5, fail_keys=["4"])
    writer = EchoWriter(
        local_context(), weather.url, retry=FixedDelayRetry(max_attempts=2, delay_s=0.01)
    )
    for i in range(10):
        writer.write(i)
    with pytest.raises(AsyncRequestError, match="after 2 attempt"):
        writer.flush()
    writer.close()


def test_timeout_covers_the_element(weather) -> None:
    writer = EchoWriter(local_context(), weather.url, delay_ms=30_000, timeout_s=0.2)
    writer.write(1)
    started = time.monotonic()
    with pytest.raises(AsyncTimeoutError):
        writer.flush()
    assert time.monotonic() - started < 10  # 0.2 s timeout, not the 30 s answer
    writer.close()


def test_cancel_interrupts_a_blocked_write_at_once(weather) -> None:
    writer = EchoWriter(local_context(), weather.url, delay_ms=30_000, capacity=2)
    writer.write(1)
    writer.write(2)
    threading.Timer(0.3, writer.cancel).start()
    started = time.monotonic()
    with pytest.raises(WriterInterruptedError):
        writer.write(3)  # full: blocks until cancelled
    assert time.monotonic() - started < 10  # cancelled at 0.3 s, not after the 30 s answers
    writer.close()  # cancels the two hanging sends
    assert time.monotonic() - started < 15


def test_mailbox_runs_only_in_its_owner_thread() -> None:
    mailbox = MailboxExecutor()
    ran: list[int] = []
    t = threading.Thread(target=lambda: mailbox.execute(lambda: ran.append(threading.get_ident())))
    t.start()
    t.join()
    assert mailbox.yield_(1.0) and ran == [threading.get_ident()]
    assert not mailbox.try_yield()
    errors: list[BaseException] = []

    def other() -> None:
        try:
            mailbox.yield_(0.1)
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors


def test_bad_writer_parameters() -> None:
    with pytest.raises(AsyncConfigError, match="capacity"):
        EchoWriter(local_context(), "http://127.0.0.1:1", capacity=0)
    with pytest.raises(AsyncConfigError, match="timeout_s"):
        EchoWriter(local_context(), "http://127.0.0.1:1", timeout_s=0)


@pytest.mark.spark
def test_write_partitions_in_spark(spark, weather, tmp_path) -> None:
    weather.configure(latency_ms=10, fail_times=1, fail_keys=["11", "222"])
    df = spark.range(0, 300, numPartitions=3)
    url, report = weather.url, str(tmp_path)

    def make(ctx: InitContext) -> EchoWriter:
        return EchoWriter(
            ctx,
            url,
            capacity=6,
            report_dir=report,
            retry=FixedDelayRetry(max_attempts=2, delay_s=0.01),
        )

    write_partitions(df, make)
    stats = weather.stats()
    assert stats.ok == 300 and stats.failed == 2
    assert stats.max_in_flight <= 12  # two tasks at a time, six each
    reports = sorted(
        (json.loads(p.read_text()) for p in tmp_path.glob("*.json")), key=lambda r: r["subtask"]
    )
    assert [(r["subtask"], r["of"], r["attempt"], r["written"]) for r in reports] == [
        (0, 3, 0, 100),
        (1, 3, 0, 100),
        (2, 3, 0, 100),
    ]


@pytest.mark.spark
def test_cancelling_the_job_ends_the_writer_promptly(spark, weather) -> None:
    sc = spark.sparkContext
    url = weather.url
    df = spark.range(0, 100, numPartitions=2)
    outcome: dict[str, Any] = {}

    def run() -> None:
        sc.setJobGroup("sg-async-cancel", "async sink cancellation test", interruptOnCancel=True)
        try:
            # Every write takes 60 s: the writers block in write() on a full mailbox.
            write_partitions(df, lambda ctx: EchoWriter(ctx, url, delay_ms=60_000, capacity=5))
        except Exception as exc:  # the cancellation surfaces as a job failure
            outcome["error"] = str(exc)
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while weather.stats().in_flight < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert weather.stats().in_flight >= 10  # both tasks full (5 each), blocked in write()
    cancelled = time.monotonic()
    sc.cancelJobGroup("sg-async-cancel")
    thread.join(20)
    assert not thread.is_alive()
    assert "cancel" in outcome["error"].lower()
    assert outcome["ended"] - cancelled < 10
    # No hung worker: the next job gets Python workers and runs at once.
    started = time.monotonic()
    assert spark.range(0, 10, numPartitions=2).rdd.map(lambda x: x).count() == 10
    assert time.monotonic() - started < 10

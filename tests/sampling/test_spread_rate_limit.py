"""A round spreads its rate limit over the rows of its window, not the first moment of a burst.

Spark runs a streaming vertex in bursts: one task per partition and micro-batch, thousands of
rows in a few tens of milliseconds. A limit that counts time (the earlier token bucket, one
second of tokens) spent itself on the first rows of each burst, and a round whose window
passed before a micro-batch closed as soon as that micro-batch's first rows reached the tap.
The flights demo's first sample of ``parse`` held 1 record at the default settings.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.contract.sampling_settings import CONF_KEYS, SamplingSettings
from sparkglass.runtime.sampling.rounds import (
    ACTIVATION_MS,
    MicroBatches,
    RoundCoordinator,
    TapInfo,
)
from tests.sampling.java_check import run_java_check

CHECK = Path(__file__).parent / "java" / "SpreadRateLimitCheck.java"


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_a_burst_is_sampled_evenly_within_the_allowance(tmp_path: Path) -> None:
    run_java_check(CHECK, "io.sparkglass.sampling.SpreadRateLimitCheck", tmp_path)


# ------------------------------------------------ the driver: a micro-batch after the window
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Batches:
    """What the query listener reports: micro-batches that ended, by start time (wall ms), and
    how long the latest one before the round took (ms; ``None``: none ran before)."""

    def __init__(self, last_duration_ms: int | None = None) -> None:
        self.started_ms: list[int] = []
        self.last_duration_ms = last_duration_ms

    def run(self) -> None:
        self.started_ms.append(int(time.time() * 1000))

    def __call__(self, since_ms: int) -> MicroBatches:
        return MicroBatches(
            completed=sum(1 for s in self.started_ms if s >= since_ms),
            rows=5,
            last_duration_ms=self.last_duration_ms,
        )


def streaming_round(transport: Any, clock: Clock, batches: Batches) -> tuple[Any, str]:
    s = SamplingSettings(enabled=True, sampling_window_ms=1000, timeout_ms=10_000)
    c = RoundCoordinator(
        transport, lambda: s, round_prefix="1700000000000", check_interval_s=0.01, clock=clock
    )
    c.register_tap(TapInfo("parse", "p/parse/s", "struct<x:int>", lambda: True, batches))
    rid = c.start_round("parse").round_id
    assert rid is not None
    return c, rid


def stays_open(transport: Any, rid: str, seconds: float = 0.3) -> bool:
    """True when the round was not told to stop within ``seconds`` (checks every 10 ms)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if transport.rounds[rid].cancelled:
            return False
        time.sleep(0.01)
    return True


def wait_rows_seen(coordinator: Any, rid: str, timeout: float = 5.0) -> None:
    """Until the coordinator's check saw the executors' progress (it stamps when)."""
    deadline = time.monotonic() + timeout
    while coordinator._running[rid].rows_seen_ms is None:
        assert time.monotonic() < deadline, "the coordinator did not see the rows"
        time.sleep(0.01)


def wait_cancelled(transport: Any, rid: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not transport.rounds[rid].cancelled:
        assert time.monotonic() < deadline, "the round was not told to stop"
        time.sleep(0.01)


def test_rows_after_the_window_keep_the_round_open_for_their_micro_batch(transport, make_partition):
    """The window passed with no row; then a micro-batch reaches the tap. Closing on its
    first rows kept only them: the round waits until the listener reports it ended."""
    clock, batches = Clock(), Batches()
    c, rid = streaming_round(transport, clock, batches)
    clock.now += 1.5  # the window is over, no micro-batch yet
    assert stays_open(transport, rid)
    transport.rounds[rid].progress["1"] = [0]  # its first rows passed the tap
    assert stays_open(transport, rid)
    time.sleep(ACTIVATION_MS / 1000)  # it started after the executors opened their taps
    batches.run()  # ... and ended
    wait_cancelled(transport, rid)
    transport.report(rid, "1", [make_partition(0, 3)])
    transport.report(rid, "2", [])
    assert c.wait(rid, 5).status is SampleStatus.COMPLETE


def test_rows_after_the_window_close_the_round_a_window_later_without_the_listener(transport):
    """A listener that lags (or a micro-batch longer than a window) does not hold the round to
    its timeout: a window after the first rows came, it ends."""
    clock, batches = Clock(), Batches()
    _, rid = streaming_round(transport, clock, batches)
    clock.now += 1.5
    transport.rounds[rid].progress["1"] = [0]
    assert stays_open(transport, rid)
    clock.now += 1.0  # a window after the rows came
    wait_cancelled(transport, rid)


def test_rows_in_the_window_of_a_micro_batch_longer_than_it_keep_the_round_open(transport):
    """On a loaded machine a micro-batch outlasts the window: its rows reach the tap within
    the window, and closing with the window kept the first rows of each partition only. The
    round waits for the micro-batch to end, or as long as the latest one took after the rows
    came."""
    clock, batches = Clock(), Batches(last_duration_ms=4000)
    c, rid = streaming_round(transport, clock, batches)
    clock.now += 0.5
    transport.rounds[rid].progress["1"] = [0]  # rows within the window
    wait_rows_seen(c, rid)
    clock.now += 1.0  # the window is over
    assert stays_open(transport, rid)
    clock.now += 2.0  # 3 s after the rows came: the latest micro-batch took 4 s
    assert stays_open(transport, rid)
    clock.now += 1.0
    wait_cancelled(transport, rid)


def test_rows_in_the_window_close_the_round_once_their_micro_batch_ended(transport):
    """The listener reports the micro-batch ended: the round ends then, not a whole earlier
    micro-batch's duration after its rows."""
    clock, batches = Clock(), Batches(last_duration_ms=60_000)
    c, rid = streaming_round(transport, clock, batches)
    transport.rounds[rid].progress["1"] = [0]
    wait_rows_seen(c, rid)
    time.sleep(ACTIVATION_MS / 1000)  # it started after the executors opened their taps
    clock.now += 1.5
    assert stays_open(transport, rid)
    batches.run()
    wait_cancelled(transport, rid)


def test_a_micro_batch_longer_than_four_windows_holds_the_round_four_windows(transport):
    """A backlog's first micro-batch can take minutes: without the listener's word the round
    waits at most four windows after the rows came, not the latest micro-batch's length."""
    clock, batches = Clock(), Batches(last_duration_ms=60_000)
    c, rid = streaming_round(transport, clock, batches)
    transport.rounds[rid].progress["1"] = [0]
    wait_rows_seen(c, rid)
    clock.now += 3.5
    assert stays_open(transport, rid)
    clock.now += 0.5  # four windows after the rows came
    wait_cancelled(transport, rid)


# ----------------------------------------------------------- the flights demo, real Spark
#: Flights scheduled from 10:00 to 21:59: past the first moment of a day file (its first
#: lines also hold the flights of 22:00 and 23:00 that left after midnight).
LATER_HOURS = range(10, 22)


@pytest.mark.spark
def test_the_first_sample_of_the_demo_parse_vertex_spreads_over_its_micro_batches(
    spark, sampling_conf, tmp_path
):
    """The demo's pipeline as `sparkglass demo --feed-interval 5` runs it (3 day files every
    5 s, a micro-batch a second at most) with every sampling setting at its default, and one
    round on ``parse`` once two micro-batches ran, as the demo samples it. Micro-batches come
    further apart than the 3 s window, as on a loaded machine.

    A day file lists the day's flights by departure time and a micro-batch's task reads it from
    its first line, so a sample made of the first moment of each burst holds early-morning
    flights only. The round holds at least 50 records, and flights of the whole day among
    them."""
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.sampling import registry

    defaults = SamplingSettings(enabled=True)  # every other setting at its default
    values: dict[str, Any] = {}
    for field, suffix in CONF_KEYS.items():
        value = getattr(defaults, field)
        duration = field.endswith("_ms") and field != "tostring_budget_ms"
        values[suffix.replace("-", "_")] = f"{value}ms" if duration else value
    sampling_conf(**values)
    replay = FlightReplay(tmp_path / "stream", days=365, files_per_tick=3, interval=5.0)
    pipeline = build_pipeline(spark, tmp_path)  # the demo's own defaults
    pipeline.start()
    try:
        replay.start()
        deadline = time.monotonic() + 90
        while pipeline.progress().micro_batches < 2:
            assert time.monotonic() < deadline, pipeline.progress()
            time.sleep(0.2)
        result = registry.coordinator_for(spark).sample_vertices(["parse"], timeout_s=60)["parse"]
    finally:
        replay.stop()
        pipeline.stop()
    assert result.status is SampleStatus.COMPLETE, (result.status, result.error_code)
    hours = [json.loads(r.data)["hour"] for s in result.samples for r in s.records]
    later = sum(1 for h in hours if h in LATER_HOURS)
    seen = (len(hours), later, result.dropped_by_rate_limit, result.dropped_by_contention)
    if result.dropped_by_contention and (len(hours) < 50 or later < 0.15 * len(hours)):
        # The rendering budget bound this run (an executor short of CPU): the one bound that
        # counts time keeps the first rows of a burst, and says so (docs/architecture.md).
        pytest.skip(f"the rendering budget bound the round: (records, later, rate, budget) {seen}")
    assert len(hours) >= 50, seen
    assert later >= 0.15 * len(hours), (seen, sorted(hours))

"""RoundCoordinator logic over a scripted transport: statuses, caps, cache, filters."""

from __future__ import annotations

import random
import time

import pytest

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.sample_result import (
    MAX_CONCURRENT_ROUNDS,
    ErrorCode,
    NoDataReason,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
)
from sparkglass.runtime.contract.sampling_settings import SamplingSettings, SamplingSettingsError
from sparkglass.runtime.sampling.rounds import (
    ACTIVATION_MS,
    REPORT_MARGIN_MS,
    MaterializedOutput,
    MicroBatches,
    RoundCoordinator,
    TapInfo,
    UnknownRoundError,
    UnknownVertexError,
    fair_truncate,
    post_filter,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(transport, settings=None, clock=None, vertices=("parse", "agg")) -> RoundCoordinator:
    settings = settings or SamplingSettings(enabled=True)
    c = RoundCoordinator(
        transport,
        lambda: settings,
        round_prefix="1700000000000",
        check_interval_s=0.01,
        clock=clock or time.monotonic,
    )
    for v in vertices:
        c.register_tap(TapInfo(vertex=v, tap_key=f"p/{v}/k", data_type="struct<p:int,i:int>"))
    return c


def settings(**kw) -> SamplingSettings:
    return SamplingSettings(enabled=True, **kw)


def test_round_completes_with_records_grouped_by_subtask(transport, make_partition):
    c = make(transport, settings(sampling_window_ms=1000))
    started = c.start_round("parse")
    assert started.status is SampleStatus.PENDING
    assert started.round_id == "1700000000000-1"
    assert c.round_result(started.round_id).status is SampleStatus.PENDING
    transport.report(started.round_id, "1", [make_partition(1, 3, rate=7, contention=1)])
    transport.report(started.round_id, "2", [make_partition(0, 2, rate=5)])
    result = c.wait(started.round_id, 5)
    assert result.status is SampleStatus.COMPLETE
    assert [s.subtask_index for s in result.samples] == [0, 1]
    assert result.total_record_count == 5
    assert result.dropped_by_rate_limit == 12 and result.dropped_by_contention == 1
    assert result.samples[1].records[0].data == '{"p":1,"i":0}'
    assert result.samples[1].records[0].data_type == "struct<p:int,i:int>"
    assert result.error_code is None and not result.stale
    assert started.round_id in transport.forgotten
    body = result.to_json_dict()
    assert set(body) >= {"status", "endTimestamp", "roundId", "totalRecordCount", "samples"}
    assert body["samples"][0]["records"][0]["sampleTimestamp"] == 1000


def test_round_ids_are_unique_and_carry_the_application_start(transport):
    c = make(transport, vertices=("a", "b", "c"))
    ids = {c.start_round(v).round_id for v in ("a", "b", "c")}
    assert ids == {"1700000000000-1", "1700000000000-2", "1700000000000-3"}


def test_no_records_is_no_data(transport):
    c = make(transport, settings(sampling_window_ms=1000))
    transport.auto_report = {"1": [], "2": []}
    rid = c.start_round("parse").round_id
    assert c.wait(rid, 5).status is SampleStatus.NO_DATA


def test_a_second_request_for_a_running_vertex_joins_its_round(transport):
    c = make(transport)
    first = c.start_round("parse")
    assert c.start_round("parse").round_id == first.round_id
    assert len(transport.rounds) == 1


def test_at_most_five_concurrent_rounds(transport):
    names = [f"v{i}" for i in range(MAX_CONCURRENT_ROUNDS + 1)]
    c = make(transport, vertices=names)
    for name in names[:MAX_CONCURRENT_ROUNDS]:
        assert c.start_round(name).status is SampleStatus.PENDING
    rejected = c.start_round(names[-1])
    assert rejected.status is SampleStatus.FAILED
    assert rejected.error_code is ErrorCode.TOO_MANY_CONCURRENT_ROUNDS
    assert rejected.round_id is None
    # data-sample answers the same when there is nothing cached
    assert c.data_sample(names[-1]).error_code is ErrorCode.TOO_MANY_CONCURRENT_ROUNDS


def test_disabled_answers_disabled(transport):
    c = make(transport, SamplingSettings(enabled=False))
    assert c.start_round("parse").status is SampleStatus.DISABLED
    assert c.data_sample("parse").status is SampleStatus.DISABLED
    assert transport.rounds == {}
    c.register_vertices(["untapped"])
    on = make(transport)
    on.register_vertices(["untapped"])
    assert on.data_sample("untapped").status is SampleStatus.DISABLED


def test_unknown_vertex_and_round(transport):
    c = make(transport)
    with pytest.raises(UnknownVertexError) as err:
        c.start_round("nope")
    assert err.value.known == ["agg", "parse"]
    with pytest.raises(UnknownRoundError):
        c.round_result("1-99")


def test_sampling_window_bounded_by_conf(transport):
    c = make(transport, settings(sampling_window_ms=3000))
    with pytest.raises(SamplingSettingsError, match=r"samplingWindow=5s .*1s–3s") as err:
        c.start_round("parse", 5000)
    assert err.value.field == "samplingWindow"
    with pytest.raises(SamplingSettingsError):
        c.start_round("parse", 500)
    assert c.start_round("parse", 1000).status is SampleStatus.PENDING
    assert next(iter(transport.rounds.values())).window_ms == 1000


def test_lost_executor_gives_partial_with_its_subtasks(transport, make_partition):
    c = make(transport, settings(sampling_window_ms=1000))
    rid = c.start_round("parse").round_id
    transport.rounds[rid].progress = {"1": [0, 2], "2": [1, 3]}
    transport.report(rid, "1", [make_partition(0, 4), make_partition(2, 1)])
    transport.alive.discard("2")  # executor 2 stopped polling
    result = c.wait(rid, 5)
    assert result.status is SampleStatus.PARTIAL
    assert result.error_code is ErrorCode.EXECUTOR_UNREACHABLE
    assert result.failed_subtasks == [1, 3]
    assert result.total_record_count == 5


def test_every_executor_lost_is_failed(transport):
    c = make(transport, settings(sampling_window_ms=1000))
    rid = c.start_round("parse").round_id
    transport.alive.clear()
    result = c.wait(rid, 5)
    assert result.status is SampleStatus.FAILED
    assert result.error_code is ErrorCode.EXECUTOR_UNREACHABLE


def test_silent_live_executor_times_out(transport, make_partition):
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=1500))
    rid = c.start_round("parse").round_id
    transport.rounds[rid].progress = {"2": [1]}
    transport.report(rid, "1", [make_partition(0, 2)])
    result = c.wait(rid, 5)  # executor 2 keeps polling but never reports
    assert result.status is SampleStatus.PARTIAL
    assert result.error_code is ErrorCode.TIMEOUT
    assert result.failed_subtasks == [1]


def test_stopped_query_is_task_terminated(transport, make_partition):
    running = {"value": True}
    c = make(transport, settings(sampling_window_ms=30_000))
    c.register_tap(TapInfo("parse", "p/parse/k2", "struct<x:int>", lambda: running["value"]))
    rid = c.start_round("parse").round_id
    running["value"] = False
    deadline = time.monotonic() + 60
    while not transport.rounds[rid].cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert transport.rounds[rid].cancelled  # executors are told to stop now
    transport.report(rid, "1", [make_partition(0, 2)])
    transport.report(rid, "2", [])
    result = c.wait(rid, 5)
    assert result.error_code is ErrorCode.TASK_TERMINATED
    assert result.status is SampleStatus.PARTIAL
    # with nothing captured it is FAILED
    rid2 = c.start_round("parse").round_id
    transport.report(rid2, "1", [])
    transport.report(rid2, "2", [])
    assert c.wait(rid2, 5).status is SampleStatus.FAILED


def _samples(*counts: int) -> list[SubtaskSamples]:
    return [
        SubtaskSamples(
            subtask_index=i,
            records=[
                SampledRecord(sample_timestamp=k, data=str(k), data_type="int") for k in range(n)
            ],
        )
        for i, n in enumerate(counts)
    ]


def test_fair_truncation_is_proportional():
    cut, truncated = fair_truncate(
        _samples(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 2000), 5000
    )
    assert truncated
    counts = [len(s.records) for s in cut]
    assert sum(counts) == 5000
    assert counts == [500] * 8 + [1000]
    # earliest records are kept
    assert [r.sample_timestamp for r in cut[0].records[:3]] == [0, 1, 2]
    cut, _ = fair_truncate(_samples(3, 3, 3), 5)  # remainders: ties go to lower indexes
    assert [len(s.records) for s in cut] == [2, 2, 1]
    same, truncated = fair_truncate(_samples(10, 10), 5000)
    assert not truncated and [len(s.records) for s in same] == [10, 10]


def test_the_cut_from_counts_is_the_cut_of_the_whole_reports():
    """The driver plugin keeps of each partition only its earliest floor(n_i*cap/N)+1
    records as reports arrive (RoundRecords.java); with the captured counts the final cut is
    the one the whole reports give, in whatever order the reports came."""
    rng = random.Random(7)
    for _ in range(200):
        cap = rng.choice([5, 50, 5000])
        full = _samples(*(rng.choice([0, 1, 3, 40, 999, 1000]) for _ in range(rng.randint(1, 60))))
        full = [s for s in full if s.records]
        expected, expected_cut = fair_truncate(full, cap)
        kept = {s.subtask_index: [] for s in full}
        counts = dict.fromkeys(kept, 0)
        seen = 0
        for s in rng.sample(full, len(full)):  # one report per partition, any order
            kept[s.subtask_index] = list(s.records)
            counts[s.subtask_index] = len(s.records)
            seen += len(s.records)
            if seen > cap:
                for i in kept:
                    kept[i] = kept[i][: counts[i] * cap // seen + 1]
        trimmed = [SubtaskSamples(subtask_index=i, records=kept[i]) for i in sorted(kept)]
        cut, was_cut = fair_truncate(trimmed, cap, [counts[i] for i in sorted(kept)])
        assert was_cut == expected_cut
        assert [(s.subtask_index, s.records) for s in cut] == [
            (s.subtask_index, s.records) for s in expected
        ]
    # A count below the records held (a broken report) cannot pass the cap.
    cut, was_cut = fair_truncate(_samples(8, 8), 5, [1, 1])
    assert was_cut and sum(len(s.records) for s in cut) == 5


def test_5000_cap_on_assembled_result(transport, make_partition):
    c = make(transport, settings(sampling_window_ms=1000))
    transport.auto_report = {
        "1": [make_partition(i, 1000) for i in range(4)],
        "2": [make_partition(i, 1000) for i in range(4, 7)],
    }
    result = c.wait(c.start_round("parse").round_id, 5)
    assert result.total_record_count == 5000 and result.total_truncated
    assert [len(s.records) for s in result.samples] == [715, 715, 714, 714, 714, 714, 714]


def test_post_filters(transport, make_partition):
    c = make(transport, settings(sampling_window_ms=1000))
    transport.auto_report = {"1": [make_partition(0, 10), make_partition(1, 30)], "2": []}
    rid = c.start_round("parse").round_id
    full = c.wait(rid, 5)
    only1 = c.round_result(rid, subtask_index=1)
    assert [s.subtask_index for s in only1.samples] == [1] and only1.total_record_count == 30
    capped = c.round_result(rid, max_records=8)
    assert [len(s.records) for s in capped.samples] == [2, 6] and capped.total_truncated
    both = post_filter(full, 0, 3)
    assert both.total_record_count == 3 and both.samples[0].subtask_index == 0
    assert full.total_record_count == 40  # the cached result itself is untouched
    with pytest.raises(InvalidParameterError, match=r"maxRecords=0 .*1–5000"):
        c.round_result(rid, max_records=0)
    with pytest.raises(InvalidParameterError, match="subtaskIndex"):
        c.data_sample("parse", subtask_index=-1)


def test_data_sample_lazy_trigger_cache_and_stale(transport, make_partition):
    clock = Clock()
    c = make(transport, settings(sampling_window_ms=1000, refresh_interval_ms=60_000), clock)
    first = c.data_sample("parse")
    assert first.status is SampleStatus.PENDING and first.round_id
    assert c.data_sample("parse").status is SampleStatus.PENDING  # still running, no cache
    clock.now += 1.5  # window over
    transport.report(first.round_id, "1", [make_partition(0, 2)])
    transport.report(first.round_id, "2", [make_partition(1, 1)])
    c.wait(first.round_id, 5)
    cached = c.data_sample("parse")
    assert cached.status is SampleStatus.COMPLETE and cached.round_id == first.round_id
    assert not cached.stale
    assert c.data_sample("parse", subtask_index=1).total_record_count == 1  # post-filter
    clock.now += 59
    assert c.data_sample("parse").round_id == first.round_id  # still fresh
    assert len(transport.rounds) == 1
    clock.now += 2  # refresh-interval passed: new round, old result served stale
    stale = c.data_sample("parse")
    assert stale.stale and stale.round_id == first.round_id
    assert len(transport.rounds) == 2
    second = next(r for r in transport.rounds if r != first.round_id)
    assert c.data_sample("parse").stale  # while the new round runs
    clock.now += 1.5
    transport.report(second, "1", [make_partition(0, 4)])
    transport.report(second, "2", [])
    c.wait(second, 5)
    fresh = c.data_sample("parse")
    assert fresh.round_id == second and not fresh.stale and fresh.total_record_count == 4


# ------------------------------------------------------------ micro-batch-aware rounds
class Batches:
    """The micro-batches a streaming tap's queries ran (what the query listener reports)."""

    def __init__(self) -> None:
        self.ended: list[tuple[int, int, int]] = []  # (start ms, end ms, rows of the vertex)

    def run(self, rows: int = 5) -> None:
        now = int(time.time() * 1000)
        self.ended.append((now, now + 1, rows))

    def __call__(self, since_ms: int) -> MicroBatches:
        after = [b for b in self.ended if b[0] >= since_ms]
        return MicroBatches(
            completed=len(after),
            rows=sum(b[2] for b in after),
            last_end_ms=max((b[1] for b in self.ended), default=None),
        )


def streaming(c: RoundCoordinator, batches: Batches, vertex: str = "parse") -> None:
    c.register_tap(
        TapInfo(vertex, f"p/{vertex}/s", "struct<x:int>", lambda: True, micro_batches=batches)
    )


def wait_until(predicate, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_streaming_round_waits_past_its_window_for_a_micro_batch(transport, make_partition):
    batches = Batches()
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=10_000))
    streaming(c, batches)
    rid = c.start_round("parse").round_id
    # Executors capture until the timeout less the report margin unless told to stop.
    assert transport.rounds[rid].window_ms == 10_000 - REPORT_MARGIN_MS
    time.sleep(1.3)  # the window is over, but no micro-batch ran through the tap
    assert c.round_result(rid).status is SampleStatus.PENDING
    assert not transport.rounds[rid].cancelled
    time.sleep(ACTIVATION_MS / 1000)
    batches.run()
    wait_until(lambda: transport.rounds[rid].cancelled)  # enough: executors stop and report
    transport.report(rid, "1", [make_partition(0, 3)])
    transport.report(rid, "2", [])
    result = c.wait(rid, 5)
    assert result.status is SampleStatus.COMPLETE and result.total_record_count == 3
    assert result.no_data_reason is None


def test_a_micro_batch_already_running_at_the_start_does_not_count(transport):
    batches = Batches()
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=10_000))
    streaming(c, batches)
    before_ms = int(time.time() * 1000)
    rid = c.start_round("parse").round_id
    # Started with the round, before the executors could have opened their taps (stamped
    # before start_round: a stall after it must not make the batch look later).
    batches.ended.append((before_ms, before_ms + 1, 5))
    time.sleep(1.3)
    assert not transport.rounds[rid].cancelled
    assert c.round_result(rid).status is SampleStatus.PENDING


def test_min_micro_batches_zero_keeps_the_plain_window(transport):
    batches = Batches()
    c = make(transport, settings(sampling_window_ms=1000, min_micro_batches=0))
    streaming(c, batches)
    rid = c.start_round("parse").round_id
    assert transport.rounds[rid].window_ms == 1000
    transport.report(rid, "1", [])
    transport.report(rid, "2", [])
    assert c.wait(rid, 5).status is SampleStatus.NO_DATA


def test_idle_query_gives_no_data_saying_no_micro_batch_ran(transport):
    batches = Batches()
    batches.ended.append((1_000, 2_000, 7))  # long before the round
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=3000))
    streaming(c, batches)
    rid = c.start_round("parse").round_id
    assert transport.rounds[rid].window_ms == 1000  # timeout - margin is below the window
    transport.report(rid, "1", [])
    transport.report(rid, "2", [])
    result = c.wait(rid, 5)
    assert result.status is SampleStatus.NO_DATA
    assert result.no_data_reason is NoDataReason.NO_MICRO_BATCH
    assert result.last_micro_batch_timestamp == 2_000
    assert result.to_json_dict()["noDataReason"] == "NO_MICRO_BATCH"


def test_empty_vertex_gives_no_data_saying_no_rows(transport):
    batches = Batches()
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=10_000))
    streaming(c, batches)
    rid = c.start_round("parse").round_id
    time.sleep(ACTIVATION_MS / 1000)
    batches.run(rows=0)
    wait_until(lambda: transport.rounds[rid].cancelled)
    transport.report(rid, "1", [])
    transport.report(rid, "2", [])
    result = c.wait(rid, 5)
    assert (result.status, result.no_data_reason) == (SampleStatus.NO_DATA, NoDataReason.NO_ROWS)


def test_idle_no_data_is_cached_only_until_the_next_micro_batch(transport):
    batches = Batches()
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=3000))
    streaming(c, batches)
    first = c.data_sample("parse")
    transport.report(first.round_id, "1", [])
    transport.report(first.round_id, "2", [])
    idle = c.wait(first.round_id, 5)
    assert idle.no_data_reason is NoDataReason.NO_MICRO_BATCH
    assert c.data_sample("parse").round_id == first.round_id  # still the answer
    batches.run()  # the query woke up: the next poll starts a round
    again = c.data_sample("parse")
    assert again.stale and again.round_id == first.round_id
    assert c.running_rounds() and c.running_rounds()[0] != first.round_id


# ------------------------------------------------- end-of-input (materialized) vertices
def test_round_on_a_materialized_vertex_reads_each_written_row_once(transport):
    asked: list[int] = []

    def read(limit: int, max_chars: int) -> list[tuple[int, str]]:
        asked.append((limit, max_chars))
        # 1200 rows in partition 0 (over the 1000-per-subtask cap), 3 in partition 1
        return [(0, f'{{"i":{i}}}') for i in range(1200)] + [(1, '{"i":"x"}')] * 3

    c = make(transport, settings(sampling_window_ms=1000, max_record_length=8))
    c.register_tap(
        TapInfo(
            "busiest-origins",
            "p/busiest-origins/materialized",
            "struct<i:int>",
            materialized=MaterializedOutput(read, written_at_ms=1_700_000_000_000),
        )
    )
    rid = c.start_round("busiest-origins").round_id
    result = c.wait(rid, 5)
    assert rid not in transport.rounds  # no executor round: the rows are read from the files
    assert asked == [(5001, 8)]  # rows are cut on the executors; one more says "there is more"
    assert result.status is SampleStatus.COMPLETE
    assert result.materialized_at == 1_700_000_000_000
    assert [len(s.records) for s in result.samples] == [1000, 3]
    assert result.total_truncated  # 200 rows of partition 0 left out by the cap: said
    first = result.samples[0].records
    assert [r.data for r in first[:2]] == ['{"i":0}', '{"i":1}']
    assert not first[0].truncated and first[0].sample_timestamp == 1_700_000_000_000
    assert first[100].data == '{"i":100' and first[100].truncated  # max-record-length 8
    assert len({r.data for r in first}) == 1000  # each row once


def test_a_materialized_round_says_when_a_cap_left_rows_out(transport):
    """A read within every cap is whole (``totalTruncated`` false); one past the response's
    cap says so, though no subtask passed its own."""
    rows = {
        "few": [(p, '{"i":1}') for p in range(10)] * 3,
        "many": [(p % 10, "{}") for p in range(6000)],  # 500 per subtask in the first 5000
    }

    def reader(name: str) -> MaterializedOutput:
        return MaterializedOutput(lambda limit, max_chars: rows[name][:limit], 1)

    c = make(transport)
    for name in rows:
        c.register_tap(
            TapInfo(name, f"p/{name}/m", "struct<i:int>", materialized=reader(name))
        )
    few = c.wait(c.start_round("few").round_id, 5)
    assert few.total_record_count == 30 and not few.total_truncated
    many = c.wait(c.start_round("many").round_id, 5)
    assert many.total_record_count == 5000 and many.total_truncated


def test_materialized_round_that_cannot_read_fails_without_raising(transport):
    def read(limit: int, max_chars: int) -> list[tuple[int, str]]:
        raise OSError("files gone")

    c = make(transport)
    c.register_tap(
        TapInfo("m", "p/m/materialized", "struct<i:int>", materialized=MaterializedOutput(read, 1))
    )
    result = c.wait(c.start_round("m").round_id, 5)
    assert (result.status, result.error_code) == (SampleStatus.FAILED, ErrorCode.INTERNAL_ERROR)


def test_rows_seen_in_the_window_close_a_streaming_round_at_its_end(transport, make_partition):
    # A continuous flow: the tap saw rows as the window began, so the round ends with the
    # window (a window after the rows came) and does not wait for the listener to report a
    # whole micro-batch.
    batches = Batches()
    clock = Clock()  # the window ends when the test says, not when a stall ends it
    c = make(transport, settings(sampling_window_ms=1000, timeout_ms=10_000), clock)
    streaming(c, batches)
    rid = c.start_round("parse").round_id
    transport.rounds[rid].progress["1"] = [0]  # executor 1 saw rows of partition 0
    time.sleep(0.2)  # the coordinator checks every 10 ms
    assert not transport.rounds[rid].cancelled  # the window is not over yet
    clock.now += 1.0
    wait_until(lambda: transport.rounds[rid].cancelled, timeout=5)
    transport.report(rid, "1", [make_partition(0, 2)])
    transport.report(rid, "2", [])
    assert c.wait(rid, 5).status is SampleStatus.COMPLETE
    assert batches.ended == []  # no micro-batch was needed


def test_a_round_is_not_checked_before_the_driver_plugin_has_it(transport, make_partition):
    """A monitor thread still alive from the previous round must not ask the plugin about a
    round whose start is still on its way there (it would fail it as unknown). On a loaded
    machine the Py4J call that starts a round can take longer than a check interval."""
    import threading

    c = make(transport, settings(sampling_window_ms=1000))
    first = c.start_round("agg")  # keeps the monitor thread alive across the next start
    slow_start = threading.Event()
    real_start = transport.start_round

    def start_after_some_checks(round_id, tap_key, settings, window_ms):
        slow_start.wait(1.0)  # about 100 check intervals of this coordinator
        real_start(round_id, tap_key, settings, window_ms)

    transport.start_round = start_after_some_checks
    starting = threading.Thread(target=c.start_round, args=("parse",))
    starting.start()
    deadline = time.monotonic() + 5
    while not c.running_rounds()[1:] and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.2)  # the monitor checks ~20 times meanwhile
    slow_start.set()
    starting.join(5)
    second = [r for r in c.running_rounds() if r != first.round_id]
    assert second, "the round being started was finished before the plugin had it"
    transport.report(second[0], "1", [make_partition(0, 1)])
    transport.report(second[0], "2", [])
    result = c.wait(second[0], 5)
    assert result.status is SampleStatus.COMPLETE, result
    c.close()


def test_a_round_check_remembers_refusals_and_compiles_one_at_a_time(transport):
    """The admission webhook's check (``check_round``) runs Spark's analyzer on the driver of
    a running job: the same refused request is answered from memory, not compiled again, and
    a check arriving while another compiles is turned away at once (503 at the endpoint)."""
    import threading

    from sparkglass.runtime.contract.round_request import RoundRequest
    from sparkglass.runtime.sampling.compile_gate import CompileBusyError

    compiled: list[RoundRequest] = []
    entered, release = threading.Event(), threading.Event()

    def compile_request(request: RoundRequest) -> None:
        compiled.append(request)
        if request.filter == "slow = 1":
            entered.set()
            release.wait(10)
        if request.filter == "carier = 'UA'":
            raise InvalidParameterError("filter: unknown column 'carier'", field="filter")

    c = make(transport)
    c.register_tap(TapInfo("parse", "p/parse/k3", "struct<x:int>", compile=compile_request))
    bad = RoundRequest(filter="carier = 'UA'")
    for _ in range(3):
        with pytest.raises(InvalidParameterError, match="carier") as refused:
            c.check_round("parse", request=bad)
        assert refused.value.field == "filter"
    assert compiled == [bad]  # once
    assert c.check_round("parse", request=RoundRequest(filter="carrier = 'UA'")) is True
    slow = threading.Thread(
        target=c.check_round, kwargs={"vertex": "parse", "request": RoundRequest(filter="slow = 1")}
    )
    slow.start()
    assert entered.wait(10)
    with pytest.raises(CompileBusyError):
        c.check_round("parse", request=RoundRequest(filter="other = 1"))
    release.set()
    slow.join(10)
    assert c.check_round("parse", request=RoundRequest(filter="other = 1")) is True
    assert c.running_rounds() == []  # a check opens nothing

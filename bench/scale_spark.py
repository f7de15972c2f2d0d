"""The Spark curves of the scaling benchmark; each runs in a child process of
``bench/scale_bench.py`` (one SparkContext per process, and a child's JVMs die with its
process group when it overruns).

- :func:`taps_curve` (``local[2]``): gate cost per record and job overhead against the number
  of tapped vertices in a chain, sampling_bench's method (task CPU time from the UI's REST
  API, variants rotated per repeat, paired per repeat).
- :func:`concurrency_curve` (same application): 1 to 5 rounds at once through the driver
  control endpoint, then a 6th that must be refused with ``TOO_MANY_CONCURRENT_ROUNDS``.
- :func:`partitions_curve` (``local-cluster[2,1,1024]``): one round over a job of N
  partitions: trigger→COMPLETE latency, driver JVM CPU and heap against the same job without
  a round, the executors' reports as they reach Python, and the caps.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sampling_bench import WORK_EXPR, ActiveSampling, run_once
from scale_report import check_caps, summarise

from sparkglass.runtime.contract.sample_result import (
    MAX_CONCURRENT_ROUNDS,
    ErrorCode,
    SampleStatus,
)
from sparkglass.runtime.control.client import ControlClient, ControlUnavailable
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.rounds import RoundCoordinator
from sparkglass.runtime.session import spark_session

log = logging.getLogger("scale_bench")

ENABLED = "spark.sparkglass.sampling.enabled"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _mark(what: str) -> None:
    print(f"[scale] {time.strftime('%H:%M:%S')} {what}", flush=True)


# ------------------------------------------------------------------------------ taps curve


def tap_chain(
    spark: SparkSession, name: str, taps: int, rows: int, enabled: bool, work: bool
) -> tuple[DataFrame, str]:
    """A chain of ``taps`` vertices (the source counts: every vertex output gets a tap when
    ``enabled``); returns the last output and its vertex name.

    ``work=False``: ``id + 1`` per vertex, a few ns per record, so the gates' own cost stands
    out (sampling_bench's gate-cost topology). ``work=True``: the source also computes two
    nested SHA-512s (about 1 µs of CPU per record), so the overhead is that of a job doing
    real work per record (sampling_bench's main topology)."""
    spark.conf.set(ENABLED, "true" if enabled else "false")
    p = Pipeline(name, spark)
    base = spark.range(0, rows, numPartitions=2)
    cols = ["id + 1 AS id", "digest"] if work else ["id + 1 AS id"]
    prev = p.source(f"{name}-0", base.selectExpr("id", WORK_EXPR) if work else base)
    for i in range(1, taps):
        prev = p.vertex(f"{name}-{i}", prev, lambda df, c=cols: df.selectExpr(*c))
    return p.output(prev), prev


def taps_curve(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    coordinator = registry.coordinator_for(spark)
    points: list[dict[str, Any]] = []
    order = ["plain", "idle", "active"]
    for n in args.taps:
        _mark(f"taps: {n} tapped vertices")
        frames: dict[tuple[str, str], tuple[DataFrame, str]] = {}
        for topo, rows, work in (("gate", args.gate_rows, False), ("job", args.job_rows, True)):
            # Plain first: building the tapped chain last leaves its taps registered.
            frames[(topo, "plain")] = tap_chain(spark, f"{topo}{n}p", n, rows, False, work)
            frames[(topo, "idle")] = tap_chain(spark, f"{topo}{n}t", n, rows, True, work)
        spark.conf.set(ENABLED, "true")
        for (topo, variant), (df, last) in frames.items():  # codegen and JIT, not measured
            rows = args.gate_rows if topo == "gate" else args.job_rows
            run_once(spark, df, rows, 1)
            if variant == "idle" and n == args.taps[0]:
                # The process's first rounds load and compile the capture path (rendering,
                # the round program): once, before anything is measured.
                with ActiveSampling(coordinator, last):
                    run_once(spark, df, rows, 1)
        repeats: list[dict[str, float]] = []
        for r in range(args.repeats):
            ns: dict[tuple[str, str], float] = {}
            for topo, rows in (("gate", args.gate_rows), ("job", args.job_rows)):
                for variant in order[r % 3 :] + order[: r % 3]:
                    df, last = frames[(topo, "plain" if variant == "plain" else "idle")]
                    if variant == "active":
                        with ActiveSampling(coordinator, last):
                            _, cpu_rps = run_once(spark, df, rows, 1)
                    else:
                        _, cpu_rps = run_once(spark, df, rows, 1)
                    ns[(topo, variant)] = 1e9 / cpu_rps  # task-CPU ns per record
            rep = {
                "gate_plain_ns_per_record": ns[("gate", "plain")],
                "gate_idle_ns_per_record": ns[("gate", "idle")] - ns[("gate", "plain")],
                "gate_active_ns_per_record": ns[("gate", "active")] - ns[("gate", "plain")],
                "job_plain_ns_per_record": ns[("job", "plain")],
                "job_idle_overhead_pct": 100 * (1 - ns[("job", "plain")] / ns[("job", "idle")]),
                "job_active_overhead_pct": 100
                * (1 - ns[("job", "plain")] / ns[("job", "active")]),
            }
            rep["gate_idle_ns_per_record_per_tap"] = rep["gate_idle_ns_per_record"] / n
            rep["gate_active_ns_per_record_per_tap"] = rep["gate_active_ns_per_record"] / n
            _mark(f"taps {n} repeat {r + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in rep.items()))
            repeats.append(rep)
        points.append(
            {"taps": n, "repeats": len(repeats), **summarise(repeats, repeats[0].keys()),
             "per_repeat": [{k: round(v, 3) for k, v in rep.items()} for rep in repeats]}
        )
    return {
        "x": "taps",
        "master": "local[2]",
        "active_round_window_s": args.round_window_s,
        "gate_rows": args.gate_rows,
        "job_rows": args.job_rows,
        "method": (
            "task CPU ns per record (Spark executorCpuTime of the job's tasks via the UI REST "
            "API) for sampling disabled (plain), enabled with no round (idle) and with rounds "
            "back to back on the chain's last vertex (active); variants rotated per repeat; "
            "gate_*_ns_per_record = variant minus plain on a chain of id+1 maps; "
            "job_*_overhead_pct = 100*(1 - plain/variant CPU per record) on the same chain "
            "after a ~1 us/record SHA-512 source"
        ),
        "points": points,
    }


# ----------------------------------------------------------------------- concurrency curve


class _JobLoop:
    """Runs a batch job over and over on a thread, so rounds have rows to sample, until
    stopped or ``max_seconds`` passed (bounded: it stops by itself)."""

    def __init__(self, df: DataFrame, max_seconds: float) -> None:
        self._df = df
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, name="scale-job-loop", daemon=True)
        self.jobs = 0

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            self._df.write.format("noop").mode("overwrite").save()
            self.jobs += 1

    def __enter__(self) -> _JobLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def _wait_idle(coordinator: RoundCoordinator, timeout_s: float) -> None:
    """Until no round runs (rounds of an earlier step end at their window)."""
    deadline = time.monotonic() + timeout_s
    while coordinator.running_rounds():
        if time.monotonic() > deadline:
            raise RuntimeError(f"rounds still running after {timeout_s} s")
        time.sleep(0.05)


def concurrency_curve(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    spark.conf.set(ENABLED, "true")
    width = MAX_CONCURRENT_ROUNDS + 1
    df, _ = tap_chain(spark, "conc", width, args.job_rows, True, False)
    coordinator = registry.coordinator_for(spark)
    endpoint = registry.endpoint_for(spark)
    if endpoint is None:
        raise RuntimeError("the driver control endpoint did not start")
    vertices = [f"conc-{i}" for i in range(width)]
    window = f"{args.round_window_s}s"  # the session's sampling-window: the most allowed
    timeout = args.round_window_s + 60
    points: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    _wait_idle(coordinator, 60)
    with _JobLoop(df, max_seconds=3600) as loop, ControlClient(endpoint.url, endpoint.token) as c:
        for k in range(1, MAX_CONCURRENT_ROUNDS + 1):
            latencies: list[float] = []
            batch_max: list[float] = []
            statuses: dict[str, int] = {}
            for _ in range(args.repeats):
                _wait_idle(coordinator, timeout)
                opened: list[tuple[str, float]] = []
                for v in vertices[:k]:
                    t = time.monotonic()
                    res = c.open_round(v, window)
                    if res.status is not SampleStatus.PENDING or res.round_id is None:
                        raise RuntimeError(f"round {k}/{v} not opened: {res.status}")
                    opened.append((res.round_id, t))
                if k == MAX_CONCURRENT_ROUNDS:
                    # A 6th round while 5 run: refused at once, not queued.
                    t = time.monotonic()
                    code = "opened"
                    try:
                        extra = c.open_round(vertices[k], window)
                        code = str(extra.error_code or extra.status)
                    except ControlUnavailable as exc:
                        code = str(exc.error_code or exc)
                    refused.append(
                        {"latency_ms": (time.monotonic() - t) * 1000, "answer": code}
                    )

                def wait(opened_round: tuple[str, float]) -> tuple[float, str]:
                    rid, t0 = opened_round
                    res = c.wait_for_round(rid, timeout_s=timeout, poll_interval_s=0.05)
                    return time.monotonic() - t0, str(res.status)

                with ThreadPoolExecutor(k) as pool:
                    done = list(pool.map(wait, opened))
                for lat, status in done:
                    latencies.append(lat)
                    statuses[status] = statuses.get(status, 0) + 1
                batch_max.append(max(lat for lat, _ in done))
            _mark(f"concurrency {k}: latencies {[round(x, 2) for x in latencies]} {statuses}")
            points.append(
                {
                    "concurrent_rounds": k,
                    "repeats": args.repeats,
                    "rounds": len(latencies),
                    **summarise([{"latency_s": x} for x in latencies], ["latency_s"]),
                    **summarise([{"batch_max_latency_s": x} for x in batch_max],
                                ["batch_max_latency_s"]),
                    "statuses": statuses,
                }
            )
        jobs = loop.jobs
    expected = ErrorCode.TOO_MANY_CONCURRENT_ROUNDS.value
    sixth = {
        "concurrent_rounds": MAX_CONCURRENT_ROUNDS + 1,
        "repeats": len(refused),
        **summarise(refused, ["latency_ms"]),
        "answers": sorted({x["answer"] for x in refused}),
        "all_refused": all(x["answer"] == expected for x in refused),
    }
    _mark(f"concurrency: 6th round answered {sixth['answers']}")
    return {
        "x": "concurrent_rounds",
        "master": "local[2]",
        "window_s": args.round_window_s,
        "method": (
            "k rounds opened back to back on k different vertices through the driver "
            "control endpoint (HTTP on 127.0.0.1) while a batch job loops over the chain; "
            "latency from each POST to the first GET answering a final status (polled every "
            "50 ms); with 5 running a 6th POST on a 6th vertex, timed until its answer"
        ),
        "jobs_run": jobs,
        "points": points,
        "sixth": sixth,
    }


# ------------------------------------------------------------------------ partitions curve


class _HeapPeak:
    """Samples the driver JVM's heap in use (MemoryMXBean over Py4J) every ``interval_s``
    on a thread; :attr:`peak` is the highest sample. Bounded by ``max_seconds``."""

    def __init__(self, used: Callable[[], int], interval_s: float, max_seconds: float) -> None:
        self._used = used
        self._interval = interval_s
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, name="scale-heap", daemon=True)
        self.peak = used()

    def _run(self) -> None:
        while not self._stop.wait(self._interval) and time.monotonic() < self._deadline:
            self.peak = max(self.peak, self._used())

    def __enter__(self) -> _HeapPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.peak = max(self.peak, self._used())


def proc_cpu_ms(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far, ms, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / _CLK_TCK


class ReportMeter:
    """Wraps a transport's ``round_reports``: keeps what the executors reported in the last
    round and what the driver plugin handed to Python of it.

    The driver plugin does not count the bytes of its executor RPC messages; it counts the
    records and the characters of record data that arrived (``round_status``'s
    ``received``), and keeps of them only what the 5,000-record cut can use
    (``RoundRecords.java``). ``bytes`` is what it hands to Python (Jackson JSON through
    Py4J, re-serialized compactly); ``per_subtask`` the records each partition captured."""

    def __init__(
        self,
        original: Callable[[str], dict[str, list[dict[str, Any]]]],
        status: Callable[[str], dict[str, Any]],
    ) -> None:
        self._original = original
        self._status = status
        self.last: dict[str, Any] | None = None

    def __call__(self, round_id: str) -> dict[str, list[dict[str, Any]]]:
        received = self._status(round_id).get("received", {})
        reports = self._original(round_id)
        per_subtask: dict[int, int] = {}
        dropped_rate = dropped_contention = 0
        for partitions in reports.values():
            for part in partitions or []:
                i = int(part["subtaskIndex"])
                n = int(part.get("capturedRecords", len(part.get("records", []))))
                per_subtask[i] = per_subtask.get(i, 0) + n
                dropped_rate += int(part.get("droppedByRateLimit", 0))
                dropped_contention += int(part.get("droppedByContention", 0))
        self.last = {
            "bytes": len(json.dumps(reports, separators=(",", ":")).encode()),
            "received_records": int(received.get("records", 0)),
            "received_chars": int(received.get("chars", 0)),
            "kept_records": int(received.get("kept", 0)),
            "per_subtask": per_subtask,
            "dropped_by_rate_limit": dropped_rate,
            "dropped_by_contention": dropped_contention,
        }
        return reports


def partitions_curve(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    jvm = spark._jvm
    assert jvm is not None
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()

    def heap_used() -> int:
        return int(memory.getHeapMemoryUsage().getUsed())

    coordinator = registry.coordinator_for(spark)
    transport = coordinator.transport
    meter = ReportMeter(transport.round_reports, transport.round_status)
    # An instance attribute shadows the method for the coordinator's calls: the bench
    # changes nothing in the runtime, it only listens.
    setattr(transport, "round_reports", meter)  # noqa: B010
    _wait_executors(transport, 2, 180)
    points: list[dict[str, Any]] = []
    for n in args.partitions:
        p = Pipeline(f"parts{n}", spark)
        src = p.source(
            f"parts{n}-src", spark.range(0, n * args.rows_per_partition, numPartitions=n)
        )
        vertex = p.vertex(f"parts{n}", src, lambda df: df.selectExpr("id", "id * 3 AS x"))
        df = p.output(vertex)

        def job(df: DataFrame = df) -> None:
            df.write.format("noop").mode("overwrite").save()

        job()  # warm-up: the first run loads classes and JIT-compiles on fresh executors
        t = time.monotonic()
        job()  # how long the job takes: the round's window must cover it
        job_s = time.monotonic() - t
        window_s = min(30, max(2, math.ceil(job_s * 1.5 + 1)))
        _mark(f"partitions {n}: job {job_s:.1f} s without a round, window {window_s} s")
        repeats: list[dict[str, Any]] = []
        violations: list[str] = []
        for r in range(args.repeats):
            pair: dict[str, dict[str, Any]] = {}
            for variant in (("round", "none") if r % 2 == 0 else ("none", "round")):
                pair[variant] = _measure(
                    spark, coordinator, meter, job, vertex, window_s, variant == "round",
                    pid, memory, heap_used,
                )
            rnd, none = pair["round"], pair["none"]
            violations += [f"repeat {r + 1}: {v}" for v in rnd["violations"]]
            rep = {
                "latency_s": rnd["span_s"],
                "latency_beyond_window_s": rnd["span_s"] - window_s,
                "driver_cpu_ms_with_round": rnd["cpu_ms"],
                "driver_cpu_ms_without_round": none["cpu_ms"],
                "driver_cpu_ms_per_round": rnd["cpu_ms"] - none["cpu_ms"],
                "driver_python_cpu_ms_per_round": rnd["py_cpu_ms"] - none["py_cpu_ms"],
                "driver_heap_peak_growth_mb_with_round": rnd["heap_mb"],
                "driver_heap_peak_growth_mb_without_round": none["heap_mb"],
                "driver_heap_mb_per_round": rnd["heap_mb"] - none["heap_mb"],
                "report_bytes": rnd["report_bytes"],
                "report_records": rnd["report_records"],
                "report_chars": rnd["report_chars"],
                "driver_kept_records": rnd["kept_records"],
                "partitions_reported": rnd["partitions_reported"],
                "max_records_per_subtask": rnd["max_per_subtask"],
                "response_records": rnd["response_records"],
                "job_s_with_round": rnd["job_s"],
            }
            _mark(
                f"partitions {n} repeat {r + 1}: status {rnd['status']}, "
                + ", ".join(f"{k}={v:.3g}" for k, v in rep.items())
            )
            repeats.append(rep)
        points.append(
            {
                "partitions": n,
                "repeats": len(repeats),
                "window_s": window_s,
                "job_s_without_round": round(job_s, 2),
                **summarise(repeats, repeats[0].keys()),
                "caps_held": not violations,
                "cap_violations": violations,
                "per_repeat": [{k: round(v, 3) for k, v in rep.items()} for rep in repeats],
            }
        )
    return {
        "x": "partitions",
        "master": "local-cluster[2,1,1024]",
        "rows_per_partition": args.rows_per_partition,
        "max_sample_rate": args.max_sample_rate,
        "caps": {"records_per_subtask": 1000, "records_per_response": 5000},
        "caps_held_at_every_size": all(pt["caps_held"] for pt in points),
        "method": (
            "a batch job over N partitions (range -> id*3, both tapped) on 2 executor JVMs; "
            "per repeat, the job with one round on its last vertex (triggered just before the "
            "job, window covering the job: 1.5 x its warm-up time + 1 s, 2-30 s) and without, "
            "in alternating order. latency: trigger to COMPLETE seen by the coordinator (50 ms "
            "polls); driver CPU: user+system time of the driver JVM from /proc over "
            "[trigger, max(job end, COMPLETE)], the run without a round over [start, max(job "
            "end, start + window)], per round = difference; heap: peak of MemoryMXBean heap "
            "used (sampled every 100 ms over Py4J) above its value after System.gc() at the "
            "start, per round = difference; report bytes: the executors' reports as the "
            "driver plugin hands them to Python, compact JSON (the plugin does not count its "
            "RPC bytes); driver_python_cpu_ms includes the benchmark's own sampling thread"
        ),
        "points": points,
    }


def _wait_executors(transport: Any, count: int, timeout_s: float) -> None:
    """Until ``count`` executors polled the driver plugin (their JVMs start after the
    driver's)."""
    deadline = time.monotonic() + timeout_s
    while len([e for e in transport.executors() if e != "driver"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} executors after {timeout_s} s")
        time.sleep(0.2)


def _measure(
    spark: SparkSession,
    coordinator: RoundCoordinator,
    meter: ReportMeter,
    job: Callable[[], None],
    vertex: str,
    window_s: int,
    with_round: bool,
    pid: int,
    memory: Any,
    heap_used: Callable[[], int],
) -> dict[str, Any]:
    """One run of ``job``, with a round on ``vertex`` or without; the figures of
    :func:`partitions_curve` for it."""
    memory.gc()  # a baseline without the last run's garbage (System.gc(), a full collection)
    heap0 = heap_used()
    meter.last = None
    failure: list[BaseException] = []
    job_end: list[float] = []

    def run_job() -> None:
        try:
            job()
            job_end.append(time.monotonic())
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)

    runner = threading.Thread(target=run_job, name="scale-job", daemon=True)
    with _HeapPeak(heap_used, 0.1, window_s + 180) as heap:
        cpu0, py0 = proc_cpu_ms(pid), time.process_time()
        t0 = time.monotonic()
        result = None
        if with_round:
            started = coordinator.start_round(vertex, sampling_window_ms=window_s * 1000)
            if started.round_id is None:
                raise RuntimeError(f"round not started: {started.status} {started.error_code}")
            runner.start()
            result = coordinator.wait(started.round_id, window_s + 120)
        else:
            runner.start()
        runner.join(timeout=window_s + 300)
        if runner.is_alive() or failure or not job_end:
            raise RuntimeError(f"the job did not end: {failure}")
        job_s = job_end[0] - t0
        if not with_round:
            # Same span as a round's window, so the driver's background work (executor
            # polls, heartbeats) is counted alike in both runs.
            remaining = t0 + window_s - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)
        span_s = time.monotonic() - t0
        cpu_ms = proc_cpu_ms(pid) - cpu0
        py_cpu_ms = (time.process_time() - py0) * 1000
    out: dict[str, Any] = {
        "span_s": span_s,
        "job_s": job_s,
        "cpu_ms": cpu_ms,
        "py_cpu_ms": py_cpu_ms,
        "heap_mb": (heap.peak - heap0) / 2**20,
        "violations": [],
    }
    if result is not None:
        if result.status is SampleStatus.PENDING:
            raise RuntimeError("the round did not finish in time")
        reported: dict[str, Any] = meter.last or {"bytes": 0, "per_subtask": {}}
        reported_per_subtask: dict[int, int] = reported["per_subtask"]
        per_subtask = {s.subtask_index: len(s.records) for s in result.samples or []}
        out.update(
            status=str(result.status),
            report_bytes=float(reported["bytes"]),
            report_records=float(reported.get("received_records", 0)),
            report_chars=float(reported.get("received_chars", 0)),
            kept_records=float(reported.get("kept_records", 0)),
            partitions_reported=float(len(reported_per_subtask)),
            max_per_subtask=float(max(per_subtask.values(), default=0)),
            response_records=float(result.total_record_count or 0),
            violations=check_caps(
                per_subtask,
                int(result.total_record_count or 0),
                reported_per_subtask=reported_per_subtask,
            ),
        )
    return out


# ----------------------------------------------------------------------------- the child


def run_child(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One Spark curve group in this process: ``taps`` (with the concurrency curve, same
    application) or ``partitions``."""
    logging.basicConfig(level=logging.WARNING)
    if kind == "taps":
        spark = spark_session(
            "sparkglass-scale-taps",
            master="local[2]",
            conf={
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "true",  # task CPU time comes from the UI's REST API
                ENABLED: "true",
                # The window of the active variant's rounds and of the concurrency curve's
                # (3 s, the default, in a full run; 1 s in a quick one).
                "spark.sparkglass.sampling.sampling-window": f"{args.round_window_s}s",
            },
            sampling_plugin=True,
        )
    else:
        spark = spark_session(
            "sparkglass-scale-partitions",
            master="local-cluster[2,1,1024]",
            conf={
                ENABLED: "true",
                # The round's window must cover the largest job (30 s is the allowed most).
                "spark.sparkglass.sampling.sampling-window": "30s",
                "spark.sparkglass.sampling.timeout": "120s",
                "spark.sparkglass.sampling.max-sample-rate": str(args.max_sample_rate),
            },
        )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if kind == "taps":
            out: dict[str, Any] = {}
            if "taps" in args.curves:
                out["taps"] = taps_curve(spark, args)
            if "concurrency" in args.curves:
                out["concurrency"] = concurrency_curve(spark, args)
            return out
        return {"partitions": partitions_curve(spark, args)}
    finally:
        spark.stop()

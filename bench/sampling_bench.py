"""Sampling overhead benchmark (the seed's protocol, scaled to one small machine).

Topology: ``numbers`` (``spark.range``, 2 partitions) → ``spread`` (repartition, the seed's
rebalance) → ``work`` (two nested SHA-512s, about 1 µs of CPU per record) → noop sink, on
``local[2]``. Three scenarios, each a batch job over ``--rows`` records:

- **A baseline**: ``spark.sparkglass.sampling.enabled=false`` (no tap in the plan);
- **B idle**: sampling enabled, taps at every vertex output, no round running;
- **C active**: like B while rounds on ``work`` run back to back (default 3 s window,
  100 records/s per subtask).

Each measured round runs A, B and C once, in a rotating order so that drift from other
load on the machine spreads evenly; the first ``--warmup-rounds`` rounds are discarded (JIT
warm-up). After ``--rounds`` measured rounds, rounds are added until the 95% bootstrap
interval of each overhead (per-round paired overheads, ``bench/spread.py``) is within
``--ci-pp`` percentage points (0.5) of its median, or ``--max-minutes`` (40) have passed;
``idle_overhead_pct_ci``/``active_overhead_pct_ci`` hold the median and interval and
``ci_target_met`` says whether the width was reached. Throughput is
records per second of task CPU time per core (``rows / (CPU s / 2)``, Spark's
``executorCpuTime`` of the job's tasks, read from the UI's REST API): the machine's two
cores are shared with other work, which moves wall-clock throughput by tens of percent
between identical jobs, while the CPU a job's tasks burn moves much less. Wall-clock
numbers are written alongside; ``median_*`` keys give the medians of per-round ratios. Writes
``bench/results/sampling.json`` and prints a table.

Run: ``make bench-sampling`` or ``.venv/bin/python bench/sampling_bench.py [--rounds 6]``.
``--scenario sdp`` runs only the Spark Declarative Pipeline scenario (``bench/sdp_bench.py``,
``bench/results/sampling-sdp.json``); ``--scenario dsl`` only the ones above; the default,
``all``, runs the DSL scenarios and then the SDP one in a process of its own; ``--scenario
quality`` only the expectation and filter costs, merged into the existing results file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from pyspark.sql import DataFrame, SparkSession

from sparkglass.runtime.contract.round_request import RoundRequest
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.rounds import RoundCoordinator
from sparkglass.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info
from spread import median_ci

log = logging.getLogger("sampling_bench")

ENABLED = "spark.sparkglass.sampling.enabled"
RESULTS = Path(__file__).parent / "results" / "sampling.json"
#: About 1 µs of CPU per record on this machine (measured: ~1.2 µs).
WORK_EXPR = "sha2(concat(cast(id AS string), sha2(cast(id AS string), 512)), 512) AS digest"


def build(spark: SparkSession, name: str, rows: int, enabled: bool) -> DataFrame:
    """The benchmark pipeline's ``work`` output, with taps iff ``enabled``."""
    spark.conf.set(ENABLED, "true" if enabled else "false")
    p = Pipeline(name, spark)
    p.source("numbers", spark.range(0, rows, numPartitions=2))
    p.vertex("spread", "numbers", lambda df: df.repartition(2))
    p.vertex("work", "spread", lambda df: df.selectExpr("id", WORK_EXPR))
    return p.output("work")


def task_cpu_seconds(spark: SparkSession, group: str) -> float:
    """CPU seconds the tasks of job group ``group`` used (Spark's ``executorCpuTime``).

    Read from the status REST API of the Spark UI, waiting until every stage is complete
    there (the UI learns of task metrics asynchronously).
    """
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    stages: list[int] = []
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is not None:
            stages += info.stageIds
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
    deadline = time.monotonic() + 30
    while True:
        total, done = 0, True
        for stage in stages:
            attempts = httpx.get(f"{url}/{stage}", timeout=10).json()
            done = done and all(a.get("status") == "COMPLETE" for a in attempts)
            total += sum(int(a.get("executorCpuTime", 0)) for a in attempts)
        if (done and total) or time.monotonic() > deadline:
            return total / 1e9
        time.sleep(0.2)


_jobs = itertools.count()


def run_once(spark: SparkSession, df: DataFrame, rows: int, cores: int) -> tuple[float, float]:
    """One noop write of ``df``: (wall-clock records/s, task-CPU records/s).

    Task-CPU records/s is ``rows / (CPU seconds of the job's tasks / cores)``: the throughput
    the job reaches with the cores to itself. It is the headline because this machine's two
    cores are shared with other work, which swings wall-clock numbers by tens of percent.
    """
    group = f"bench-{next(_jobs)}"
    spark.sparkContext.setJobGroup(group, group)
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    cpu = max(task_cpu_seconds(spark, group), 1e-3)
    return rows / wall, rows / (cpu / cores)


def gate_cost(
    spark: SparkSession, coordinator: RoundCoordinator, rows: int, rounds: int
) -> dict[str, float]:
    """Task-CPU ns per record that 3 taps add to a trivial map (no shuffle), idle and active.

    The trivial map costs a few ns per record, so the taps' own cost stands out of the noise
    that the main scenarios' shuffle and the shared machine add. Medians over ``rounds``.
    """

    def chain(name: str, enabled: bool) -> DataFrame:
        spark.conf.set(ENABLED, "true" if enabled else "false")
        p = Pipeline(name, spark)
        p.source("numbers", spark.range(0, rows, numPartitions=2))
        p.vertex("times3", "numbers", lambda df: df.selectExpr("id", "id * 3 AS t"))
        p.vertex("plus1", "times3", lambda df: df.selectExpr("id", "t + 1 AS u"))
        return p.output("plus1")

    plain, tapped = chain("gate-off", False), chain("gate-on", True)
    spark.conf.set(ENABLED, "true")
    ns: dict[str, list[float]] = {"plain": [], "idle": [], "active": []}
    for _ in range(rounds):
        for scenario in ("plain", "idle", "active"):
            df = plain if scenario == "plain" else tapped
            if scenario == "active":
                with ActiveSampling(coordinator, "plus1"):
                    _, cpu_rps = run_once(spark, df, rows, 1)
            else:
                _, cpu_rps = run_once(spark, df, rows, 1)
            ns[scenario].append(1e9 / cpu_rps)
    med = {k: statistics.median(v[1:] if len(v) > 2 else v) for k, v in ns.items()}
    taps = 3
    return {
        "plain_ns_per_record": round(med["plain"], 1),
        "idle_3_taps_ns_per_record": round(med["idle"] - med["plain"], 1),
        "active_3_taps_ns_per_record": round(med["active"] - med["plain"], 1),
        "idle_ns_per_record_per_tap": round((med["idle"] - med["plain"]) / taps, 2),
        "active_ns_per_record_per_tap": round((med["active"] - med["plain"]) / taps, 2),
    }


#: The three expectations of the quality scenario: cheap predicates, as most are.
QUALITY_EXPECTATIONS = (
    ("positive", "u > 0"),
    ("odd-or-even", "u % 2 IN (0, 1)"),
    ("small", "t < 1000000000000"),
)
#: The active filtered round's predicate: about one row in ten matches.
QUALITY_FILTER = "u % 10 = 1"


def quality_cost(
    spark: SparkSession, coordinator: RoundCoordinator, rows: int, rounds: int
) -> dict[str, Any]:
    """Task-CPU ns per record on the gate-cost chain (trivial map, 2 vertices) with the 3
    :data:`QUALITY_EXPECTATIONS` on ``plus1``, in five variants per round:

    - ``plain``: no expectations, sampling disabled;
    - ``predicates``: the 3 conditions computed as plain columns (what they cost as SQL);
    - ``expectations``: declared, and counted as a streaming vertex counts them (the
      code-generated counter, :func:`~sparkglass.runtime.quality.count_expectations`: this
      job is bounded, where the pipeline itself would not count), sampling disabled;
    - ``observed``: the same counted with Spark's ``observe``
      (:func:`~sparkglass.runtime.quality.observe_expectations`, the fallback without the
      sampling jar), sampling disabled: the peer the counter replaces;
    - ``expectations_idle``: the same with sampling enabled, no round (the tap, and the
      violations tap the expectations add);
    - ``filtered_active``: the same, rounds back to back with ``filter``
      :data:`QUALITY_FILTER` on ``plus1``.

    Returns the medians (ns per record) and, per round, the paired overheads: what the
    expectations add over their predicates, and what the idle tap and the filtered round add
    over the same job with sampling disabled (percent; median and 95% interval)."""
    from sparkglass.runtime.contract.expectations import expect, expectations_of
    from sparkglass.runtime.quality import count_expectations, observe_expectations

    def chain(
        name: str, enabled: bool, declared: bool, predicates: bool, observed: bool = False
    ) -> DataFrame:
        spark.conf.set(ENABLED, "true" if enabled else "false")
        p = Pipeline(name, spark)
        p.source("numbers", spark.range(0, rows, numPartitions=2))
        p.vertex("times3", "numbers", lambda df: df.selectExpr("id", "id * 3 AS t"))
        extra = [f"({cond}) AS c{i}" for i, (_, cond) in enumerate(QUALITY_EXPECTATIONS)]

        def plus1(df: DataFrame) -> DataFrame:
            out = df.selectExpr("id", "t", "t + 1 AS u")
            return out.selectExpr("*", *extra) if predicates else out

        fn = plus1
        if declared:
            for exp_name, cond in reversed(QUALITY_EXPECTATIONS):
                fn = expect(exp_name, cond)(fn)
        p.vertex("plus1", "times3", fn)
        if observed:
            return observe_expectations(p.output("plus1"), "plus1", expectations_of(fn))
        if declared:
            counted, tally = count_expectations(p.output("plus1"), "plus1", expectations_of(fn))
            if tally is None:
                raise SystemExit("the code-generated expectation counter is not available")
            return counted
        return p.output("plus1")

    jobs = {
        "plain": chain("quality-plain", False, False, False),
        "predicates": chain("quality-predicates", False, False, True),
        "expectations": chain("quality-declared", False, True, False),
        "observed": chain("quality-observed", False, True, False, observed=True),
        "expectations_idle": chain("quality-idle", True, True, False),
    }
    jobs["filtered_active"] = jobs["expectations_idle"]
    spark.conf.set(ENABLED, "true")
    ns: dict[str, list[float]] = {k: [] for k in jobs}
    order = list(jobs)
    for r in range(rounds):
        for scenario in order[r % len(order) :] + order[: r % len(order)]:
            if scenario == "filtered_active":
                request = RoundRequest(filter=QUALITY_FILTER)
                with ActiveSampling(coordinator, "plus1", request):
                    _, cpu_rps = run_once(spark, jobs[scenario], rows, 1)
            else:
                _, cpu_rps = run_once(spark, jobs[scenario], rows, 1)
            ns[scenario].append(1e9 / cpu_rps)
    kept = {k: v[1:] if len(v) > 2 else v for k, v in ns.items()}  # the first: JIT warm-up

    def paired(over: str, base: str) -> dict[str, Any]:
        return median_ci([100 * (x / b - 1) for x, b in zip(kept[over], kept[base], strict=True)])

    return {
        "expectations": [f"{n}: {c}" for n, c in QUALITY_EXPECTATIONS],
        "filter": QUALITY_FILTER,
        "ns_per_record": {k: round(statistics.median(v), 1) for k, v in kept.items()},
        # Positive = slower. Expectations against the same conditions as plain SQL columns:
        "expectations_over_predicates_pct": paired("expectations", "predicates"),
        # The same expectations counted with Spark's observe (the fallback), in the same run:
        "observed_over_predicates_pct": paired("observed", "predicates"),
        "observed_over_expectations_pct": paired("observed", "expectations"),
        # The tap with expectations declared, idle and in a filtered round, against the same
        # job with sampling disabled (target: idle at most 1%).
        "idle_tap_with_expectations_pct": paired("expectations_idle", "expectations"),
        "filtered_active_round_pct": paired("filtered_active", "expectations"),
        "rounds": len(kept["plain"]),
    }


def overhead_spread(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per-round paired overheads of idle and active against the baseline, in percent
    (``100 * (1 - scenario / baseline)`` of the same round): median and 95% bootstrap
    interval (``bench/spread.py``)."""
    return {
        k: median_ci(
            [100 * (1 - x / a) for x, a in zip(samples[k], samples["baseline"], strict=True)]
        )
        for k in ("idle", "active")
    }


def _half_width(ci: dict[str, Any]) -> float:
    return float(max(ci["median"] - ci["ci_low"], ci["ci_high"] - ci["median"]))


class ActiveSampling:
    """Keeps rounds running on one vertex, back to back, until stopped."""

    def __init__(
        self, coordinator: RoundCoordinator, vertex: str, request: RoundRequest | None = None
    ) -> None:
        self._c = coordinator
        self._vertex = vertex
        self._request = request
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rounds", daemon=True)
        self.rounds: list[dict[str, Any]] = []
        self._current: str | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._c.start_round(self._vertex, request=self._request)
            if started.status is not SampleStatus.PENDING or started.round_id is None:
                time.sleep(0.1)
                continue
            self._current = started.round_id
            result = self._c.wait(started.round_id, 60)
            self.rounds.append(
                {
                    "status": str(result.status),
                    "records": result.total_record_count,
                    "droppedByRateLimit": result.dropped_by_rate_limit,
                }
            )

    def __enter__(self) -> ActiveSampling:
        self._thread.start()
        time.sleep(0.3)  # executors pick the first round up within one poll (100 ms)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._current is not None:
            self._c.transport.cancel_round(self._current)  # end the last round now
        self._thread.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="records per job")
    parser.add_argument(
        "--rounds", type=int, default=10, help="measured rounds of A, B, C at least [10]"
    )
    parser.add_argument(
        "--ci-pp",
        type=float,
        default=0.5,
        help="go on until each overhead's 95%% interval is within +- this many points [0.5]",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=40.0,
        help="stop adding rounds after this [40; the SDP scenario's own default is 20]",
    )
    parser.add_argument("--warmup-rounds", type=int, default=1, help="rounds discarded")
    parser.add_argument("--gate-rows", type=int, default=20_000_000, help="gate cost jobs")
    parser.add_argument("--gate-rounds", type=int, default=5, help="gate cost rounds")
    parser.add_argument(
        "--quality-rounds", type=int, default=12, help="expectation/filter cost rounds [12]"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--scenario",
        choices=("all", "dsl", "sdp", "quality"),
        default="all",
        help="dsl: the DSL scenarios A/B/C, gate and quality costs; sdp: the Spark "
        "Declarative Pipeline scenario alone (bench/sdp_bench.py); quality: the expectation "
        "and filter costs alone, written into --output's quality_cost (the rest kept); all: "
        "dsl, then sdp in a process of its own [all]",
    )
    parser.add_argument("--sdp-rows", type=int, default=8_000_000, help="SDP: records per run")
    parser.add_argument("--sdp-files", type=int, default=8, help="SDP: input Parquet files")
    parser.add_argument("--sdp-output", type=Path, default=None, help="SDP: result file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.scenario == "sdp":
        import sdp_bench

        sdp_bench.main(sys.argv[1:])
        return
    if args.scenario == "quality":
        run_quality(args)
        return
    run_dsl(args)
    if args.scenario == "all":
        # Its own process: the Spark Connect server it starts leaves pyspark in Connect mode.
        subprocess.run(
            [sys.executable, __file__, *_without_scenario(sys.argv[1:]), "--scenario", "sdp"],
            check=True,
        )


def _without_scenario(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--scenario":
            skip = True
        elif not item.startswith("--scenario="):
            out.append(item)
    return out


def bench_session(app_name: str) -> SparkSession:
    """The benchmarks' session: ``local[2]``, the sampling plugin loaded, the UI on (task CPU
    time is read from its REST API), Spark's own log at ERROR."""
    spark = spark_session(
        app_name,
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "true"},
        sampling_plugin=True,
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_quality(args: argparse.Namespace) -> None:
    """The expectation and filter costs alone (:func:`quality_cost`), merged into
    ``args.output`` as ``quality_cost`` with its own ``quality_run`` provenance."""
    spark = bench_session("sparkglass-quality-bench")
    try:
        spark.conf.set(ENABLED, "true")
        quality = quality_cost(
            spark, registry.coordinator_for(spark), args.gate_rows, args.quality_rounds
        )
    finally:
        spark.stop()
    result = json.loads(args.output.read_text()) if args.output.exists() else {}
    result["quality_cost"] = quality
    result["quality_run"] = run_info()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(quality, indent=2))
    print(f"wrote {args.output}")


def run_dsl(args: argparse.Namespace) -> None:
    """The DSL scenarios (module docstring): writes ``args.output`` and prints a table."""
    spark = bench_session("sparkglass-sampling-bench")
    try:
        frames = {
            "baseline": build(spark, "bench-off", args.rows, enabled=False),
            "idle": build(spark, "bench-on", args.rows, enabled=True),
        }
        spark.conf.set(ENABLED, "true")
        coordinator = registry.coordinator_for(spark)
        cores = 2
        for df in frames.values():  # JIT and shuffle warm-up, not measured
            run_once(spark, df, args.rows, cores)
        samples: dict[str, list[float]] = {"baseline": [], "idle": [], "active": []}
        wall: dict[str, list[float]] = {"baseline": [], "idle": [], "active": []}
        rounds_seen: list[dict[str, Any]] = []
        order = ["baseline", "idle", "active"]
        budget_end = time.monotonic() + args.max_minutes * 60
        spread: dict[str, dict[str, Any]] = {}
        r = -1
        while True:
            r += 1
            measured = r - args.warmup_rounds
            if measured >= args.rounds:
                spread = overhead_spread(samples)
                if all(_half_width(v) <= args.ci_pp for v in spread.values()):
                    break
                if time.monotonic() > budget_end:
                    print(f"time budget spent with intervals {spread}")
                    break
            for scenario in order[r % 3 :] + order[: r % 3]:
                if scenario == "active":
                    with ActiveSampling(coordinator, "work") as active:
                        wall_rps, cpu_rps = run_once(spark, frames["idle"], args.rows, cores)
                    rounds_seen += active.rounds
                else:
                    wall_rps, cpu_rps = run_once(spark, frames[scenario], args.rows, cores)
                if r >= args.warmup_rounds:
                    samples[scenario].append(cpu_rps)
                    wall[scenario].append(wall_rps)
                print(
                    f"round {r + 1} {scenario:8s} {cpu_rps:>12,.0f} records/s "
                    f"(task CPU)  {wall_rps:>12,.0f} records/s (wall clock)"
                )
        gate = gate_cost(spark, coordinator, args.gate_rows, args.gate_rounds)
        quality = quality_cost(spark, coordinator, args.gate_rows, args.quality_rounds)
        print(f"gate cost: {gate}")
    finally:
        spark.stop()

    mean = {k: statistics.fmean(v) for k, v in samples.items()}
    # Paired: each round ran A, B and C back to back, so their ratio cancels slow drift.
    paired = {
        k: statistics.median(x / a for x, a in zip(samples[k], samples["baseline"], strict=True))
        for k in ("idle", "active")
    }
    result = {
        "run": run_info(),
        "baseline_rps": round(mean["baseline"]),
        "idle_rps": round(mean["idle"]),
        "active_rps": round(mean["active"]),
        "idle_overhead_pct": round(100 * (1 - mean["idle"] / mean["baseline"]), 2),
        "active_overhead_pct": round(100 * (1 - mean["active"] / mean["baseline"]), 2),
        "median_idle_overhead_pct": round(100 * (1 - paired["idle"]), 2),
        "median_active_overhead_pct": round(100 * (1 - paired["active"]), 2),
        # Median and 95% bootstrap interval of the per-round paired overheads (percent).
        "idle_overhead_pct_ci": spread["idle"],
        "active_overhead_pct_ci": spread["active"],
        "ci_target_pp": args.ci_pp,
        "ci_target_met": all(_half_width(v) <= args.ci_pp for v in spread.values()),
        "per_round_rps": {k: [round(x) for x in v] for k, v in samples.items()},
        "wall_clock_rps": {k: round(statistics.fmean(v)) for k, v in wall.items()},
        "wall_clock_idle_overhead_pct": round(
            100 * (1 - statistics.fmean(wall["idle"]) / statistics.fmean(wall["baseline"])), 2
        ),
        "wall_clock_active_overhead_pct": round(
            100 * (1 - statistics.fmean(wall["active"]) / statistics.fmean(wall["baseline"])), 2
        ),
        "measure": "records / (task CPU seconds / 2 cores); wall-clock numbers alongside",
        "gate_cost": gate,
        "quality_cost": quality,
        # What 3 taps cost at the main topology's measured CPU per record.
        "projected_idle_overhead_pct": round(
            100 * gate["idle_3_taps_ns_per_record"] / (1e9 * 2 / mean["baseline"]), 2
        ),
        "projected_active_overhead_pct": round(
            100 * gate["active_3_taps_ns_per_record"] / (1e9 * 2 / mean["baseline"]), 2
        ),
        "rows_per_job": args.rows,
        "measured_rounds": len(samples["baseline"]),
        "sampling_rounds_during_active": len(rounds_seen),
        "records_sampled_during_active": sum(x["records"] for x in rounds_seen),
        "topology": "range(2 partitions) -> repartition(2) -> 2x sha512 (~1 us) -> noop",
        "master": "local[2]",
        "cpu_count": os.cpu_count(),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    _print_table(result)
    print(f"wrote {args.output}")


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="sampling overhead (records/s of task CPU, mean of measured rounds)")
    table.add_column("scenario")
    table.add_column("records/s", justify="right")
    table.add_column("vs. baseline", justify="right")
    table.add_row("A. baseline (disabled)", f"{result['baseline_rps']:,}", "100%")
    table.add_row(
        "B. enabled, idle", f"{result['idle_rps']:,}", f"{-result['idle_overhead_pct']:+.2f}%"
    )
    table.add_row(
        "C. active sampling", f"{result['active_rps']:,}", f"{-result['active_overhead_pct']:+.2f}%"
    )
    Console().print(table)


if __name__ == "__main__":
    main()

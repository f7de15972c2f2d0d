"""The sampling benchmark's SDP scenario: a Spark Declarative Pipeline's streaming flow.

What ``sparkglass pipelines run`` does, in one process: a Spark Connect server started in
this process (``SparkSession.builder.remote("local[2]")``, as ``spark-pipelines run
--remote local`` does) with the sampling jar, plugin (``spark.plugins.defaultList``) and
session extension, and :func:`~sparkglass.runtime.sampling.attach.attach` on its classic
session. No :class:`~sparkglass.runtime.sampling.sdp.SdpGraph`: it would serve ``work`` from
its table between runs, and an active round opened before the next run's tap is placed would
read that table (jobs the measurement would count); the streaming tap is what is measured.

The pipeline: one streaming table ``work`` (``@dp.table``), reading ``--sdp-files`` Parquet
files of ``--sdp-rows`` ids in one micro-batch and computing the main scenarios' ``work``
expression (two nested SHA-512s, about 1 µs of CPU per record). Each run is a full refresh
(a new dataflow graph, every table reset), in three scenarios:

- **A baseline**: the flow's ``spark.sparkglass.sampling.enabled=false`` (SQL conf of the
  graph, so the extension's rule places no tap; checked: no tap placed during the run);
- **B idle**: ``true``: the rule taps the flow's output (checked: a tap placed), no round;
- **C active**: like B while rounds on the ``work`` vertex run back to back (the default
  3 s window, 100 records/s per subtask). A round can open only once this run's tap is
  registered (the discovery poll, every 0.5 s, after the query started), so the start of
  the micro-batch runs without one: hence many records per run (8M by default), so that
  the batch outlasts that. Rounds opened earlier hit the previous run's stopped tap and end
  ``FAILED`` at once (``rounds_by_status`` counts them).

Measured like the other scenarios: task CPU seconds of every stage that completed during
the run (Spark's ``executorCpuTime``, UI REST API), as records per second of task CPU per
core; A, B, C once per round in a rotating order, the first ``--warmup-rounds`` discarded,
then per-round paired overheads (``100 * (1 - scenario / baseline)``) with their median and
95% bootstrap interval (``bench/spread.py``), adding rounds until each interval is within
``--ci-pp`` points or ``--max-minutes`` passed. Task CPU is executor work only: a run
completes one stage, the flow's micro-batch (read, compute, write the table's files; seen
with ``--sdp-rows 200000``); graph registration, table reset and query start run on the
driver and are not counted. Writes ``bench/results/sampling-sdp.json``.

Run alone: ``.venv/bin/python bench/sampling_bench.py --scenario sdp`` (its own process: the
Spark Connect server puts pyspark in Connect mode for the rest of the process).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info
from spread import median_ci

log = logging.getLogger("sdp_bench")

ENABLED = "spark.sparkglass.sampling.enabled"
RESULTS = Path(__file__).parent / "results" / "sampling-sdp.json"
#: The main scenarios' per-record work (about 1 µs of CPU).
WORK_EXPR = "sha2(concat(cast(id AS string), sha2(cast(id AS string), 512)), 512) AS digest"
VERTEX = "work"


def write_input(root: Path, rows: int, files: int) -> Path:
    """``files`` Parquet files holding ids ``0 .. rows-1`` (a column ``id BIGINT``)."""
    out = root / "input"
    out.mkdir(parents=True, exist_ok=True)
    per_file = -(-rows // files)
    for i in range(files):
        ids = np.arange(i * per_file, min(rows, (i + 1) * per_file), dtype=np.int64)
        pq.write_table(pa.table({"id": ids}), out / f"part-{i:04d}.parquet")
    return out


class StageCpu:
    """Task CPU seconds of the stages that completed since the last call (UI REST API)."""

    def __init__(self, classic: Any) -> None:
        sc = classic.sparkContext
        self._url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages"
        self._seen: set[tuple[int, int]] = set()
        self.take()

    def _stages(self, status: str) -> list[dict[str, Any]]:
        return list(httpx.get(self._url, params={"status": status}, timeout=30).json())

    def take(self, timeout_s: float = 60) -> float:
        """Wait (up to ``timeout_s``) until no stage is active, then sum the new ones."""
        deadline = time.monotonic() + timeout_s
        while self._stages("active") and time.monotonic() < deadline:
            time.sleep(0.2)
        total = 0
        for stage in self._stages("complete"):
            key = (int(stage["stageId"]), int(stage["attemptId"]))
            if key not in self._seen:
                self._seen.add(key)
                total += int(stage.get("executorCpuTime", 0))
        return total / 1e9


class Rounds:
    """Rounds on one vertex, back to back, until stopped (the tap may not exist yet: a new
    run places a new one, so starting a round is retried until it opens)."""

    def __init__(self, coordinator: Any, vertex: str) -> None:
        self._c = coordinator
        self._vertex = vertex
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sdp-rounds", daemon=True)
        self.results: list[dict[str, Any]] = []
        self._current: str | None = None

    def _run(self) -> None:
        from sparkglass.runtime.contract.sample_result import SampleStatus

        while not self._stop.is_set():
            try:
                started = self._c.start_round(self._vertex)
            except Exception:  # the vertex is not listed yet
                self._stop.wait(0.1)
                continue
            if started.status is not SampleStatus.PENDING or started.round_id is None:
                self._stop.wait(0.1)
                continue
            self._current = started.round_id
            result = self._c.wait(started.round_id, 60)
            self.results.append(
                {"status": str(result.status), "records": result.total_record_count}
            )
            if result.status is not SampleStatus.COMPLETE:
                # e.g. FAILED, QUERY_TERMINATED: the previous run's tap, until this run's
                # query places its own; do not spin on it.
                self._stop.wait(0.1)

    def __enter__(self) -> Rounds:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._current is not None:
            self._c.transport.cancel_round(self._current)
        self._thread.join(timeout=30)


class SdpRunner:
    """One Spark Connect server in this process, running the benchmark pipeline on demand."""

    def __init__(self, root: Path, rows: int, files: int) -> None:
        from pyspark.sql import SparkSession

        from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
        from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        self.rows = rows
        self.input = write_input(root, rows, files)
        self.storage = (root / "storage").as_uri()
        conf = {
            "spark.jars": str(sampling_jar()),
            "spark.plugins.defaultList": PLUGIN_CLASS,
            "spark.sql.extensions": EXTENSIONS_CLASS,
            ENABLED: "true",
            "spark.ui.enabled": "true",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.warehouse.dir": str(root / "warehouse"),
            "spark.driver.memory": "2g",
        }
        # The Connect client then tries to set each conf on its session and warns for the
        # static ones (harmless, docs/pipelines.md).
        warnings.filterwarnings("ignore", message="Failed to set spark")
        builder = SparkSession.builder.remote("local[2]")
        for key, value in conf.items():
            builder = builder.config(key, value)
        self.connect = builder.getOrCreate()
        from pyspark.sql import SparkSession as Classic

        classic = Classic._instantiatedSession
        assert classic is not None, "no classic session behind the local Connect server"
        self.classic = classic
        classic.sparkContext.setLogLevel("ERROR")

        from sparkglass.runtime.sampling.attach import attach
        from sparkglass.runtime.sampling.registry import coordinator_for

        pipeline = attach(classic, name="sdp-bench")
        assert pipeline is not None, "sampling is off"
        self.pipeline = pipeline
        self.coordinator = coordinator_for(classic)
        self.cpu = StageCpu(classic)

    def run(self, enabled: bool) -> tuple[float, float, bool]:
        """One full-refresh run: (wall-clock records/s, task-CPU records/s per core, whether a
        tap was placed during it)."""
        from pyspark import pipelines as dp
        from pyspark.pipelines.graph_element_registry import graph_element_registration_context
        from pyspark.pipelines.spark_connect_graph_element_registry import (
            SparkConnectGraphElementRegistry,
        )
        from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run

        connect, source = self.connect, str(self.input)
        before = self._placed()
        self.cpu.take()
        started = time.perf_counter()
        graph_id = create_dataflow_graph(
            connect,
            default_catalog=None,
            default_database=None,
            sql_conf={ENABLED: "true" if enabled else "false"},
        )
        registry = SparkConnectGraphElementRegistry(connect, graph_id)
        with graph_element_registration_context(registry):

            @dp.table(name=VERTEX)
            def work() -> Any:
                return (
                    connect.readStream.schema("id BIGINT")
                    .parquet(source)
                    .selectExpr("id", WORK_EXPR)
                )

        events = start_run(
            connect,
            graph_id,
            full_refresh=None,
            full_refresh_all=True,
            refresh=None,
            dry=False,
            storage=self.storage,
        )
        for _ in events:  # the run's events; the run has ended when they do
            pass
        wall = time.perf_counter() - started
        cpu = max(self.cpu.take(), 1e-3)
        return self.rows / wall, self.rows / (cpu / 2), self._placed() > before

    def _placed(self) -> int:
        self.pipeline.refresh()
        return int(self.pipeline.discovery.version)

    def stop(self) -> None:
        self.connect.stop()


def _half_width(ci: dict[str, Any]) -> float:
    return float(max(ci["median"] - ci["ci_low"], ci["ci_high"] - ci["median"]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the SDP scenario (see module docstring); returns and writes the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--sdp-rows", type=int, default=8_000_000, help="records per run [8M]")
    parser.add_argument("--sdp-files", type=int, default=8, help="input Parquet files [8]")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds at least [10]")
    parser.add_argument("--ci-pp", type=float, default=0.5, help="interval half-width target")
    parser.add_argument("--max-minutes", type=float, default=20.0, help="round budget [20]")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="rounds discarded [1]")
    parser.add_argument("--sdp-output", type=Path, default=RESULTS)
    args, _ = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.WARNING)

    samples: dict[str, list[float]] = {"baseline": [], "idle": [], "active": []}
    wall: dict[str, list[float]] = {"baseline": [], "idle": [], "active": []}
    taps: dict[str, list[bool]] = {"baseline": [], "idle": [], "active": []}
    rounds_seen: list[dict[str, Any]] = []
    spread: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="sparkglass-sdp-bench-") as tmp:
        runner = SdpRunner(Path(tmp), args.sdp_rows, args.sdp_files)
        try:
            order = ["baseline", "idle", "active"]
            budget_end = time.monotonic() + args.max_minutes * 60
            r = -1
            while True:
                r += 1
                if r - args.warmup_rounds >= args.rounds:
                    spread = _spread(samples)
                    if all(_half_width(v) <= args.ci_pp for v in spread.values()):
                        break
                    if time.monotonic() > budget_end:
                        print(f"time budget spent with intervals {spread}")
                        break
                for scenario in order[r % 3 :] + order[: r % 3]:
                    if scenario == "active":
                        with Rounds(runner.coordinator, VERTEX) as active:
                            wall_rps, cpu_rps, tapped = runner.run(enabled=True)
                        rounds_seen += active.results
                    else:
                        wall_rps, cpu_rps, tapped = runner.run(enabled=scenario != "baseline")
                    if r >= args.warmup_rounds:
                        samples[scenario].append(cpu_rps)
                        wall[scenario].append(wall_rps)
                    taps[scenario].append(tapped)
                    print(
                        f"sdp round {r + 1} {scenario:8s} {cpu_rps:>12,.0f} records/s "
                        f"(task CPU)  {wall_rps:>12,.0f} records/s (wall clock)  tap: {tapped}",
                        flush=True,
                    )
        finally:
            runner.stop()
    if not spread:
        spread = _spread(samples)
    result = {
        "run": run_info(),
        "scenario": "sdp",
        "idle_overhead_pct_ci": spread["idle"],
        "active_overhead_pct_ci": spread["active"],
        "ci_target_pp": args.ci_pp,
        "ci_target_met": all(_half_width(v) <= args.ci_pp for v in spread.values()),
        "targets_pct": {"idle": 1.0, "active": 2.0},
        "mean_rps": {k: round(statistics.fmean(v)) for k, v in samples.items()},
        "per_round_rps": {k: [round(x) for x in v] for k, v in samples.items()},
        "wall_clock_rps": {k: round(statistics.fmean(v)) for k, v in wall.items()},
        # A check on the scenarios themselves: the baseline's runs place no tap, B's and C's do.
        "runs_placing_a_tap": {k: f"{sum(v)} of {len(v)}" for k, v in taps.items()},
        "sampling_rounds_during_active": len(rounds_seen),
        "records_sampled_during_active": sum(x["records"] for x in rounds_seen),
        "rounds_by_status": {
            s: sum(1 for x in rounds_seen if x["status"] == s)
            for s in sorted({x["status"] for x in rounds_seen})
        },
        "measure": "records / (task CPU seconds of the run's stages / 2 cores); wall alongside",
        "rows_per_run": args.sdp_rows,
        "files": args.sdp_files,
        "measured_rounds": len(samples["baseline"]),
        "topology": "SDP streaming table: parquet files -> 2x sha512 (~1 us) -> table, "
        "one micro-batch, full refresh per run",
        "master": "local[2] (Spark Connect server in process)",
        "cpu_count": os.cpu_count(),
    }
    args.sdp_output.parent.mkdir(parents=True, exist_ok=True)
    args.sdp_output.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"SDP: idle overhead {spread['idle']['median']}% "
        f"[{spread['idle']['ci_low']}, {spread['idle']['ci_high']}], active "
        f"{spread['active']['median']}% [{spread['active']['ci_low']}, "
        f"{spread['active']['ci_high']}] (targets 1%, 2%); wrote {args.sdp_output}"
    )
    return result


def _spread(samples: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per-round paired overheads against the baseline, percent: median and 95% interval."""
    return {
        k: median_ci(
            [100 * (1 - x / a) for x, a in zip(samples[k], samples["baseline"], strict=True)]
        )
        for k in ("idle", "active")
    }


if __name__ == "__main__":
    main()

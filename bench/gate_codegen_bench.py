"""Idle tap gate cost: no tap vs the UDF gate vs the code-generated gate, in one run.

A trivial map (``spark.range(rows, numPartitions=2)`` → ``id * 3`` → ``+ 1`` → ``- 2``) written
to ``noop`` on ``local[2]``, in three variants:

- **plain**: no tap;
- **udf**: a tap at each of the three map outputs with the UDF gate (the gate of
  ``spark.sparkglass.sampling.nativeGate=false``), a ``GateUdf`` behind a ``ScalaUDF``
  (``CASE WHEN sg_gate() THEN sg_capture(struct(*)) ELSE true END``);
- **native**: the same taps with the code-generated gate (``NativeTapGate``, the default):
  in whole-stage generated code an idle tap reads one volatile field.

No round runs (idle taps). Each round runs the three variants once, in a rotating order; the
first ``--warmup-rounds`` are discarded (JIT). The figure is task CPU ns per record
(Spark's ``executorCpuTime`` from the UI's REST API, ``sampling_bench.run_once``), and per
round the paired differences ``(udf - plain) / 3`` and ``(native - plain) / 3``: ns per
record per idle tap. Medians with 95% bootstrap intervals over rounds (``spread.median_ci``).
The machine is shared: absolute figures are upper bounds, the A/B in the same run is the
result. ``projected_idle_overhead_pct`` puts 3 taps' cost against the CPU per record of the
sampling benchmark's topology as ``bench/results/sampling.json`` recorded it.

Run: ``.venv/bin/python bench/gate_codegen_bench.py [--rounds 12]``; writes
``bench/results/gate-codegen.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info
from sampling_bench import bench_session, run_once
from spread import median_ci

RESULTS = Path(__file__).parent / "results" / "gate-codegen.json"
SAMPLING_RESULTS = Path(__file__).parent / "results" / "sampling.json"
TAPS = 3
MAPS = ("id * 3 AS id", "id + 1 AS id", "id - 2 AS id")


def tapped(spark: SparkSession, rows: int, gate: str | None) -> DataFrame:
    """The trivial map with a tap after each step (``gate``: ``udf``/``native``), or none."""
    jvm, js = spark._jvm, spark._jsparkSession
    df = spark.range(0, rows, numPartitions=2)
    for expr in MAPS:
        df = df.selectExpr(expr)
        if gate is None:
            continue
        n = uuid.uuid4().hex[:8]
        key = f"gate-bench/{gate}/{n}"
        udf_gate, native_gate, capture = f"sg_bg_{n}", f"sg_bng_{n}", f"sg_bc_{n}"
        jvm.io.sparkglass.sampling.TapUdfs.register(js, key, udf_gate, capture)
        jvm.io.sparkglass.extensions.NativeGates.register(js, key, native_gate)
        name = udf_gate if gate == "udf" else native_gate
        df = df.filter(f"CASE WHEN {name}() THEN {capture}(struct(*)) ELSE true END")
    return df


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="records per job")
    parser.add_argument("--rounds", type=int, default=12, help="measured rounds [12]")
    parser.add_argument("--warmup-rounds", type=int, default=2, help="rounds discarded [2]")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    info_before = run_info()

    spark = bench_session("sparkglass-gate-codegen-bench")
    try:
        frames = {
            v: tapped(spark, args.rows, None if v == "plain" else v)
            for v in ("plain", "udf", "native")
        }
        plan = str(frames["native"]._jdf.queryExecution().executedPlan().toString())
        assert "sg_tap_gate_native" in plan, plan
        ns: dict[str, list[float]] = {v: [] for v in frames}
        order = list(frames)
        for r in range(args.warmup_rounds + args.rounds):
            rotated = order[r % 3 :] + order[: r % 3]
            for v in rotated:
                _, cpu_rps = run_once(spark, frames[v], args.rows, 1)
                if r >= args.warmup_rounds:
                    ns[v].append(1e9 / cpu_rps)
            if r >= args.warmup_rounds:
                print(
                    f"round {r - args.warmup_rounds}: "
                    + " ".join(f"{v}={ns[v][-1]:.2f}" for v in order),
                    flush=True,
                )
    finally:
        spark.stop()

    per_tap = {
        v: [(ns[v][i] - ns["plain"][i]) / TAPS for i in range(args.rounds)]
        for v in ("udf", "native")
    }
    ratio = [
        per_tap["native"][i] / per_tap["udf"][i] if per_tap["udf"][i] > 0 else float("nan")
        for i in range(args.rounds)
    ]
    per_tap_ci = {v: median_ci(per_tap[v]) for v in per_tap}
    topology_ns = None
    if SAMPLING_RESULTS.is_file():
        baseline_rps = json.loads(SAMPLING_RESULTS.read_text()).get("baseline_rps")
        topology_ns = 1e9 * 2 / baseline_rps if baseline_rps else None
    result: dict[str, Any] = {
        "run": {**info_before, "loadAverageAtEnd": run_info()["loadAverage"]},
        "rows_per_job": args.rows,
        "measured_rounds": args.rounds,
        "taps_per_variant": TAPS,
        "topology": "range(2 partitions) -> 3 maps, a tap after each (or none) -> noop",
        "measure": "task CPU ns per record (executorCpuTime / rows), per round",
        "ns_per_record": {v: median_ci(ns[v]) for v in ns},
        "idle_ns_per_record_per_tap": per_tap_ci,
        "native_over_udf_per_tap_cost": median_ci([x for x in ratio if x == x]),
        "per_round_ns_per_record": {v: [round(x, 3) for x in ns[v]] for v in ns},
        "benchmark_topology_ns_per_record": round(topology_ns, 1) if topology_ns else None,
        "projected_idle_overhead_pct": (
            {
                v: {
                    k: round(100 * TAPS * per_tap_ci[v][k] / topology_ns, 3)
                    for k in ("median", "ci_low", "ci_high")
                }
                for v in per_tap_ci
            }
            if topology_ns
            else None
        ),
        "targets": {"idle_ns_per_record_per_tap": 2.0, "idle_overhead_pct": 0.3},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    shown = (
        "ns_per_record",
        "idle_ns_per_record_per_tap",
        "native_over_udf_per_tap_cost",
        "projected_idle_overhead_pct",
    )
    print(json.dumps({k: result[k] for k in shown}, indent=2))
    print(f"load {result['run']['loadAverage']} -> {result['run']['loadAverageAtEnd']}")


if __name__ == "__main__":
    main()

"""Idle tap gate cost: no tap vs the UDF gate vs the code-generated gate, in one run.

A trivial map (``spark.range(rows, numPartitions=2)`` → ``id * 3`` → ``+ 1`` → ``- 2``, the
three maps repeated up to ``--taps`` steps) written to ``noop`` on ``local[2]``, in these
variants (``--variants``, default ``plain,udf,native``):

- **plain**: no tap;
- **udf**: a tap at each map output with the UDF gate (the gate of
  ``spark.sparkglass.sampling.nativeGate=false``), a ``GateUdf`` behind a ``ScalaUDF``
  (``CASE WHEN sg_gate() THEN sg_capture(struct(*)) ELSE true END``);
- **native**: the same taps as the DSL places them by default: the code-generated gate
  (``NativeTapGate``; in whole-stage generated code an idle tap reads one volatile field) and
  the capture in a method of its own (``TapCapture``);
- **inline**: the native gate with the capture's code inline in the stage's method, as taps
  were before ``TapCapture``: the A/B of the capture's split (many taps in one stage push an
  inline method past the JIT's 8,000-byte limit).

No round runs (idle taps). Each round runs the variants once, in a rotating order; the
first ``--warmup-rounds`` are discarded (JIT). The figure is task CPU ns per record
(Spark's ``executorCpuTime`` from the UI's REST API, ``sampling_bench.run_once``), and per
round the paired differences ``(variant - plain) / taps``: ns per record per idle tap.
Medians with 95% bootstrap intervals over rounds (``spread.median_ci``). The machine is
shared: absolute figures are upper bounds, the A/B in the same run is the result.
``projected_idle_overhead_pct`` puts the taps' cost against the CPU per record of the
sampling benchmark's topology as ``bench/results/sampling.json`` recorded it.

Run: ``.venv/bin/python bench/gate_codegen_bench.py [--rounds 12]``; writes
``bench/results/gate-codegen.json``. Many taps in one stage, before and after the split:
``--taps 50 --variants plain,inline,native --rows 2000000 --output /tmp/gate-50.json``.
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
MAPS = ("id * 3 AS id", "id + 1 AS id", "id - 2 AS id")
VARIANTS = ("plain", "udf", "native", "inline")


def tapped(spark: SparkSession, rows: int, taps: int, variant: str) -> DataFrame:
    """The trivial map of ``taps`` steps with a tap of ``variant`` after each (none for
    ``plain``)."""
    jvm, js = spark._jvm, spark._jsparkSession
    df = spark.range(0, rows, numPartitions=2)
    for i in range(taps):
        df = df.selectExpr(MAPS[i % len(MAPS)])
        if variant == "plain":
            continue
        n = uuid.uuid4().hex[:8]
        key = f"gate-bench/{variant}/{n}"
        gate, capture = f"sg_bg_{n}", f"sg_bc_{n}"
        if variant == "udf":
            jvm.io.sparkglass.sampling.TapUdfs.register(js, key, gate, capture)
        elif variant == "native":
            jvm.io.sparkglass.extensions.NativeGates.registerTap(js, key, gate, capture)
        else:  # inline: the capture a plain UDF, its code in the stage's method
            jvm.io.sparkglass.sampling.TapUdfs.registerCapture(js, key, capture)
            jvm.io.sparkglass.extensions.NativeGates.register(js, key, gate)
        df = df.filter(f"CASE WHEN {gate}() THEN {capture}(struct(*)) ELSE true END")
    return df


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="records per job")
    parser.add_argument("--rounds", type=int, default=12, help="measured rounds [12]")
    parser.add_argument("--warmup-rounds", type=int, default=2, help="rounds discarded [2]")
    parser.add_argument("--taps", type=int, default=3, help="tapped map steps [3]")
    parser.add_argument(
        "--variants",
        default="plain,udf,native",
        help=f"comma-separated, plain first, of {', '.join(VARIANTS)} [plain,udf,native]",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if variants[:1] != ["plain"] or len(variants) < 2 or set(variants) - set(VARIANTS):
        parser.error(f"--variants: plain first, then some of {', '.join(VARIANTS[1:])}")
    taps = args.taps
    logging.basicConfig(level=logging.WARNING)
    info_before = run_info()

    spark = bench_session("sparkglass-gate-codegen-bench")
    try:
        frames = {v: tapped(spark, args.rows, taps, v) for v in variants}
        for v in ("native", "inline"):
            if v in frames:
                plan = str(frames[v]._jdf.queryExecution().executedPlan().toString())
                assert "sg_tap_gate_native" in plan, plan
        ns: dict[str, list[float]] = {v: [] for v in frames}
        order = list(frames)
        for r in range(args.warmup_rounds + args.rounds):
            k = r % len(order)
            rotated = order[k:] + order[:k]
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
        v: [(ns[v][i] - ns["plain"][i]) / taps for i in range(args.rounds)] for v in variants[1:]
    }
    ratio = (
        [
            per_tap["native"][i] / per_tap["udf"][i] if per_tap["udf"][i] > 0 else float("nan")
            for i in range(args.rounds)
        ]
        if {"native", "udf"} <= set(per_tap)
        else []
    )
    per_tap_ci = {v: median_ci(per_tap[v]) for v in per_tap}
    topology_ns = None
    if SAMPLING_RESULTS.is_file():
        baseline_rps = json.loads(SAMPLING_RESULTS.read_text()).get("baseline_rps")
        topology_ns = 1e9 * 2 / baseline_rps if baseline_rps else None
    result: dict[str, Any] = {
        "run": {**info_before, "loadAverageAtEnd": run_info()["loadAverage"]},
        "rows_per_job": args.rows,
        "measured_rounds": args.rounds,
        "taps_per_variant": taps,
        "topology": f"range(2 partitions) -> {taps} maps, a tap after each (or none) -> noop",
        "measure": "task CPU ns per record (executorCpuTime / rows), per round",
        "ns_per_record": {v: median_ci(ns[v]) for v in ns},
        "idle_ns_per_record_per_tap": per_tap_ci,
        "native_over_udf_per_tap_cost": (
            median_ci([x for x in ratio if x == x]) if any(x == x for x in ratio) else None
        ),
        "per_round_ns_per_record": {v: [round(x, 3) for x in ns[v]] for v in ns},
        "benchmark_topology_ns_per_record": round(topology_ns, 1) if topology_ns else None,
        "projected_idle_overhead_pct": (
            {
                v: {
                    k: round(100 * taps * per_tap_ci[v][k] / topology_ns, 3)
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

"""Scaling benchmark: how sparkglass's cost grows with taps, partitions, rounds and
applications, one figure per curve.

1. **taps** (``local[2]``): 1, 5, 20, 50 tapped vertices in a chain; gate cost per record
   (task-CPU ns, idle and with a round running) and the overhead on a job doing ~1 µs of
   work per record. sampling_bench's method: Spark's ``executorCpuTime`` from the UI REST
   API, variants rotated per repeat, paired per repeat.
2. **partitions** (``local-cluster[2,1,1024]``): 10, 100, 1000, 10000 partitions; one round
   over the whole job: trigger→COMPLETE latency, driver JVM CPU and heap against the same job
   without a round, the records the executors reported and those the driver kept of them,
   and the caps (1000 records per subtask, 5000 per response) checked at every size.
3. **concurrency** (one application): 1 to 5 rounds at once, latency of each; then a 6th,
   which must be refused with ``TOO_MANY_CONCURRENT_ROUNDS``, and how long the refusal took.
4. **applications**: 1, 10, 100, 300 applications registered in one ``sparkglass serve``,
   each polled by 2 open pages at 1 poll/s: p99, CPU ms per poll, store growth per hour of
   retention (extrapolated from measured bytes per round and per audit event).

Every point is repeated (``--repeats``, 3) and reported as the median and its 95% bootstrap
interval (``bench/spread.py``); each point states its repeat count. The Spark curves run in
child processes (one SparkContext each; a child that overruns ``--child-timeout`` is killed
with its JVMs). Writes ``bench/results/scale.json`` and ``bench/results/scale-<curve>.png``;
``--quick`` runs tiny sizes for development and writes under ``/tmp`` unless ``--output``
says otherwise, so a quick run never lands in ``bench/results``. ``--merge`` measures some
curves again and keeps the others of the existing file (``runs`` says which run made each).

Run: ``make bench-scale`` or ``.venv/bin/python bench/scale_bench.py [--quick] [--curves ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info
from scale_report import Series, panel, plot_curve

RESULTS = Path(__file__).parent / "results" / "scale.json"
QUICK_RESULTS = Path(tempfile.gettempdir()) / "sparkglass-scale-quick" / "scale.json"
CURVES = ("taps", "partitions", "concurrency", "apps")

#: Sizes per curve: the issue's, and tiny ones for ``--quick``.
FULL = {
    "taps": [1, 5, 20, 50],
    "partitions": [10, 100, 1000, 10000],
    "apps": [1, 10, 100, 300],
    "gate_rows": 20_000_000,  # as sampling_bench's gate cost and main jobs
    "job_rows": 2_000_000,
    "rows_per_partition": 200,
    "service_window_s": 30.0,
    "round_window_s": 3,
}
QUICK = {
    "taps": [1, 5],
    "partitions": [10, 100],
    "apps": [1, 10],
    "gate_rows": 1_000_000,
    "job_rows": 100_000,
    "rows_per_partition": 200,
    "service_window_s": 5.0,
    "round_window_s": 1,
}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for development")
    parser.add_argument("--curves", default=",".join(CURVES), help="comma-separated subset")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per point [3]")
    parser.add_argument("--taps", type=_ints, help="tapped vertices per chain [1,5,20,50]")
    parser.add_argument("--partitions", type=_ints, help="partitions [10,100,1000,10000]")
    parser.add_argument("--apps", type=_ints, help="registered applications [1,10,100,300]")
    parser.add_argument("--gate-rows", type=int, help="records per gate-cost job")
    parser.add_argument("--job-rows", type=int, help="records per job-overhead job")
    parser.add_argument("--rows-per-partition", type=int, help="partitions curve [200]")
    parser.add_argument(
        "--max-sample-rate", type=int, default=100,
        help="spark.sparkglass.sampling.max-sample-rate of the partitions curve [100]",
    )
    parser.add_argument(
        "--round-window-s", type=int,
        help="window of the taps curve's active rounds and the concurrency curve's [3]",
    )
    parser.add_argument("--service-window-s", type=float, help="open-loop window per repeat")
    parser.add_argument("--refresh-s", type=float, default=60.0,
                        help="the service's refresh interval [60, its default]")
    parser.add_argument("--retention-hours", type=float, default=168.0,
                        help="retention for the store's steady state [168, the default]")
    parser.add_argument("--child-timeout", type=float, default=3600.0,
                        help="seconds a Spark child may run before it is killed")
    parser.add_argument("--output", type=Path, help="JSON path (plots go next to it)")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the curves of an existing --output that this run does not measure "
        "(each curve's run is recorded under `runs`)",
    )
    parser.add_argument("--child", choices=("taps", "partitions"), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for key, default in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    args.curves = [c.strip() for c in args.curves.split(",") if c.strip()]
    unknown = set(args.curves) - set(CURVES)
    if unknown:
        parser.error(f"unknown curves {sorted(unknown)}; known: {', '.join(CURVES)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.output is None:
        args.output = QUICK_RESULTS if args.quick else RESULTS
    return args


# ---------------------------------------------------------------------------- children


def run_spark_child(kind: str, argv: Sequence[str], timeout_s: float, work: Path) -> dict[str, Any]:
    """Run this script as ``--child kind`` and return what it wrote.

    The child gets a session (process group) of its own: on a timeout the whole group, its
    Spark JVMs and local-cluster workers included, is killed, not just the Python process."""
    out = work / f"{kind}.json"
    cmd = [sys.executable, __file__, *argv, "--child", kind, "--child-out", str(out)]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        raise RuntimeError(f"the {kind} child ran over {timeout_s} s and was killed") from None
    finally:
        # Spark's local-cluster workers outlive a driver that died badly: end the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    if rc != 0 or not out.exists():
        raise RuntimeError(f"the {kind} child failed (exit {rc})")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


# ------------------------------------------------------------------------------- plots


def _single(value: float) -> dict[str, float]:
    """A figure measured once per point, in the interval shape the plots take."""
    return {"median": value, "ci_low": value, "ci_high": value}


def plot_all(curves: Mapping[str, Any], out_dir: Path) -> dict[str, str]:
    """One PNG per curve present in ``curves``; their paths by curve."""
    written: dict[str, str] = {}
    spread = "median and 95% bootstrap interval over repeats"
    if "taps" in curves:
        pts = curves["taps"]["points"]
        path = out_dir / "scale-taps.png"
        plot_curve(
            path,
            "Sampling cost vs tapped vertices (local[2])",
            "tapped vertices in the chain",
            [
                panel("gate cost (task-CPU ns per record)", pts, "taps", [
                    ("gate_idle_ns_per_record", "idle (no round)"),
                    ("gate_active_ns_per_record", "active (one round)"),
                ]),
                panel("job overhead (% of task CPU)", pts, "taps", [
                    ("job_idle_overhead_pct", "idle (no round)"),
                    ("job_active_overhead_pct", "active (one round)"),
                ]),
            ],
            logx=True,
            note=spread,
        )
        written["taps"] = str(path)
    if "partitions" in curves:
        pts = curves["partitions"]["points"]
        path = out_dir / "scale-partitions.png"
        reports = [
            {"partitions": p["partitions"], **{
                k: {m: p[k][m] / 1e6 for m in ("median", "ci_low", "ci_high")}
                for k in ("report_bytes",) if k in p
            }} for p in pts
        ]
        plot_curve(
            path,
            "Round cost vs partitions (local-cluster[2,1,1024])",
            "partitions of the sampled stage",
            [
                panel("latency (s)", pts, "partitions", [
                    ("latency_s", "trigger to COMPLETE"),
                    ("latency_beyond_window_s", "beyond the window"),
                ]),
                panel("driver per round (CPU ms; heap MB)", pts, "partitions", [
                    ("driver_cpu_ms_per_round", "JVM CPU ms"),
                    ("driver_heap_mb_per_round", "JVM heap peak MB"),
                ]),
                panel("the driver's kept reports (MB of JSON)", reports, "partitions", [
                    ("report_bytes", "handed to Python by the driver"),
                ]),
                panel("records", pts, "partitions", [
                    ("report_records", "in executor reports"),
                    ("driver_kept_records", "kept by the driver"),
                    ("response_records", "in the response (cap 5000)"),
                    ("max_records_per_subtask", "most in one subtask (cap 1000)"),
                ], logy=True),
            ],
            logx=True,
            note=spread,
        )
        written["partitions"] = str(path)
    if "concurrency" in curves:
        c = curves["concurrency"]
        pts = c["points"]
        sixth = c["sixth"]
        latency = panel("latency, trigger to final status (s)", pts, "concurrent_rounds", [
            ("latency_s", "each round"),
            ("batch_max_latency_s", "slowest of the batch"),
        ])
        if "latency_ms" in sixth:  # on the same axis, in seconds: a refusal is no round
            latency.series.append(Series(
                "6th: refused (TOO_MANY_CONCURRENT_ROUNDS)",
                [float(sixth["concurrent_rounds"])],
                [{k: sixth["latency_ms"][k] / 1000 for k in ("median", "ci_low", "ci_high")}],
            ))
        path = out_dir / "scale-concurrency.png"
        plot_curve(
            path,
            f"Concurrent rounds on one application ({c['window_s']} s window)",
            "rounds asked for at once",
            [latency],
            note=spread,
        )
        written["concurrency"] = str(path)
    if "apps" in curves:
        pts = curves["apps"]["points"]
        growth = [
            {"applications": p["applications"],
             "mb_per_hour": _single(p["store"]["growth"]["total_mb_per_hour"]),
             "rounds_mb_per_hour": _single(p["store"]["growth"]["rounds_mb_per_hour"])}
            for p in pts
        ]
        path = out_dir / "scale-apps.png"
        plot_curve(
            path,
            "Service vs registered applications (2 pages each, 1 poll/s)",
            "registered applications",
            [
                panel("poll latency (ms)", pts, "applications", [
                    ("p99_ms", "p99"), ("p50_ms", "p50"),
                ]),
                panel("service CPU per poll (ms)", pts, "applications", [
                    ("cpu_ms_per_poll", "CPU ms per poll"),
                ]),
                panel("store growth (MB per hour, extrapolated)", growth, "applications", [
                    ("mb_per_hour", "rounds + audit events"),
                    ("rounds_mb_per_hour", "rounds only"),
                ]),
            ],
            logx=True,
            note=spread + "; store growth: one figure per point, extrapolated",
        )
        written["apps"] = str(path)
    return written


# -------------------------------------------------------------------------------- main


def _child_argv(args: argparse.Namespace) -> list[str]:
    """The options a child needs, as given to (or defaulted by) this run."""
    return [
        *(["--quick"] if args.quick else []),
        "--curves", ",".join(args.curves),
        "--repeats", str(args.repeats),
        "--taps", ",".join(map(str, args.taps)),
        "--partitions", ",".join(map(str, args.partitions)),
        "--gate-rows", str(args.gate_rows),
        "--job-rows", str(args.job_rows),
        "--rows-per-partition", str(args.rows_per_partition),
        "--max-sample-rate", str(args.max_sample_rate),
        "--round-window-s", str(args.round_window_s),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        from scale_spark import run_child

        result = run_child(args.child, args)
        args.child_out.write_text(json.dumps(result, indent=2) + "\n")
        return
    started = time.monotonic()
    info = run_info()
    curves: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sparkglass-scale-") as tmp:
        work = Path(tmp)
        if {"taps", "concurrency"} & set(args.curves):
            t = time.monotonic()
            curves.update(run_spark_child("taps", _child_argv(args), args.child_timeout, work))
            seconds["taps+concurrency"] = round(time.monotonic() - t, 1)
        if "partitions" in args.curves:
            t = time.monotonic()
            curves.update(
                run_spark_child("partitions", _child_argv(args), args.child_timeout, work)
            )
            seconds["partitions"] = round(time.monotonic() - t, 1)
    if "apps" in args.curves:
        from scale_service import apps_curve

        t = time.monotonic()
        curves["apps"] = apps_curve(args)
        seconds["apps"] = round(time.monotonic() - t, 1)
    runs = {name: info for name in curves}
    if args.merge and args.output.exists():
        earlier = json.loads(args.output.read_text())
        for name, curve in earlier.get("curves", {}).items():
            if name not in curves:
                curves[name] = curve
                runs[name] = earlier.get("runs", {}).get(name, earlier.get("run"))
    plots = plot_all(curves, args.output.parent)
    result = {
        "run": info,
        "runs": runs,
        "quick": args.quick,
        "repeats": args.repeats,
        "repeats_note": (
            "every point repeated --repeats times (its own `repeats` says how many it got); "
            "figures are the median and 95% bootstrap interval over repeats (bench/spread.py)"
        ),
        "curves": curves,
        "plots": plots,
        "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output} and {', '.join(plots.values())} "
          f"in {result['seconds']['total']:.0f} s")


if __name__ == "__main__":
    main()

"""The scaling benchmark's pure helpers (bench/scale_report.py, bench/scale_bench.py): plots,
the cap checker, the store extrapolation, the quick run's output path. No Spark, no service.
The plot tests need matplotlib (the `bench` extra) and are skipped without it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import scale_bench  # noqa: E402
from scale_report import (  # noqa: E402
    Panel,
    Series,
    check_caps,
    plot_curve,
    store_growth,
    summarise,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _ci(m: float) -> dict[str, float]:
    return {"median": m, "ci_low": m * 0.9, "ci_high": m * 1.1}


def test_plot_writes_a_png_with_one_series_per_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the `bench` extra; `make bench-scale` installs it
    xs = [1.0, 5.0, 20.0, 50.0]
    panels = [
        Panel("gate cost (ns per record)", [
            Series("idle", xs, [_ci(2 * x) for x in xs]),
            Series("active", xs, [_ci(3 * x) for x in xs]),
        ]),
        Panel("overhead (%)", [Series("idle", xs, [_ci(0.1 * x) for x in xs])]),
    ]
    out = tmp_path / "curve.png"
    drawn = plot_curve(out, "synthetic", "taps", panels, logx=True, note="synthetic data")
    assert drawn == 3
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert out.stat().st_size > 5_000  # axes, labels and lines, not an empty canvas


def test_plot_all_draws_each_curve_present(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    taps = [{"taps": n, "repeats": 3, "gate_idle_ns_per_record": _ci(n * 2.0),
             "gate_active_ns_per_record": _ci(n * 2.5), "job_idle_overhead_pct": _ci(0.1),
             "job_active_overhead_pct": _ci(0.2)} for n in (1, 5)]
    parts = [{"partitions": n, "repeats": 3, **{k: _ci(float(n)) for k in (
        "latency_s", "latency_beyond_window_s", "driver_cpu_ms_per_round",
        "driver_heap_mb_per_round", "report_bytes", "report_records", "response_records",
        "max_records_per_subtask")}} for n in (10, 100)]
    conc = {"window_s": 1, "points": [
        {"concurrent_rounds": k, "latency_s": _ci(1.2), "batch_max_latency_s": _ci(1.3)}
        for k in (1, 2)], "sixth": {"concurrent_rounds": 6, "latency_ms": _ci(4.0)}}
    apps = [{"applications": n, "p99_ms": _ci(20.0), "p50_ms": _ci(5.0),
             "cpu_ms_per_poll": _ci(1.0), "store": {"growth": store_growth(
                 bytes_per_round=4000, rounds_per_hour=60.0 * n, bytes_per_audit_event=100,
                 audit_events_per_hour=7200.0 * n, retention_hours=168)}} for n in (1, 10)]
    written = scale_bench.plot_all(
        {"taps": {"points": taps}, "partitions": {"points": parts}, "concurrency": conc,
         "apps": {"points": apps}},
        tmp_path,
    )
    assert sorted(written) == ["apps", "concurrency", "partitions", "taps"]
    for path in written.values():
        assert Path(path).read_bytes()[:8] == PNG_MAGIC
        assert Path(path).name.startswith("scale-")


def test_caps_checker_flags_each_violation_and_passes_a_clean_round() -> None:
    assert check_caps({0: 1000, 1: 999}, 1999, reported_per_subtask={0: 1000, 1: 999}) == []
    per_subtask = {i: 1000 for i in range(5)}
    assert check_caps(per_subtask, 5000) == []

    too_many_in_subtask = check_caps({0: 1001}, 1001)
    assert len(too_many_in_subtask) == 1 and "subtask 0 has 1001" in too_many_in_subtask[0]

    too_many_in_response = check_caps({i: 1000 for i in range(6)}, 6000)
    assert any("6000 records in one response" in v for v in too_many_in_response)

    from_reports = check_caps({0: 10}, 10, reported_per_subtask={7: 1500})
    assert from_reports == [
        "executor reports: subtask 7 has 1500 records (cap 1000 per subtask)"
    ]
    # The response's count must be what its subtasks hold.
    assert check_caps({0: 10}, 11) != []


def test_summarise_skips_a_figure_missing_from_a_repeat() -> None:
    out = summarise([{"a": 1.0, "b": 2.0}, {"a": 3.0}, {"a": 2.0, "b": 4.0}], ["a", "b"])
    assert out["a"]["median"] == 2.0 and out["a"]["rounds"] == 3
    assert "b" not in out


def test_store_growth_is_bytes_per_round_times_rounds_plus_audit() -> None:
    g = store_growth(bytes_per_round=10_000, rounds_per_hour=600, bytes_per_audit_event=200,
                     audit_events_per_hour=72_000, retention_hours=168)
    assert g["rounds_mb_per_hour"] == 6.0
    assert g["audit_mb_per_hour"] == 14.4
    assert g["total_mb_per_hour"] == 20.4
    assert g["steady_state_mb"] == round(20.4 * 168, 1)


def test_quick_run_never_writes_into_bench_results() -> None:
    quick = scale_bench.parse_args(["--quick"])
    assert quick.output == scale_bench.QUICK_RESULTS
    assert BENCH not in quick.output.parents
    assert quick.taps == [1, 5] and quick.partitions == [10, 100] and quick.apps == [1, 10]
    full = scale_bench.parse_args([])
    assert full.output == BENCH / "results" / "scale.json"
    assert full.partitions == [10, 100, 1000, 10000]
    with pytest.raises(SystemExit):
        scale_bench.parse_args(["--curves", "taps,nope"])

"""Pure helpers of the scaling benchmark (``bench/scale_bench.py``): no Spark, no service.

- :func:`check_caps`: the contract's caps on one round (at most 1000 records per subtask,
  5000 per response), as violations to report rather than an exception, so a run that
  breaks a cap still writes every figure it measured;
- :func:`summarise`: median and 95% bootstrap interval of each figure of a point's repeats;
- :func:`store_growth`: store bytes per hour of retention, extrapolated from measured bytes
  per round and per audit event (not measured over an hour: the figure says so);
- :func:`plot_curve`: one PNG per curve (matplotlib, Agg backend), error bars from the
  intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spread import median_ci

#: The contract's caps (``sparkglass.runtime.contract.sample_result``); repeated here so that
#: this module imports nothing of the package (the smoke test runs without Spark).
MAX_RECORDS_PER_SUBTASK = 1000
MAX_RECORDS_PER_RESPONSE = 5000


def check_caps(
    per_subtask: Mapping[int, int],
    response_records: int,
    *,
    reported_per_subtask: Mapping[int, int] | None = None,
) -> list[str]:
    """Violations of the caps by one round, as sentences (empty: the caps held).

    ``per_subtask``: records per subtask index in the result; ``response_records``: records in
    the whole response; ``reported_per_subtask``: records per subtask in the executors' raw
    reports (the per-subtask cap is the executors' to keep, before the driver cuts the
    response to 5000)."""
    out: list[str] = []
    for where, counts in (("result", per_subtask), ("executor reports", reported_per_subtask)):
        for index, n in sorted((counts or {}).items()):
            if n > MAX_RECORDS_PER_SUBTASK:
                out.append(
                    f"{where}: subtask {index} has {n} records "
                    f"(cap {MAX_RECORDS_PER_SUBTASK} per subtask)"
                )
    if response_records > MAX_RECORDS_PER_RESPONSE:
        out.append(
            f"result: {response_records} records in one response "
            f"(cap {MAX_RECORDS_PER_RESPONSE})"
        )
    total = sum(per_subtask.values())
    if total != response_records:
        out.append(
            f"result: subtasks hold {total} records but the response counts {response_records}"
        )
    return out


def summarise(repeats: Sequence[Mapping[str, float]], keys: Iterable[str]) -> dict[str, Any]:
    """``{key: median_ci(values of key over the repeats)}`` for each key present in every
    repeat (a figure missing from one repeat is not summarised: an interval over a
    different set of repeats would not be comparable)."""
    out: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in repeats if key in r and r[key] is not None]
        if values and len(values) == len(repeats):
            out[key] = median_ci(values)
    return out


def store_growth(
    *,
    bytes_per_round: float,
    rounds_per_hour: float,
    bytes_per_audit_event: float,
    audit_events_per_hour: float,
    retention_hours: float,
) -> dict[str, float]:
    """Store growth per hour and the steady-state size under ``retention_hours``.

    Extrapolated: measured bytes per stored round (its row, its records and their indexes)
    times the rounds an hour of open pages starts (one per application and vertex per
    refresh interval), plus measured bytes per audit event times the audit events an hour
    writes (measured as a rate: identical reads are coalesced per window, so it is not polls
    times a constant). Retention deletes rows older than ``retention_hours``, so the store
    levels off at one retention period of growth (SQLite reuses the freed pages; the file
    does not shrink).
    """
    rounds_mb = bytes_per_round * rounds_per_hour / 1e6
    audit_mb = bytes_per_audit_event * audit_events_per_hour / 1e6
    return {
        "rounds_mb_per_hour": round(rounds_mb, 3),
        "audit_mb_per_hour": round(audit_mb, 3),
        "total_mb_per_hour": round(rounds_mb + audit_mb, 3),
        "retention_hours": retention_hours,
        "steady_state_mb": round((rounds_mb + audit_mb) * retention_hours, 1),
    }


@dataclass
class Series:
    """One line of a plot: ``label``, x values and per-x intervals (``median_ci`` dicts)."""

    label: str
    x: list[float]
    ci: list[Mapping[str, Any]]


@dataclass
class Panel:
    """One set of axes of a figure: its y label (with the unit) and its series."""

    ylabel: str
    series: list[Series] = field(default_factory=list)
    logy: bool = False


def plot_curve(
    path: Path,
    title: str,
    xlabel: str,
    panels: Sequence[Panel],
    *,
    logx: bool = False,
    note: str | None = None,
) -> int:
    """Draw ``panels`` side by side in one figure and write it to ``path`` (PNG).

    Each series is drawn at its medians with error bars from ``ci_low``/``ci_high``.
    Returns the number of series drawn (the smoke test checks it against the data)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on a build machine
    import matplotlib.pyplot as plt

    cols = len(panels) if len(panels) <= 3 else 2  # four panels read better as 2 x 2
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    drawn = 0
    for ax, panel in zip(axes.flat, panels, strict=False):
        for s in panel.series:
            med = [float(c["median"]) for c in s.ci]
            low = [m - float(c["ci_low"]) for m, c in zip(med, s.ci, strict=True)]
            high = [float(c["ci_high"]) - m for m, c in zip(med, s.ci, strict=True)]
            ax.errorbar(s.x, med, yerr=[low, high], marker="o", capsize=3, label=s.label)
            drawn += 1
        ax.set_xlabel(xlabel)
        ax.set_ylabel(panel.ylabel)
        if logx:
            ax.set_xscale("log")
            ax.minorticks_off()
        # Ticks at the measured sizes, written plainly (10000, not 10^4; 3, not 3.0).
        ticks = sorted({x for s in panel.series for x in s.x})
        if ticks:
            ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        if panel.logy:
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        if panel.series:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, alpha=0.8)
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def series_of(
    points: Sequence[Mapping[str, Any]], x_key: str, figure: str, label: str
) -> Series | None:
    """A :class:`Series` of ``figure`` over the points that have it (None when none has)."""
    have = [p for p in points if isinstance(p.get(figure), Mapping)]
    if not have:
        return None
    return Series(label, [float(p[x_key]) for p in have], [p[figure] for p in have])


def panel(ylabel: str, points: Sequence[Mapping[str, Any]], x_key: str,
          figures: Sequence[tuple[str, str]], *, logy: bool = False) -> Panel:
    """A :class:`Panel` with one series per ``(figure key, label)`` found in ``points``."""
    found = [series_of(points, x_key, key, label) for key, label in figures]
    return Panel(ylabel, [s for s in found if s is not None], logy=logy)

"""Every bench result records where it came from (bench/provenance.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
from provenance import run_info  # noqa: E402


def test_run_info_names_the_checked_out_revision_and_the_command() -> None:
    info = run_info()
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCH, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert info["gitRevision"] == head
    assert isinstance(info["gitDirty"], bool)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", info["measuredAt"])
    assert info["cpus"] >= 1 and len(info["loadAverage"]) == 3
    # This process's own command line: pytest's, or an xdist worker's (`python -c …`).
    words = shlex.split(info["command"])
    assert words[0] == Path(sys.executable).name
    assert words[1:] == sys.argv


def test_every_bench_stores_its_run_info() -> None:
    for script in sorted(BENCH.glob("*_bench.py")):
        text = script.read_text()
        assert "run_info()" in text, f"{script.name} writes figures without their provenance"

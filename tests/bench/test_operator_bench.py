"""``make bench-operator`` keeps working: a tiny run of the real bench (its operator process,
emulator and scripted HTTPS drivers) completes every DataSample. The bench once went stale
when the operator started pinning driver certificates and nothing ran it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench" / "operator_bench.py"


def test_a_small_operator_bench_completes_every_datasample(tmp_path: Path) -> None:
    out = tmp_path / "operator.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--retained", "5", "--new", "2", "--interval", "0.5",
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=420,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["phases"] == {"Complete": 2} and result["picked_up"] == 2
    assert result["finished_requests_per_minute"] == 0
    assert result["run"]["command"].endswith("--out " + str(out))

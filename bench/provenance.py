"""Where a benchmark figure comes from: when, on which revision, by which command, on what.

A figure in ``bench/results/*.json`` is only worth quoting if it can be tied to the code and
the machine that produced it; :func:`run_info` is stored under ``"run"`` in every result.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None  # not a checkout (an unpacked wheel or image): the figure says so
    return out.stdout.strip()


def run_info() -> dict[str, Any]:
    """``{"measuredAt", "gitRevision", "gitDirty", "command", "python", "cpus",
    "loadAverage"}``: ``measuredAt`` is UTC ISO 8601 at the call; ``gitDirty`` is true
    when tracked files differ from the revision (the figure then belongs to no commit);
    ``loadAverage`` is the 1/5/15-minute load at the call (other work on the machine moves
    figures, so a busy machine is on record)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "measuredAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "gitRevision": _git("rev-parse", "HEAD"),
        "gitDirty": None if status is None else bool(status),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadAverage": [round(x, 2) for x in os.getloadavg()],
    }

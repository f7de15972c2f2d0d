"""The repository layout: folders map to sparkglass subpackages without shadowing the stdlib."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


@pytest.mark.parametrize("flags", [[], ["-S"], ["-I"]], ids=["default", "no-site", "isolated"])
def test_stdlib_operator_wins_when_python_runs_from_repo_root(flags: list[str]) -> None:
    # -S skips site (so `operator` is not pre-imported); -I also drops the cwd from sys.path.
    out = subprocess.run(
        [
            sys.executable,
            *flags,
            "-c",
            "import operator; print(operator.__file__); print(operator.itemgetter(1)([0, 42]))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert Path(out[0]).resolve().parent == STDLIB
    assert out[1] == "42"


def test_repo_root_has_an_operator_folder_that_is_not_a_regular_package() -> None:
    assert (REPO / "operator").is_dir()
    assert not (REPO / "operator" / "__init__.py").exists(), (
        "operator/__init__.py would make the folder shadow the standard library's operator"
    )


def test_folders_map_to_sparkglass_subpackages() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sparkglass.runtime as r, sparkglass.service as s, sparkglass.operator as o; "
            "print(r.__path__[0]); print(s.__path__[0]); print(list(o.__path__)[0])",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [Path(p).resolve() for p in out] == [
        REPO / "runtime",
        REPO / "service",
        REPO / "operator",
    ]

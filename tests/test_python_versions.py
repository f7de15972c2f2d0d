"""The supported Pythons are named alike everywhere: requires-python, the classifiers, the
`make test-matrix` versions, and the lowest one in ruff's and mypy's settings."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MAKEFILE = (REPO / "Makefile").read_text()


def _supported() -> list[tuple[int, int]]:
    """The minors that requires-python admits (a lower and an exclusive upper bound)."""
    spec = PYPROJECT["project"]["requires-python"].replace(" ", "")
    found = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", spec)
    assert found, f"requires-python {spec!r} is not '>=3.X,<3.Y'"
    low, high = int(found.group(1)), int(found.group(2))
    assert low < high, spec
    return [(3, minor) for minor in range(low, high)]


def _make_variable(name: str) -> list[str]:
    found = re.search(rf"^{name} \?= ((?:.*\\\n)*.*)$", MAKEFILE, re.M)
    assert found, f"the Makefile sets no {name}"
    return found.group(1).replace("\\\n", " ").split()


def test_classifiers_name_exactly_the_supported_minors() -> None:
    classifiers = PYPROJECT["project"]["classifiers"]
    named = {
        tuple(int(p) for p in c.rsplit(" ", 1)[1].split("."))
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert named == set(_supported())
    assert "Programming Language :: Python :: 3 :: Only" in classifiers


def test_the_matrix_runs_every_supported_minor() -> None:
    versions = _make_variable("MATRIX_VERSIONS")
    assert versions == [f"{a}.{b}" for a, b in _supported()]
    for version in versions:  # each overridable as PYTHON_3_X
        assert re.search(rf"^PYTHON_{version.replace('.', '_')} \?=", MAKEFILE, re.M), version
    assert re.search(r"^test-matrix:", MAKEFILE, re.M)
    for folder in _make_variable("MATRIX_TESTS"):
        assert (REPO / folder).is_dir(), f"MATRIX_TESTS names {folder}, which is not a folder"


def test_matrix_venvs_are_ignored() -> None:
    assert ".venv-*/" in (REPO / ".gitignore").read_text().splitlines()


def test_linters_target_the_lowest_supported_minor() -> None:
    # Code must still parse and type-check on the oldest Python it claims to run on.
    low = _supported()[0]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py{low[0]}{low[1]}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == f"{low[0]}.{low[1]}"


def test_this_interpreter_is_a_supported_one() -> None:
    assert sys.version_info[:2] in _supported(), (
        f"the tests run on Python {sys.version.split()[0]}, which requires-python excludes"
    )

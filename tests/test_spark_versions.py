"""The supported pysparks are named alike everywhere: pyproject.toml's pyspark requirements,
the `make spark-matrix` versions, docs/spark-versions.md's table and the README's pointer.

No Spark runs here: `make spark-matrix` runs the sampling paths on each version and the docs
record what it found (test_python_versions.py does the same for the Pythons)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from sparkglass.runtime.sampling.jar import jar_fits

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
MAKEFILE = (REPO / "Makefile").read_text()
DOCS = (REPO / "docs" / "spark-versions.md").read_text()


def _pyspark_requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    named = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        named += extra
    found = [Requirement(r) for r in named if re.match(r"pyspark\b", r)]
    assert found, "pyproject.toml names no pyspark"
    return found


def _supported() -> SpecifierSet:
    """The runtime's own pyspark range (``dependencies``)."""
    (runtime,) = [
        Requirement(r) for r in PYPROJECT["project"]["dependencies"] if re.match(r"pyspark\b", r)
    ]
    return runtime.specifier


def _make_variable(name: str) -> list[str]:
    found = re.search(rf"^{name} \?= ?((?:.*\\\n)*.*)$", MAKEFILE, re.M)
    assert found, f"the Makefile sets no {name}"
    return found.group(1).replace("\\\n", " ").split()


def _docs_table() -> dict[str, list[str]]:
    """docs/spark-versions.md's results: pyspark version -> the row's other cells."""
    rows: dict[str, list[str]] = {}
    for line in DOCS.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"\d+\.\d+\.\d+", cells[0]):
            assert cells[0] not in rows, f"docs/spark-versions.md lists {cells[0]} twice"
            rows[cells[0]] = cells[1:]
    assert rows, "docs/spark-versions.md has no table of versions"
    return rows


def test_every_pyspark_requirement_names_the_same_range() -> None:
    # The runtime, `[test]` and `[pipelines]` (pyspark[connect]) cannot drift apart.
    assert {str(r.specifier) for r in _pyspark_requirements()} == {str(_supported())}


def test_the_matrix_runs_one_release_of_every_supported_minor_from_the_lower_bound() -> None:
    versions = [Version(v) for v in _make_variable("SPARK_MATRIX_VERSIONS")]
    assert versions == sorted(versions) and all(v in _supported() for v in versions)
    (low,) = [s for s in _supported() if s.operator == ">="]
    # The lowest release the range admits is the oldest API the jar must compile against.
    assert versions[0] == Version(low.version), (versions[0], low)
    minors = [(v.major, v.minor) for v in versions]
    assert len(set(minors)) == len(minors), f"two releases of one minor: {versions}"
    major, first = minors[0]
    assert minors == [(major, m) for m in range(first, first + len(minors))], (
        f"SPARK_MATRIX_VERSIONS skips a minor: {versions}"
    )
    assert re.search(r"^spark-matrix:", MAKEFILE, re.M)
    assert (REPO / ".ci" / "spark-matrix").is_file()


def test_the_matrix_tests_exist() -> None:
    named = _make_variable("SPARK_MATRIX_TESTS") + _make_variable("SPARK_MATRIX_SDP_TESTS")
    for node in named:
        path, _, test = node.partition("::")
        assert (REPO / path).is_file(), f"the Makefile names {path}, which is not a file"
        if test:
            source = (REPO / path).read_text()
            assert re.search(rf"^def {re.escape(test)}\(", source, re.M), node


def test_the_docs_table_has_every_matrix_version_and_what_is_not_supported() -> None:
    rows = _docs_table()
    matrix = _make_variable("SPARK_MATRIX_VERSIONS")
    for version in matrix:
        assert version in rows, f"docs/spark-versions.md has no row for {version}"
    for version, cells in rows.items():
        # The "supported" cell says yes exactly for the versions the range admits.
        supported = cells[0].lower().startswith("yes")
        assert supported == (Version(version) in _supported()), (version, cells[0])
        if supported:
            assert version in matrix, f"{version} is supported but not in the matrix"
    assert any(Version(v) < Version(matrix[0]) for v in rows), "no row for a version below"
    assert "make spark-matrix" in DOCS


def test_sdp_from_is_stated_alike() -> None:
    (sdp_from,) = _make_variable("SPARK_MATRIX_SDP_FROM")
    said = f"Spark Declarative Pipelines from {sdp_from}"
    for text in (DOCS, (REPO / "README.md").read_text()):
        assert said in " ".join(text.split())  # wrapped lines read as one


def test_the_readme_points_to_the_docs() -> None:
    assert "docs/spark-versions.md" in (REPO / "README.md").read_text()


def test_matrix_venvs_are_ignored() -> None:
    assert ".venv-*/" in (REPO / ".gitignore").read_text().splitlines()


def test_the_wheel_s_jar_is_built_against_the_oldest_supported_minor() -> None:
    built = subprocess.run(
        [sys.executable, str(REPO / "build_support" / "sparkglass_backend.py")],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    wanted = SpecifierSet(built.stdout.strip().removeprefix("pyspark"))
    oldest = min(Version(v) for v in _make_variable("SPARK_MATRIX_VERSIONS"))
    assert oldest in wanted and oldest in _supported()
    assert Version(f"{oldest.major}.{oldest.minor + 1}.0") not in wanted


def test_a_jar_fits_its_own_and_later_minors_of_its_major_only() -> None:
    assert jar_fits("4.0.1", "4.0.0") and jar_fits("4.0.0", "4.3.0")
    assert not jar_fits("4.3.0", "4.0.1")  # a newer minor's API may be missing
    assert not jar_fits("4.0.0", "5.0.0") and not jar_fits("3.5.0", "4.0.0")
    assert not jar_fits("", "4.0.0") and not jar_fits("4.x", "4.0.0")

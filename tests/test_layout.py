"""The repository layout: folders map to sparkglass subpackages without shadowing the stdlib."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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


# --------------------------------------------------------------------------- import rules
# What may import what, checked on the source (every import statement, including those inside
# functions and TYPE_CHECKING blocks: a lazy import is still a dependency).
PACKAGES = {
    "runtime": "sparkglass.runtime",
    "service": "sparkglass.service",
    "operator": "sparkglass.operator",
}
#: What the service and the operator may import from the runtime: the Spark-free contract and
#: the one client of the driver control endpoint.
SHARED_WITH_SERVICES = (
    "sparkglass.runtime.contract",
    "sparkglass.runtime.control.client",
    "sparkglass.runtime.control.routes",
)
#: Third-party packages the contract must never need (the service and operator images may
#: run without them, and importing pyspark costs seconds).
SPARK_STACK = ("pyspark", "py4j", "pyarrow", "pandas")


def _module_name(path: Path) -> str:
    folder, *rest = path.relative_to(REPO).with_suffix("").parts
    parts = [PACKAGES[folder], *rest]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    import ast

    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            # `from pkg import mod` imports a module when `mod` is one.
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _sources(folder: str) -> list[Path]:
    return sorted(p for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _existing_modules() -> set[str]:
    return {_module_name(p) for folder in PACKAGES for p in _sources(folder)}


def _first_party(names: set[str], modules: set[str]) -> set[str]:
    return {n for n in names if n in modules}


def test_runtime_never_imports_the_service_or_the_operator() -> None:
    bad = {
        f"{p.relative_to(REPO)} imports {name}"
        for p in _sources("runtime")
        for name in _imports(p)
        if name.startswith(("sparkglass.service", "sparkglass.operator"))
    }
    assert not bad, sorted(bad)


@pytest.mark.parametrize("folder", ["service", "operator"])
def test_service_and_operator_import_only_the_contract_from_the_runtime(folder: str) -> None:
    bad = {
        f"{p.relative_to(REPO)} imports {name}"
        for p in _sources(folder)
        for name in _imports(p)
        if name.startswith("sparkglass.runtime")
        and name != "sparkglass.runtime"
        and not name.startswith(SHARED_WITH_SERVICES)
    }
    assert not bad, sorted(bad)


def test_the_contract_needs_neither_spark_nor_the_rest_of_the_runtime() -> None:
    shared = [p for p in _sources("runtime") if _module_name(p).startswith(SHARED_WITH_SERVICES)]
    assert shared, "no contract modules found"
    bad = {
        f"{p.relative_to(REPO)} imports {name}"
        for p in shared
        for name in _imports(p)
        if name.split(".")[0] in SPARK_STACK
        or (
            name.startswith("sparkglass.")
            and not name.startswith(SHARED_WITH_SERVICES)
            and name not in ("sparkglass.runtime", "sparkglass.runtime.control")
        )
    }
    assert not bad, sorted(bad)


def test_no_import_cycles_in_the_runtime() -> None:
    modules = _existing_modules()
    runtime = [p for p in _sources("runtime")]
    graph = {
        _module_name(p): _first_party(_imports(p), modules) - {_module_name(p)} for p in runtime
    }
    # A package's __init__ is imported by its children implicitly; only explicit edges count.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, cycles


SERVICE_ENTRY_MODULES = (
    "sparkglass.service.app",
    "sparkglass.operator.app",
    "sparkglass.operator.crd_apply",
    "sparkglass.cli",
)


def test_service_operator_and_cli_start_without_importing_pyspark() -> None:
    # A fresh interpreter: the test session itself has pyspark loaded already.
    code = (
        "import sys\n"
        f"for m in {SERVICE_ENTRY_MODULES!r}: __import__(m)\n"
        # What `sparkglass serve` and `sparkglass operator run` do before running: register
        # every subcommand (the demo's among them) and build the command line.
        "import sparkglass.cli, typer.main\n"
        "sparkglass.cli._register()\n"
        "typer.main.get_command(sparkglass.cli.app)\n"
        "import sparkglass.runtime.contract.sample_result, sparkglass.runtime.control.client\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SPARK_STACK!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.strip()
    assert out == "[]", f"importing the service, the operator or the CLI loaded {out}"


# ---------------------------------------------------------------------- test module imports
#: Where test modules live, and the folders whose every module must not import one: test
#: modules, conftests, tests/support and the other helpers next to the tests, and the
#: benchmarks (which reuse the tests' fakes).
TEST_FOLDERS = ("tests", "e2e")
IMPORTING_FOLDERS = (*TEST_FOLDERS, "bench")


def test_no_test_module_imports_another() -> None:
    """Shared helpers, constants and fixtures live in tests/support (fixtures for several
    folders through a plugin the root conftest lists), never in a test module that others
    import: running, moving or deleting one test file must not change another. No module
    under tests/ or e2e/ (test module, conftest, tests/support or another helper) nor a
    benchmark imports a test module, so none does through another either."""
    import ast

    def dotted(path: Path) -> str:
        return ".".join(path.relative_to(REPO).with_suffix("").parts)

    test_modules = {
        dotted(p) for folder in TEST_FOLDERS for p in (REPO / folder).rglob("test_*.py")
    }
    assert "tests.operator.test_datasample" in test_modules, "no test modules found"
    importers = sorted(
        p
        for folder in IMPORTING_FOLDERS
        for p in (REPO / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    )
    assert any(p.name == "conftest.py" for p in importers), "no conftest found"
    assert any(p.parent == REPO / "tests" / "support" for p in importers), "no tests/support"
    found: set[tuple[str, str]] = set()
    for path in importers:
        module = dotted(path)
        package = module.rpartition(".")[0]
        if path.name == "__init__.py":
            module = package
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, node.module] if node.module else base)
                # `from pkg import test_x` imports the module test_x.
                names = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            found.update(
                (str(path.relative_to(REPO)), name)
                for name in names
                if name in test_modules and name != module
            )
    bad = sorted(f"{f} imports {m}" for f, m in found)
    assert not bad, bad

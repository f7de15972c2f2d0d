"""CLI conventions: useful help, errors on stderr with a non-zero exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SPARKGLASS = [sys.executable, "-m", "sparkglass"]


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPARKGLASS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )


def test_root_help_lists_commands() -> None:
    out = run("--help")
    assert out.returncode == 0
    assert "demo" in out.stdout and "sample the records" in out.stdout


def test_every_subcommand_has_help_with_an_example() -> None:
    from sparkglass.cli import _register, app

    _register()
    import typer.main

    group = typer.main.get_command(app)
    names = list(group.commands)  # type: ignore[attr-defined]
    assert "demo" in names
    commands: list[tuple[str, ...]] = []
    for name in names:
        commands.append((name,))
        sub = getattr(group.commands[name], "commands", {})  # type: ignore[attr-defined]
        commands += [(name, leaf) for leaf in sub]  # a group's own subcommands too
    for command in commands:
        out = run(*command, "--help")
        assert out.returncode == 0, (command, out.stderr)
        assert "Example" in out.stdout, f"`sparkglass {' '.join(command)} --help` has no example"


def test_out_of_range_option_is_an_error_on_stderr() -> None:
    out = run("demo", "--days", "400")
    assert out.returncode == 2
    assert "--days" in out.stderr and "365" in out.stderr
    assert out.stdout == ""


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    out = run("demo", "--days", "1", env={"JAVA_HOME": str(tmp_path)})
    assert out.returncode == 1
    assert "Java" in out.stderr and "JAVA_HOME" in out.stderr and "install" in out.stderr
    assert "Traceback" not in out.stderr and "Py4J" not in out.stderr
    assert len([line for line in out.stderr.splitlines() if line.strip()]) <= 3


@pytest.mark.slow
def test_demo_runs_on_real_flights(tmp_path: Path) -> None:
    out = run(
        "demo",
        "--days",
        "3",
        "--feed-interval",
        "0.2",
        "--duration",
        "150",
        "--workdir",
        str(tmp_path),
        # A deadline, not a wait: the demo ends itself after --duration; JVM start-up and the
        # first micro-batches take minutes when the machine is busy.
        timeout=480,
        # Its own store, not the user's (~/.local/share/sparkglass/service.db): that one is
        # shared with every other checkout on the machine, maybe migrated by a newer one.
        env={"XDG_DATA_HOME": str(tmp_path / "data")},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done (replay finished)" in out.stdout
    assert "3/3 day files" in out.stdout
    assert "mean delay by carrier" in out.stdout
    assert "Data Sample page" in out.stdout and "/ui/" in out.stdout

"""CLI conventions: useful help, errors on stderr with a non-zero exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


# ------------------------------------------------ sparkglass operator run --allowed-service-account


def _operator_config(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str] | None = None
) -> Any:
    """The OperatorConfig ``sparkglass operator run <args>`` would run with (in process; the
    operator itself is not started)."""
    from typer.testing import CliRunner

    import sparkglass.operator.app as operator_app
    import sparkglass.operator.logs as operator_logs
    from sparkglass.cli import _register, app

    _register()
    seen: list[Any] = []
    monkeypatch.setattr(operator_app, "run", seen.append)
    monkeypatch.setattr(operator_logs, "configure_logging", lambda *a, **k: None)
    monkeypatch.delenv("SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS", raising=False)
    result = CliRunner().invoke(
        app, ["operator", "run", "--standalone", "-n", "spark-jobs", *args], env=env
    )
    assert result.exit_code == 0, result.output
    (config,) = seen
    return config


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], None, ("spark-driver",)),
        (["--allowed-service-account", "etl-runner"], None, ("etl-runner",)),
        (
            ["--allowed-service-account", "etl", "--allowed-service-account", "spark-driver"],
            None,
            ("etl", "spark-driver"),
        ),
        (["--allowed-service-account", "a,b,a"], None, ("a", "b")),
        # The variable, as the chart sets it: comma-separated, blanks ignored.
        ([], {"SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS": "spark-driver,etl-runner"}, None),
        ([], {"SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS": " spark-driver, etl-runner ,,"}, None),
        # An empty variable is the default, not "no account at all".
        ([], {"SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS": ""}, ("spark-driver",)),
        # The command line wins over the variable.
        (
            ["--allowed-service-account", "cli-only"],
            {"SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS": "from-env"},
            ("cli-only",),
        ),
    ],
)
def test_allowed_service_accounts_reach_the_operator_config(
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str] | None,
    expected: tuple[str, ...] | None,
) -> None:
    config = _operator_config(monkeypatch, args, env)
    assert config.allowed_service_accounts == (expected or ("spark-driver", "etl-runner"))


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--allowed-service-account", "Spark_Driver"], {}),
        ([], {"SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS": "spark-driver,Spark_Driver"}),
    ],
)
def test_a_bad_service_account_is_a_usage_error_naming_option_and_variable(
    args: list[str], env: dict[str, str]
) -> None:
    # Refused while parsing, before any connection to a cluster.
    out = run("operator", "run", "--standalone", "-n", "x", *args, env=env, timeout=60)
    assert out.returncode == 2, out.stderr
    stderr = " ".join(out.stderr.replace("│", " ").split())
    assert "--allowed-service-account" in stderr and "SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS" in stderr
    assert "'Spark_Driver' is not a ServiceAccount name" in stderr
    assert out.stdout == ""


def test_allowed_service_account_help_says_what_it_is_for_with_an_example() -> None:
    import typer.main

    from sparkglass.cli import _register, app
    from sparkglass.operator.pod_privileges import ALLOWED_SERVICE_ACCOUNTS_ENV

    _register()
    group = typer.main.get_command(app)
    command = group.commands["operator"].commands["run"]  # type: ignore[attr-defined]
    (option,) = [p for p in command.params if "--allowed-service-account" in p.opts]
    assert option.multiple and option.envvar == ALLOWED_SERVICE_ACCOUNTS_ENV
    text = " ".join(option.help.split())
    assert "A1" in text and "may run as" in text
    assert "Example: --allowed-service-account spark-driver" in text


def test_operator_config_no_longer_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI is the one place the variable is read: a config built in code is the same
    whatever the process's environment holds."""
    from sparkglass.operator.settings import OperatorConfig

    monkeypatch.setenv("SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS", "from-env")
    assert OperatorConfig().allowed_service_accounts == ("spark-driver",)
    with pytest.raises(ValueError, match="allowed_service_accounts: 'a b'"):
        OperatorConfig(allowed_service_accounts=("a b",))


def test_serve_on_a_busy_port_says_so_before_minting_a_token(tmp_path: Path) -> None:
    """The port is checked first: a busy one is one line naming it, and no admin token (nor
    page link holding one) is printed for a service that never ran."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run(
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--database-url",
            f"sqlite:///{tmp_path / 'serve.db'}",
            timeout=120,
        )
    assert out.returncode != 0
    assert f"--port {port}" in out.stderr and "pick another port" in out.stderr, out.stderr
    assert "token" not in out.stdout and "#token=" not in out.stderr, out.stdout
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "serve.db").exists()  # nothing migrated either

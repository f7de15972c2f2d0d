"""The ``sparkglass`` command line as click sees it, to parse argument lists without running
them (what the chart and the image pass must be accepted by the real CLI)."""

from __future__ import annotations

from typing import Any

import pytest


def cli_command() -> Any:
    """The click command behind the ``sparkglass`` console script, subcommands registered."""
    typer_main = pytest.importorskip("typer.main")
    from sparkglass import cli

    # `main()` registers the subcommands on first use; other tests may have done it already.
    if not (cli.app.registered_commands or cli.app.registered_groups):
        cli._register()
    return typer_main.get_command(cli.app)


def parse_cli(argv: list[str]) -> Any:
    """Parse ``sparkglass <argv>`` like the real CLI (types, ranges, unknown options) without
    running it; returns the leaf command's click context."""
    command = cli_command()
    path: list[str] = []
    args = list(argv)
    # Duck-typed: recent typer vendors its own click, whose Group is not click.Group.
    while hasattr(command, "get_command") and args and not args[0].startswith("-"):
        sub = command.get_command(command.context_class(command), args[0])
        if sub is None:
            pytest.skip(f"`sparkglass {' '.join([*path, args[0]])}` is not registered yet")
        path.append(args.pop(0))
        command = sub
    return command.make_context(" ".join(["sparkglass", *path]), args)

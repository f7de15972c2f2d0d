"""Checks of the options that take a URL, as typer callbacks.

A malformed URL is a usage error (exit code 2, like a number out of range): click names the
option, the message says what the option takes. Checked while the command line is parsed,
so nothing is started and nobody is asked with a URL that cannot work, and no traceback of
the HTTP or database library reaches the terminal. No message quotes the URL: it may hold a
password.
"""

from __future__ import annotations

import typer

#: What ``--service``, ``--endpoint`` and the like take.
HTTP_EXPECTED = "expected an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080"
#: What ``--database-url`` takes.
DATABASE_EXPECTED = (
    "expected a SQLAlchemy URL: sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/db"
)
#: What ``--kubernetes-master`` takes (Spark's ``k8s://`` master URL).
KUBERNETES_EXPECTED = (
    "expected k8s:// followed by the API server's URL, e.g. k8s://https://kubernetes.default.svc"
)


def http_problem(value: str) -> str | None:
    """Why ``value`` is no http(s) URL the CLI can call, or None when it is one."""
    from sparkglass.service.driver_trust import http_url_problem

    return http_url_problem(value)


def http_url(value: str | None) -> str | None:
    """Callback of an optional http(s) URL option (an empty value stands for none)."""
    if value:
        problem = http_problem(value)
        if problem is not None:
            raise typer.BadParameter(f"{HTTP_EXPECTED}; {problem}")
    return value


def database_url(ctx: typer.Context, value: str | None) -> str | None:
    """Callback of an optional store URL option (SQLite or PostgreSQL)."""
    if not value:
        return value
    from .extras import command_name, require

    require("service", command_name(ctx))  # the store is the service's (SQLAlchemy)
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    from sparkglass.service.store.db import check_store_url

    try:
        backend = make_url(value).get_backend_name()
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        raise typer.BadParameter(DATABASE_EXPECTED) from None
    if backend not in ("sqlite", "postgresql"):
        raise typer.BadParameter(f"{DATABASE_EXPECTED}; {backend!r} is neither")
    try:
        check_store_url(value)
    except ValueError as exc:  # its message never holds the URL
        raise typer.BadParameter(str(exc).removeprefix("database_url: ")) from None
    return value


def kubernetes_master(value: str) -> str:
    """Callback of ``--kubernetes-master``: ``k8s://`` and an API server URL (Spark takes
    ``k8s://host:port`` as https)."""
    rest = value.removeprefix("k8s://")
    if rest == value:
        raise typer.BadParameter(f"{KUBERNETES_EXPECTED}; it does not start with k8s://")
    problem = http_problem(rest if "://" in rest else f"https://{rest}")
    if problem is not None:
        raise typer.BadParameter(f"{KUBERNETES_EXPECTED}; {problem}")
    return value


def driver_specs(values: list[str]) -> list[str]:
    """Callback of ``serve --driver NAME=URL`` (repeatable)."""
    for spec in values:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url:
            raise typer.BadParameter(
                "expected NAME=URL, e.g. flights=http://127.0.0.1:4041 (no '=' or an empty side)"
            )
        problem = http_problem(url)
        if problem is not None:
            raise typer.BadParameter(f"the URL of {name!r}: {HTTP_EXPECTED}; {problem}")
    return values

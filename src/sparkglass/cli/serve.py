"""``sparkglass serve``: run the REST service and the Data Sample page (uvicorn)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import typer

from . import urls


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to ``app``."""
    app.command(
        "serve",
        help=(
            "Run the sparkglass service: the data-sample REST API (OpenAPI at /openapi.json), "
            "the Data Sample page at /ui/, and Prometheus metrics at /metrics.\n\n"
            "Every option also reads a `SPARKGLASS_*` environment variable (e.g. "
            "`SPARKGLASS_DATABASE_URL`, `SPARKGLASS_AUTH_MODE`). In local mode, `--driver` "
            "registers a running pipeline's control endpoint and a fresh admin token is "
            "printed unless `--tokens-file` is given.\n\n"
            "`--workers N` serves requests from N processes; rounds stay shared through the "
            "store (use PostgreSQL, or a SQLite file, not :memory:).\n\n"
            "Example: `sparkglass serve --port 8080 --driver flights=http://127.0.0.1:4041 "
            "--driver-token $SPARKGLASS_CONTROL_TOKEN`"
        ),
    )(serve)


def serve(
    host: str | None = typer.Option(None, "--host", help="Address to bind [127.0.0.1]."),
    port: int | None = typer.Option(None, "--port", min=0, max=65535, help="Port to bind [8080]."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        callback=urls.database_url,
        help="SQLAlchemy URL (default: SQLite in the user data dir).",
    ),
    auth_mode: str | None = typer.Option(
        None, "--auth-mode", help="local (tokens bound to roles) or kubernetes (RBAC)."
    ),
    execution_mode: str | None = typer.Option(
        None, "--execution-mode", help="local (driver endpoint) or kubernetes (DataSample)."
    ),
    tokens_file: Path | None = typer.Option(
        None,
        "--tokens-file",
        exists=True,
        dir_okay=False,
        help="Local mode: `token,user,role` lines (viewer|sampler|admin).",
    ),
    drivers: list[str] = typer.Option(
        [],
        "--driver",
        callback=urls.driver_specs,
        help="Local mode: NAME=URL of a driver control endpoint (repeatable).",
    ),
    driver_token: str | None = typer.Option(
        None,
        "--driver-token",
        envvar="SPARKGLASS_CONTROL_TOKEN",
        help="Bearer token of the --driver endpoints.",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, max=64, help="Worker processes (1-64) [1]."
    ),
) -> None:
    import uvicorn

    from sparkglass.cli import fail
    from sparkglass.service.app import create_app
    from sparkglass.service.auth.local import LocalAuthenticator
    from sparkglass.service.catalog import CatalogError, register_local_application
    from sparkglass.service.malloc_tuning import tune_malloc
    from sparkglass.service.settings import Settings
    from sparkglass.service.store.cipher import StoreKeyMissing
    from sparkglass.service.workers import EPHEMERAL_TOKEN_VARIABLE, FACTORY

    overrides: dict[str, object] = {}
    for key, value in (
        ("host", host),
        ("port", port),
        ("database_url", database_url),
        ("auth_mode", auth_mode),
        ("execution_mode", execution_mode),
        ("tokens_file", tokens_file),
        ("workers", workers),
    ):
        if value is not None:
            overrides[key] = value
    tune_malloc()  # before the service allocates: see service/malloc_tuning.py
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValueError as exc:
        raise fail(str(exc)) from None
    problem = _port_problem(settings.host, settings.port)
    if problem is not None:  # before anything is migrated, registered or minted
        raise fail(problem)
    app = create_app(settings)
    state = app.state.sparkglass
    for spec in drivers:  # checked while parsing (urls.driver_specs)
        name, _, url = spec.partition("=")
        try:
            register_local_application(state.sessions, name, url, driver_token or "")
        except (CatalogError, StoreKeyMissing) as exc:
            raise fail(str(exc)) from None
    host, port = settings.host, settings.port
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    token: str | None = None
    if isinstance(state.authenticator, LocalAuthenticator) and tokens_file is None:
        token = os.environ.get(EPHEMERAL_TOKEN_VARIABLE) or secrets.token_urlsafe(24)
        state.authenticator.add_ephemeral_token(token, "local-admin", "admin")
        typer.echo(f"Data Sample page: http://{shown}:{port}/ui/#token={token}")
        typer.echo(f"admin token (this process only): {token}")
    else:
        typer.echo(f"Data Sample page: http://{shown}:{port}/ui/")
    if settings.workers == 1:
        # proxy_headers=False: uvicorn would take X-Forwarded-For from FORWARDED_ALLOW_IPS
        # (127.0.0.1 by default) before the service sees the request, so a local client could
        # pick its own address for the failed-authentication limiter; the service honours
        # the header only from its own `trusted_proxies`.
        uvicorn.run(app, host=host, port=port, log_level="info", proxy_headers=False)
        return
    if settings.database_url.startswith("sqlite://") and ":memory:" in settings.database_url:
        raise fail("--workers needs a shared store: a SQLite file or PostgreSQL, not :memory:")
    # Workers are fresh processes: they read the settings validated above from the
    # environment (the store is migrated and the drivers registered already, here).
    for key, setting in overrides.items():
        os.environ[f"SPARKGLASS_{key.upper()}"] = str(setting)
    os.environ["SPARKGLASS_DATABASE_URL"] = settings.database_url
    if token is not None:
        os.environ[EPHEMERAL_TOKEN_VARIABLE] = token
    typer.echo(f"{settings.workers} worker processes")
    uvicorn.run(
        FACTORY,
        factory=True,
        host=host,
        port=port,
        workers=settings.workers,
        log_level="info",
        proxy_headers=False,
    )


def _port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served (one line), or ``None`` when a listener could bind
    it now (port 0, any free port, always can). Checked the way uvicorn binds: SO_REUSEADDR."""
    import socket

    if port == 0:
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return f"--port {port}: cannot listen on {host}:{port} ({reason}); pick another port"
    return None

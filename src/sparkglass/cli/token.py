"""``sparkglass token create|list|revoke``: the service's local-mode bearer tokens.

The commands work on the service's store directly (``--database-url``, else
``SPARKGLASS_DATABASE_URL``, else the default SQLite file), so they need no running service
and no admin token; a running service sees a new or revoked token at once (it checks the
store on every request, caching a decision for at most a second). The store keeps only
each token's SHA-256: a token is printed once, by ``create``, and never again.
"""

from __future__ import annotations

import getpass
import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer

from . import urls

if TYPE_CHECKING:
    from sparkglass.service.store import AuditRecord

token_app = typer.Typer(
    name="token",
    help=(
        "Local-mode bearer tokens of the service (stored hashed, with expiry and "
        "revocation; a running service sees changes at once).\n\n"
        "Example: `sparkglass token create --user alice --role viewer --expires-in 30d`"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

#: Allowed range of ``--expires-in``: a minute to ten years.
MIN_EXPIRY_S = 60
MAX_EXPIRY_S = 3650 * 86_400
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"^(?:[0-9]+[smhdw])+$")
_PART = re.compile(r"([0-9]+)([smhdw])")


def register(app: typer.Typer) -> None:
    """Add the ``token`` command group to ``app``."""
    app.add_typer(token_app, name="token")


def parse_expires_in(text: str) -> int:
    """Seconds in an ``--expires-in`` duration such as ``30d``, ``12h``, ``1w2d`` or ``90m``
    (units s, m, h, d, w). Raises ``ValueError`` naming the option and the allowed range."""
    if not _DURATION.fullmatch(text):
        raise ValueError(
            f"--expires-in: expected a duration such as 30d, 12h or 1w2d (units s, m, h, d, "
            f"w), got {text!r}"
        )
    seconds = sum(int(n) * _UNIT_S[u] for n, u in _PART.findall(text))
    if not MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S:
        raise ValueError(f"--expires-in must be between 1m and 3650d, got {text!r} ({seconds} s)")
    return seconds


def _database_url(option: str | None) -> str:
    from sparkglass.service.settings import Settings

    if option:
        return option
    return Settings().resolved_database_url


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "cli"


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


DatabaseOption = typer.Option(
    None,
    "--database-url",
    envvar="SPARKGLASS_DATABASE_URL",
    callback=urls.database_url,
    help="The service's store (SQLAlchemy URL; default: SQLite in the user data dir).",
)


@token_app.command(
    "create",
    help=(
        "Create a token for USER with ROLE (viewer: read samples; sampler: also trigger "
        "rounds; admin: also register applications and read the audit trail) that expires "
        "after --expires-in. Prints the token once: the store keeps only its hash.\n\n"
        "Example: `sparkglass token create --user alice --role sampler --expires-in 30d`"
    ),
)
def create(
    user: str = typer.Option(..., "--user", help="Who the token belongs to (1-253 chars)."),
    role: str = typer.Option(..., "--role", help="viewer, sampler or admin."),
    expires_in: str = typer.Option(
        "30d", "--expires-in", help="Lifetime: 1m to 3650d, e.g. 30d, 12h, 1w2d [30d]."
    ),
    database_url: str | None = DatabaseOption,
) -> None:
    from sparkglass.cli import fail
    from sparkglass.service.store import open_store, repository

    if role not in repository.ROLES:
        raise fail(f"--role must be one of {', '.join(repository.ROLES)}, got {role!r}")
    if not 1 <= len(user) <= 253:
        raise fail(f"--user must be 1-253 characters, got {len(user)}")
    try:
        seconds = parse_expires_in(expires_in)
    except ValueError as exc:
        raise fail(str(exc)) from None
    sessions = open_store(_database_url(database_url))
    try:
        with sessions.begin() as session:
            info, token = repository.issue_token(
                session, user, role, expires_at=repository.now_ms() + seconds * 1000
            )
            repository.add_audit_events(
                session,
                [
                    _event(
                        "token-create",
                        f"token {info.id} user={user} role={role} expires={_iso(info.expires_at)}",
                    )
                ],
            )
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        sessions.kw["bind"].dispose()
    # Only the token goes to stdout, so `TOKEN=$(sparkglass token create ...)` works.
    typer.echo(
        f"token id {info.id}: user {user}, role {role}, expires {_iso(info.expires_at)}. "
        "Store it now: it is not shown again.",
        err=True,
    )
    typer.echo(token)


@token_app.command(
    "list",
    help=(
        "List tokens: id, user, role, created, expires, revoked (never the tokens "
        "themselves). `--json` prints one JSON array.\n\n"
        "Example: `sparkglass token list`"
    ),
)
def list_(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    database_url: str | None = DatabaseOption,
) -> None:
    from sparkglass.service.store import open_store, repository

    sessions = open_store(_database_url(database_url))
    try:
        with sessions() as session:
            tokens = repository.list_tokens(session)
    finally:
        sessions.kw["bind"].dispose()
    now = repository.now_ms()
    rows = [
        {
            "id": t.id,
            "user": t.user,
            "role": t.role,
            "created": _iso(t.created_at),
            "expires": _iso(t.expires_at),
            "revoked": _iso(t.revoked_at),
            "valid": t.valid_at(now),
        }
        for t in tokens
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "user", "role", "created", "expires", "revoked", "valid")
    for r in rows:
        table.add_row(
            *(str(r[k]) for k in ("id", "user", "role", "created", "expires", "revoked", "valid"))
        )
    Console().print(table)


@token_app.command(
    "revoke",
    help=(
        "Revoke token ID (from `sparkglass token list`): a running service refuses it "
        "within a second, without a restart.\n\n"
        "Example: `sparkglass token revoke 3`"
    ),
)
def revoke(
    token_id: int = typer.Argument(..., min=1, help="The token's id (see `token list`)."),
    database_url: str | None = DatabaseOption,
) -> None:
    from sparkglass.cli import fail
    from sparkglass.service.store import open_store, repository

    sessions = open_store(_database_url(database_url))
    try:
        with sessions.begin() as session:
            info = repository.revoke_token(session, token_id)
            if info is not None:
                repository.add_audit_events(
                    session,
                    [_event("token-revoke", f"token {info.id} user={info.user} role={info.role}")],
                )
    finally:
        sessions.kw["bind"].dispose()
    if info is None:
        raise fail(f"no token with id {token_id} (see `sparkglass token list`)")
    typer.echo(f"token {info.id} of {info.user} revoked at {_iso(info.revoked_at)}")


def _event(action: str, detail: str) -> AuditRecord:
    from sparkglass.service.settings import LOCAL_NAMESPACE
    from sparkglass.service.store import AuditRecord, now_ms

    return AuditRecord(
        actor=_who(),
        action=action,
        namespace=LOCAL_NAMESPACE,
        application="",
        vertex="",
        round_id=None,
        record_count=0,
        status=None,
        at=now_ms(),
        detail=detail,
    )

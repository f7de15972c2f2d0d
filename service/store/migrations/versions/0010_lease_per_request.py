"""One lease per (application, vertex, request): rounds with a kind, filter, columns or
expectation go through the service's shared rounds as plain rounds do, each request with
its own refresh interval. ``vertex_leases.request_digest`` (the SHA-256 of the request's
key, empty for a plain round) joins the primary key; every existing lease is a plain
round's.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _copy(columns: list[sa.Column], select: str, key: list[str]) -> None:
    """Rebuild ``vertex_leases`` with ``columns`` and primary key ``key``, rows from ``select``
    (a new table, copied, renamed: the one way to change an unnamed primary key that works on
    both SQLite and PostgreSQL)."""
    op.create_table(
        "vertex_leases_next",
        sa.Column(
            "application_id",
            sa.Integer(),
            sa.ForeignKey("applications.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("vertex", sa.String(63), nullable=False),
        *columns,
        sa.Column("round_id", sa.String(64), nullable=True),
        sa.Column("claimed_at", sa.BigInteger(), nullable=False),
        sa.Column("next_start_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*key),
    )
    names = ["application_id", "vertex", *(c.name for c in columns)]
    names += ["round_id", "claimed_at", "next_start_at"]
    op.execute(f"INSERT INTO vertex_leases_next ({', '.join(names)}) {select}")
    op.drop_table("vertex_leases")
    op.rename_table("vertex_leases_next", "vertex_leases")


def upgrade() -> None:
    _copy(
        [sa.Column("request_digest", sa.String(64), nullable=False, server_default="")],
        "SELECT application_id, vertex, '', round_id, claimed_at, next_start_at "
        "FROM vertex_leases",
        ["application_id", "vertex", "request_digest"],
    )


def downgrade() -> None:
    _copy(
        [],
        "SELECT application_id, vertex, round_id, claimed_at, next_start_at "
        "FROM vertex_leases WHERE request_digest = ''",
        ["application_id", "vertex"],
    )

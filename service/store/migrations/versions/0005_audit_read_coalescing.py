"""Audit events that stand for several identical reads (``audit_events.request_count``,
``last_at``).

Repeated identical reads (the same principal polling the same round of the same vertex from
the same address) are coalesced in memory into one event per window
(``Settings.audit_read_window_seconds``): ``at`` is the first such request, ``last_at`` the
last, ``request_count`` how many there were. Every other event (writes, triggers, denials)
stands for one request. Rows from before this revision each stand for one request.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:  # batch mode: SQLite cannot ALTER
        batch.add_column(
            sa.Column("request_count", sa.Integer(), nullable=False, server_default="1")
        )
        batch.add_column(sa.Column("last_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_column("last_at")
        batch.drop_column("request_count")

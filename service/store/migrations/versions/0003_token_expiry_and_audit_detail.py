"""Local tokens that expire and can be revoked (``api_tokens.expires_at``, ``revoked_at``),
and audit events that say where a request came from and what an admin action did
(``audit_events.client``, ``detail``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:  # batch mode: SQLite cannot ALTER in place
        batch.add_column(sa.Column("expires_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("client", sa.String(64), nullable=True))
        batch.add_column(sa.Column("detail", sa.String(512), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_column("detail")
        batch.drop_column("client")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("expires_at")

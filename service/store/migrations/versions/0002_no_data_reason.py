"""Rounds say why they saw no row: ``no_data_reason`` and ``last_micro_batch_timestamp``.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:  # batch mode: SQLite cannot ALTER in place
        batch.add_column(sa.Column("no_data_reason", sa.String(32), nullable=True))
        batch.add_column(sa.Column("last_micro_batch_timestamp", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("last_micro_batch_timestamp")
        batch.drop_column("no_data_reason")

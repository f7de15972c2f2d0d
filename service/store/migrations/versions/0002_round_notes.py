"""What a round says beyond the FLIP fields: why it saw no row (``no_data_reason``,
``last_micro_batch_timestamp``) and that its rows are a materialized output
(``materialized_at``).

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
        batch.add_column(sa.Column("materialized_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("materialized_at")
        batch.drop_column("last_micro_batch_timestamp")
        batch.drop_column("no_data_reason")

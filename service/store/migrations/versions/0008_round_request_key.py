"""What a round was asked for (``rounds.request_key``): NULL for a plain round, else the
request's key (kind, filter, columns, expectation), so a plain poll never answers with a
DataSample's narrowed round.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:  # batch mode: SQLite cannot ALTER in place
        batch.add_column(sa.Column("request_key", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("request_key")

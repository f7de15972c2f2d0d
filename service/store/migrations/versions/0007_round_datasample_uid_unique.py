"""One round per DataSample: a unique index on ``rounds.datasample_uid``, by which the
operator finds the round a DataSample's result belongs to.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULLs (rounds of local mode) are distinct in a unique index on SQLite and PostgreSQL.
    op.create_index("ix_rounds_datasample_uid", "rounds", ["datasample_uid"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_rounds_datasample_uid", table_name="rounds")

"""A record's labels: ``sample_records.expectations`` (rounds of kind violations: the
expectations the row failed) and ``sample_records.error`` (rounds of kind errors: why the
vertex could not process it). Narrowed rounds are stored as plain ones are; without these a
stored violation or error row lost what makes it one. NULL for every existing record.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sample_records") as batch:  # batch mode: SQLite cannot ALTER
        batch.add_column(sa.Column("expectations", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sample_records") as batch:
        batch.drop_column("error")
        batch.drop_column("expectations")

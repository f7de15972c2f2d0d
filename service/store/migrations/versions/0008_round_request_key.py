"""Whose answer a round is (``rounds.request_key``): ``''`` for a round the service
started, the only answers to a plain poll; ``datasample:<key>`` for a ``kubectl``
DataSample's own round, which may be narrowed by its filter, kind, columns or limits.

Rounds from before are judged by who saved them: the operator's round of a DataSample it
found no service round for has the DataSample's uid as its id.

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
    op.execute(
        "UPDATE rounds SET request_key = CASE WHEN datasample_uid IS NOT NULL AND "
        "id = datasample_uid THEN 'datasample:' ELSE '' END"
    )


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("request_key")

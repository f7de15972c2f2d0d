"""The uid of the DataSample the service created for a round (``rounds.datasample_uid``).

Kubernetes execution mode: the operator saves a DataSample's result under the service's
round id only for the DataSample whose uid the service recorded here. Its name and creation
time were not enough: whoever may delete and create DataSamples can put another one under the
same name (docs/security.md, the trust boundary). Rows from before this revision have none,
so no DataSample can claim them any more.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:  # batch mode: SQLite cannot ALTER in place
        batch.add_column(sa.Column("datasample_uid", sa.String(253), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("datasample_uid")

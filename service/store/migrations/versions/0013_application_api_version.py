"""Which operator's application a row is: ``applications.api_version``, the ``apiVersion`` of
another operator's SparkApplication (Kubeflow's, Apache Spark's) in Kubernetes mode, ``NULL``
for sparkglass's own and every local application (all rows before this revision).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("applications") as batch:  # batch mode: SQLite cannot ALTER
        batch.add_column(sa.Column("api_version", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("api_version")

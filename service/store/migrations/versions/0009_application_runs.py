"""One run is one run: an application's current run (``applications.run``, one more each
time it is registered with another driver), when it began, the driver's own start when
told, when the driver last answered, and the run each round was started in
(``rounds.run``).

Backfill: every application is in its first run; one registered with a driver (local mode)
began it when it was registered and was last seen when it was last registered. Every round
belongs to the first run.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("applications") as batch:  # batch mode: SQLite cannot ALTER
        batch.add_column(sa.Column("run", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("run_started_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("driver_started_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("driver_seen_at", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("run", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE applications SET run_started_at = registered_at, driver_seen_at = updated_at "
        "WHERE driver_url IS NOT NULL"
    )
    op.execute("UPDATE rounds SET run = 1")


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("run")
    with op.batch_alter_table("applications") as batch:
        batch.drop_column("driver_seen_at")
        batch.drop_column("driver_started_at")
        batch.drop_column("run_started_at")
        batch.drop_column("run")

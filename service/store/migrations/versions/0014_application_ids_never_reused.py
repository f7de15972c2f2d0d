"""Application ids are never handed out twice: on SQLite, ``applications`` gets
``AUTOINCREMENT``.

Without it SQLite gives a new row the id of the highest row deleted before (``max(rowid) +
1``). What a service holds in memory of an application (answers, result bodies, driver
probes) is keyed by its id, so an application deleted, or replaced by another kind's
application of its name (a sparkglass SparkApplication created next to a Kubeflow one), left
its samples to be served as the new row's, to callers who may read only the new one.
PostgreSQL's sequences never reuse a value: nothing changes there.

The table is rebuilt (SQLite cannot add ``AUTOINCREMENT`` in place) with every row and id;
``sqlite_sequence`` then starts from the highest id kept.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "applications",
        recreate="always",
        table_kwargs={"sqlite_autoincrement": autoincrement},
    ):
        pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)

"""An index for a poll's own request, and the lease table's constraint names.

``ix_rounds_app_vertex_request_end`` on ``rounds (application_id, vertex, request_key,
end_timestamp)``: a poll reads the latest round of its own request (plain or narrowed);
without it, a plain poll of a vertex with many narrowed rounds scanned them all (50,000
narrowed rows: 155-175 ms per plain poll on SQLite).

On PostgreSQL, 0010 rebuilt ``vertex_leases`` under another name and renamed it, so its
primary key and foreign key kept the names of the copy (``vertex_leases_next_pkey``, ...).
They get the names PostgreSQL gives a table created as ``vertex_leases``. SQLite constraints
are unnamed.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_INDEX = "ix_rounds_app_vertex_request_end"
#: (the copy's name, PostgreSQL's name for the table's own constraint).
_CONSTRAINTS = (
    ("vertex_leases_next_pkey", "vertex_leases_pkey"),
    ("vertex_leases_next_application_id_fkey", "vertex_leases_application_id_fkey"),
)


def _rename(pairs: tuple[tuple[str, str], ...]) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for old, new in pairs:
        # Only where 0010 left the copy's name (a store made before 0010 ran has it).
        op.execute(
            f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = '{old}' "
            f"AND conrelid = 'vertex_leases'::regclass) THEN "
            f"ALTER TABLE vertex_leases RENAME CONSTRAINT {old} TO {new}; END IF; END $$"
        )


def upgrade() -> None:
    op.create_index(_INDEX, "rounds", ["application_id", "vertex", "request_key", "end_timestamp"])
    _rename(_CONSTRAINTS)


def downgrade() -> None:
    _rename(tuple((new, old) for old, new in _CONSTRAINTS))
    op.drop_index(_INDEX, table_name="rounds")

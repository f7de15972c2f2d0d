"""The initial store: applications, vertices, leases, rounds, records, audit, tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "applications",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("driver_url", sa.String(2048), nullable=True),
        sa.Column("driver_token", sa.String(512), nullable=True),
        sa.Column("pipeline_name", sa.String(253), nullable=True),
        sa.Column("edges", sa.JSON(), nullable=False),
        sa.Column("sampling", sa.JSON(), nullable=False),
        sa.Column("plan_error", sa.Text(), nullable=True),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_applications_ns_name"),
    )
    op.create_table(
        "vertices",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "application_id",
            sa.Integer(),
            sa.ForeignKey("applications.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("bounded", sa.Boolean(), nullable=False),
        sa.Column("python", sa.Boolean(), nullable=False),
        sa.Column("attributes", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.UniqueConstraint("application_id", "name", name="uq_vertices_app_name"),
    )
    op.create_index("ix_vertices_application_id", "vertices", ["application_id"])
    op.create_table(
        "vertex_leases",
        sa.Column(
            "application_id",
            sa.Integer(),
            sa.ForeignKey("applications.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("vertex", sa.String(63), primary_key=True),
        sa.Column("round_id", sa.String(64), nullable=True),
        sa.Column("claimed_at", sa.BigInteger(), nullable=False),
        sa.Column("next_start_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "rounds",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "application_id",
            sa.Integer(),
            sa.ForeignKey("applications.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("vertex", sa.String(63), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_code", sa.String(40), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("end_timestamp", sa.BigInteger(), nullable=True),
        sa.Column("total_record_count", sa.Integer(), nullable=False),
        sa.Column("total_truncated", sa.Boolean(), nullable=False),
        sa.Column("dropped_by_contention", sa.BigInteger(), nullable=False),
        sa.Column("dropped_by_rate_limit", sa.BigInteger(), nullable=False),
        sa.Column("failed_subtasks", sa.JSON(), nullable=False),
        sa.Column("triggered_by", sa.String(253), nullable=True),
        sa.Column("external_ref", sa.String(253), nullable=True),
    )
    op.create_index(
        "ix_rounds_app_vertex_started", "rounds", ["application_id", "vertex", "started_at"]
    )
    op.create_table(
        "sample_records",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column(
            "round_id",
            sa.String(64),
            sa.ForeignKey("rounds.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("subtask_index", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("sample_timestamp", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.Column("data_type", sa.Text(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_sample_records_round_id", "sample_records", ["round_id"])
    op.create_table(
        "audit_events",
        sa.Column("id", _BIGID, primary_key=True, autoincrement=True),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("application", sa.String(253), nullable=False),
        sa.Column("vertex", sa.String(63), nullable=False),
        sa.Column("round_id", sa.String(64), nullable=True),
        sa.Column("record_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=True),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("user", sa.String(253), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    for table in (
        "api_tokens",
        "audit_events",
        "sample_records",
        "rounds",
        "vertex_leases",
        "vertices",
        "applications",
    ):
        op.drop_table(table)

"""SQLAlchemy 2 table mappings of the store (the schema Alembic's migrations create).

Times are integers in milliseconds since the epoch (UTC), like the REST body's
``endTimestamp``: no time-zone traps between SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """Declarative base of every store table."""


class Application(Base):
    """A Spark application the service knows (namespace ``local`` in local mode)."""

    __tablename__ = "applications"
    __table_args__ = (
        UniqueConstraint("namespace", "name", name="uq_applications_ns_name"),
        # SQLite otherwise gives a new row the id of the highest deleted one, and what a
        # service replica still holds of the deleted application (keyed by its id) would be
        # the new one's. PostgreSQL's sequences never hand an id out twice.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    #: Local mode: the driver control endpoint's base URL and bearer token (a secret: never
    #: logged, never returned by the API).
    driver_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    #: Kubernetes mode: the ``apiVersion`` of another operator's SparkApplication (Kubeflow's
    #: ``sparkoperator.k8s.io/v1beta2``, Apache Spark's ``spark.apache.org/v1``); ``None`` for
    #: sparkglass's own (and every local application). A DataSample's ``applicationRef``
    #: carries it.
    api_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    driver_token: Mapped[str | None] = mapped_column(String(512), nullable=True)
    pipeline_name: Mapped[str | None] = mapped_column(String(253), nullable=True)
    #: Edges as [{from, to, kind}] (kind "pipelined" or "blocking").
    edges: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    #: The driver's (or SparkApplication's) sampling settings, for display.
    sampling: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    #: Why the planner rejected the pipeline, if it did.
    plan_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    registered_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)
    #: The current run: 1 at the first registration, one more each time the application is
    #: registered with another driver (a restart). Rounds carry the run they were started
    #: in (``Round.run``); only rounds of the current run answer a poll.
    run: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: When the current run began (ms): the driver's start when its registration stated it,
    #: else when the service first saw that driver. ``None``: never registered with a
    #: driver (Kubernetes mode).
    run_started_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: The current driver's own start (its SparkContext's, ms) when the registration stated
    #: it: a driver at the same URL with the same token but another start is another run.
    driver_started_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: When the driver last answered the service (registration or a liveness probe), ms.
    driver_seen_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    vertices: Mapped[list[Vertex]] = relationship(
        back_populates="application",
        cascade="all, delete-orphan",
        order_by="Vertex.position",
        lazy="selectin",
    )


class Vertex(Base):
    """One named step of an application's pipeline (source, vertex or sink)."""

    __tablename__ = "vertices"
    __table_args__ = (UniqueConstraint("application_id", "name", name="uq_vertices_app_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    application_id: Mapped[int] = mapped_column(
        ForeignKey("applications.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(63))
    position: Mapped[int] = mapped_column(Integer, default=0)
    kind: Mapped[str] = mapped_column(String(16), default="vertex")
    inputs: Mapped[list[str]] = mapped_column(JSON, default=list)
    bounded: Mapped[bool] = mapped_column(Boolean, default=True)
    python: Mapped[bool] = mapped_column(Boolean, default=False)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    #: What the planner made of it: adjusted attributes, phase, tap, notes (see graph.py).
    plan: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    application: Mapped[Application] = relationship(back_populates="vertices")


class VertexLease(Base):
    """The shared-round rule's row: one per (application, vertex, request).

    A replica may start a round only by moving ``next_start_at`` forward with a conditional
    UPDATE (``WHERE next_start_at <= now``); the database lets exactly one of any number of
    concurrent claimants succeed, across processes and replicas. ``request_digest``: the
    SHA-256 (hex) of the round request's key, empty for a plain round
    (:func:`~.repository.lease_digest`).
    """

    __tablename__ = "vertex_leases"

    application_id: Mapped[int] = mapped_column(
        ForeignKey("applications.id", ondelete="CASCADE"), primary_key=True
    )
    vertex: Mapped[str] = mapped_column(String(63), primary_key=True)
    request_digest: Mapped[str] = mapped_column(
        String(64), primary_key=True, default="", server_default=""
    )
    round_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    claimed_at: Mapped[int] = mapped_column(BigInteger, default=0)
    next_start_at: Mapped[int] = mapped_column(BigInteger, default=0)


class Round(Base):
    """One sampling round and its summary (records are in :class:`SampleRecord`)."""

    __tablename__ = "rounds"
    __table_args__ = (
        Index("ix_rounds_app_vertex_started", "application_id", "vertex", "started_at"),
        # A poll reads its own request's latest round; without request_key in an index it
        # scanned every narrowed round of the vertex.
        Index(
            "ix_rounds_app_vertex_request_end",
            "application_id",
            "vertex",
            "request_key",
            "end_timestamp",
        ),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    application_id: Mapped[int] = mapped_column(ForeignKey("applications.id", ondelete="CASCADE"))
    vertex: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16))
    error_code: Mapped[str | None] = mapped_column(String(40), nullable=True)
    started_at: Mapped[int] = mapped_column(BigInteger)
    end_timestamp: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    total_record_count: Mapped[int] = mapped_column(Integer, default=0)
    total_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    dropped_by_contention: Mapped[int] = mapped_column(BigInteger, default=0)
    dropped_by_rate_limit: Mapped[int] = mapped_column(BigInteger, default=0)
    failed_subtasks: Mapped[list[int]] = mapped_column(JSON, default=list)
    #: Subtasks where the round's filter used up its CPU budget and was stopped.
    filter_stopped_subtasks: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    #: Why a NO_DATA round saw no row (``NoDataReason``), and when the vertex's last
    #: micro-batch ended (ms since the epoch), for streaming vertices.
    no_data_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    last_micro_batch_timestamp: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: Set when the records are an end-of-input vertex's written output (ms since the epoch).
    materialized_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    triggered_by: Mapped[str | None] = mapped_column(String(253), nullable=True)
    #: Driver round id (local mode) or DataSample name (Kubernetes mode).
    external_ref: Mapped[str | None] = mapped_column(String(253), nullable=True)
    #: Kubernetes mode: ``metadata.uid`` of the round's DataSample (the API server's, never
    #: a client's): the operator saves a DataSample's result in the round bound to its uid
    #: (:func:`~.repository.round_of_datasample`). Unique: one round per DataSample.
    datasample_uid: Mapped[str | None] = mapped_column(
        String(253), nullable=True, unique=True, index=True
    )
    #: Whose answer the round is: ``""`` for a round the service started (a plain poll's,
    #: the only rounds a plain poll answers with), else ``datasample:<request key>`` for a
    #: ``kubectl`` DataSample's (its own filter, kind, columns, or limits such as
    #: ``maxRecords`` and ``subtaskIndex``: never the page's answer). ``None`` only while a
    #: migration is under way.
    request_key: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The application's run (``Application.run``) the round was started in: a round of an
    #: earlier run stays in the history but never answers a poll. ``None`` only while a
    #: migration is under way.
    run: Mapped[int | None] = mapped_column(Integer, nullable=True)


class SampleRecord(Base):
    """One captured record of a round (queried explicitly: a round may hold 5000)."""

    __tablename__ = "sample_records"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    round_id: Mapped[str] = mapped_column(ForeignKey("rounds.id", ondelete="CASCADE"), index=True)
    subtask_index: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int] = mapped_column(Integer)
    sample_timestamp: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[str] = mapped_column(Text)
    data_type: Mapped[str] = mapped_column(Text)
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Rounds of kind violations: the expectations the row failed; of kind errors: why the
    #: vertex could not process it. NULL on other rounds.
    expectations: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class AuditEvent(Base):
    """Who read or triggered which sample, when, and how many records they got; who was
    refused; what an admin did. A read event may stand for several identical reads
    (``request_count``, ``at``..``last_at``)."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[int] = mapped_column(BigInteger, index=True)
    actor: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(16))
    namespace: Mapped[str] = mapped_column(String(253))
    application: Mapped[str] = mapped_column(String(253))
    vertex: Mapped[str] = mapped_column(String(63))
    round_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    record_count: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: Where the request came from (``host:port``), when the event is about a request.
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: Free text of admin actions and denials (``GET /api/v1/...``, ``token 3 user=bob``);
    #: never a secret.
    detail: Mapped[str | None] = mapped_column(String(512), nullable=True)
    #: How many identical requests the event stands for: 1, or more for reads coalesced
    #: over ``audit_read_window_seconds`` (``at`` the first, ``last_at`` the last of them).
    request_count: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: Time of the last request a coalesced read stands for; null for single events.
    last_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ApiToken(Base):
    """A local-mode bearer token (only its SHA-256 is stored) bound to a role.

    Valid while ``revoked_at`` is null and ``expires_at`` is null or in the future.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(253))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    revoked_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

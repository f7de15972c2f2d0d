"""The REST contract's pydantic models (JSON keys camelCase, like the CRDs).

The data-sample body itself is :class:`sparkglass.runtime.contract.sample_result.DataSampleResult`,
shared with the driver and the ``DataSample`` status.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel
from sqlalchemy.orm import object_session

from sparkglass.crds.datasample import (
    APACHE_SPARK_API_VERSION,
    KUBEFLOW_API_VERSION,
    SPARKGLASS_API_VERSION,
)
from sparkglass.runtime.contract.sample_result import DataSampleResult

from .driver_liveness import DriverState, DriverStatus
from .driver_trust import driver_tls, http_url_problem
from .store.orm import Application, AuditEvent, Round


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ErrorBody(_Model):
    """Every 4xx/5xx answer but 422: ``{"detail": "..."}``."""

    detail: str


class FieldError(BaseModel):
    """One bad part of a request, as pydantic names it (never the value given: it may be a
    token or a URL with a password)."""

    model_config = ConfigDict(extra="forbid")

    loc: list[str | int] = Field(
        description="Where: body, query or path, then the field's name as sent "
        '(["query", "maxRecords"], ["body", "driverUrl"])'
    )
    msg: str = Field(description="What is wrong with it, with the allowed range")
    type: str = Field(description="pydantic's error type (missing, int_parsing, value_error…)")


class ValidationErrorBody(BaseModel):
    """Every 422 answer: ``detail`` names each bad field and its allowed range in one line,
    ``errors`` lists them one by one."""

    model_config = ConfigDict(extra="forbid")

    detail: str = Field(description="e.g. \"maxRecords must be an integer in 1..5000, got '0'\"")
    errors: list[FieldError]


class VertexInfo(_Model):
    """One step of the pipeline with its declared (or resolved) attributes."""

    name: str
    kind: str = Field(description="source, vertex or sink")
    inputs: list[str]
    bounded: bool
    python: bool
    attributes: dict[str, Any] = Field(
        description="Declared: noOutputUntilEndOfInput, idempotent{key}, notCacheRecord"
    )
    plan: dict[str, Any] = Field(
        description="The planner's view: adjusted attributes, inheritedFrom, phase, tap, "
        "fusionGroup, notes (empty when the planner rejected the pipeline)."
    )


class EdgeInfo(_Model):
    """An input edge; ``kind`` is ``blocking`` when downstream starts after upstream ended."""

    model_config = ConfigDict(populate_by_name=True)

    source: str = Field(alias="from")
    target: str = Field(alias="to")
    kind: str = Field(description="pipelined or blocking")
    fused: bool = Field(default=False, description="Both ends run in one fused Python pass.")


class ApplicationSummary(_Model):
    """An application in a listing."""

    namespace: str
    name: str
    api_version: str = Field(
        default=SPARKGLASS_API_VERSION,
        description="The application's kind, as a DataSample's applicationRef names it: "
        f"{SPARKGLASS_API_VERSION} (sparkglass's own SparkApplication, and every local "
        f"application), {KUBEFLOW_API_VERSION} (a Kubeflow spark-operator SparkApplication) "
        f"or {APACHE_SPARK_API_VERSION} (an Apache Spark operator SparkApplication)",
    )
    pipeline_name: str | None
    vertex_count: int
    registered_at: int = Field(description="ms since the epoch")
    updated_at: int = Field(description="ms since the epoch")
    run: int = Field(
        default=1,
        description="The current run: 1 at the first registration, one more each time the "
        "application is registered with another driver (a restart). Only rounds of the "
        "current run answer a data-sample poll.",
    )
    run_started_at: int | None = Field(
        default=None,
        description="When the current run began, ms since the epoch: the driver's start when "
        "its registration stated it, else when the service first saw that driver",
    )
    driver_state: DriverState = Field(
        default=DriverState.UNKNOWN,
        description="live: the driver answered lately; ended: it did not answer the last "
        "probe (gone, restarted elsewhere, or not answering within 2 s); unknown: not probed "
        "yet, or no driver (Kubernetes mode). Listings probe a driver at most every 10 s.",
    )
    live: bool | None = Field(
        default=None, description="driverState as a boolean (null when unknown)"
    )
    last_seen_at: int | None = Field(
        default=None, description="When the driver last answered, ms since the epoch"
    )


class ApplicationDetail(ApplicationSummary):
    """An application with its pipeline graph."""

    vertices: list[VertexInfo]
    edges: list[EdgeInfo]
    sampling: dict[str, Any] = Field(description="The driver's sampling settings.")
    plan_error: str | None = Field(
        description="Why the planner rejected the pipeline, or why another operator's "
        "application's published pipeline cannot be used (then it has no vertices), if so."
    )


#: Most characters of ``driverCaPem`` (a certificate, or a short chain of them).
MAX_DRIVER_CA_PEM_CHARS = 65536
#: Longest driver token taken (characters): the operator's are 43.
MAX_DRIVER_TOKEN_CHARS = 4096
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]*")


class RegisterApplication(_Model):
    """Local mode: register a running driver's control endpoint (admin)."""

    driver_url: str = Field(description="e.g. http://127.0.0.1:4041 or https://…")
    driver_token: str = Field(description="The control endpoint's bearer token (secret).")
    driver_started_at: int | None = Field(
        default=None,
        ge=0,
        description=(
            "When the driver started (its SparkContext's startTime, ms since the epoch), when "
            "known: a driver registered at the same URL with the same token but another start "
            "is a restart, a new run. Without it, another URL or token makes a new run."
        ),
    )
    driver_ca_pem: str | None = Field(
        default=None,
        max_length=MAX_DRIVER_CA_PEM_CHARS,
        description=(
            "PEM certificate to verify an https:// driver with: its own certificate (the "
            "operator's per-application one, key tls.crt of <app>-control-token) or its CA. "
            "Without it an https:// driver is verified against the system's CAs; either way "
            "the token is not sent to a driver whose certificate fails verification."
        ),
    )

    @field_validator("driver_url")
    @classmethod
    def _callable_url(cls, value: str) -> str:
        # Refused here, in words of our own: the URL is stored and shown, and httpx's own
        # errors at the first call would be answered (and audited) with the URL in them.
        problem = http_url_problem(value)
        if problem is not None:
            raise ValueError(
                f"driverUrl: expected an http:// or https:// URL with a host, e.g. "
                f"http://127.0.0.1:4041; {problem}"
            )
        return value

    @field_validator("driver_token")
    @classmethod
    def _header_safe_token(cls, value: str) -> str:
        # A bearer token travels in a header: a CR or LF would end it (and httpx's refusal
        # quotes the header, token included).
        if len(value) > MAX_DRIVER_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(value):
            raise ValueError(
                f"driverToken: expected 0-{MAX_DRIVER_TOKEN_CHARS} visible ASCII characters "
                "(no spaces, CR, LF or other control characters)"
            )
        return value

    @field_validator("driver_ca_pem")
    @classmethod
    def _loadable_for_https(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Checked here, so a bad certificate is a 422 naming the field, not a failed round.
        driver_tls("driverCaPem", str(info.data.get("driver_url") or ""), value)
        return value


class RoundSummary(_Model):
    """One round in a vertex's history (no records)."""

    round_id: str
    vertex: str
    status: str
    error_code: str | None
    started_at: int = Field(description="ms since the epoch")
    end_timestamp: int | None = Field(description="ms since the epoch")
    total_record_count: int
    triggered_by: str | None
    run: int | None = Field(
        default=None, description="The application's run the round was started in"
    )
    earlier_run: bool = Field(
        default=False,
        description="The round is of an earlier run (a driver since replaced): kept in the "
        "history, never the vertex's current result",
    )


class AuditEventInfo(_Model):
    """One audit event."""

    at: int = Field(description="ms since the epoch")
    actor: str
    action: str = Field(
        description="read, trigger, list, register, delete, token-create, token-revoke or "
        "denied (status 401 or 403)"
    )
    namespace: str
    application: str
    vertex: str
    round_id: str | None
    record_count: int = Field(
        description="records read (summed over coalesced reads; a 304 sends none), or "
        "entries listed"
    )
    status: str | None
    client: str | None = Field(default=None, description="caller's address, when known")
    detail: str | None = Field(
        default=None, description="what an admin action did, or the refused request"
    )
    request_count: int = Field(
        default=1,
        description="identical requests the event stands for: 1, or more for reads "
        "coalesced over audit_read_window_seconds (at: the first, last_at: the last)",
    )
    last_at: int | None = Field(
        default=None, description="ms since the epoch of the last coalesced read"
    )


def application_summary(app: Application, driver: DriverStatus | None = None) -> ApplicationSummary:
    """Listing entry of an application row (``driver``: what is known of its driver)."""
    state = driver.state if driver is not None else DriverState.UNKNOWN
    return ApplicationSummary(
        namespace=app.namespace,
        name=app.name,
        api_version=app.api_version or SPARKGLASS_API_VERSION,
        pipeline_name=app.pipeline_name,
        vertex_count=len(app.vertices),
        registered_at=app.registered_at,
        updated_at=app.updated_at,
        run=app.run or 1,
        run_started_at=app.run_started_at,
        driver_state=state,
        live=None if state is DriverState.UNKNOWN else state is DriverState.LIVE,
        last_seen_at=driver.last_seen_at if driver is not None else app.driver_seen_at,
    )


def application_detail(app: Application, driver: DriverStatus | None = None) -> ApplicationDetail:
    """Detail of an application row (never its driver URL or token)."""
    return ApplicationDetail(
        **application_summary(app, driver).model_dump(),
        vertices=[
            VertexInfo(
                name=v.name,
                kind=v.kind,
                inputs=list(v.inputs or []),
                bounded=v.bounded,
                python=v.python,
                attributes=dict(v.attributes or {}),
                plan=dict(v.plan or {}),
            )
            for v in app.vertices
        ],
        edges=[EdgeInfo.model_validate(e) for e in (app.edges or [])],
        sampling=dict(app.sampling or {}),
        plan_error=app.plan_error,
    )


def round_summary(row: Round) -> RoundSummary:
    """History entry of a round row; whether it is of an earlier run is read from its
    application in the row's session (one lookup per application, by primary key: the
    session's identity map answers the rest of a history)."""
    session = object_session(row)
    current = session.get(Application, row.application_id) if session is not None else None
    return RoundSummary(
        round_id=row.id,
        vertex=row.vertex,
        status=row.status,
        error_code=row.error_code,
        started_at=row.started_at,
        end_timestamp=row.end_timestamp,
        total_record_count=row.total_record_count,
        triggered_by=row.triggered_by,
        run=row.run,
        earlier_run=(current is not None and row.run is not None and row.run < (current.run or 1)),
    )


def audit_info(row: AuditEvent) -> AuditEventInfo:
    """API form of an audit row."""
    return AuditEventInfo(
        at=row.at,
        actor=row.actor,
        action=row.action,
        namespace=row.namespace,
        application=row.application,
        vertex=row.vertex,
        round_id=row.round_id,
        record_count=row.record_count,
        status=row.status,
        client=row.client,
        detail=row.detail,
        request_count=row.request_count,
        last_at=row.last_at,
    )


__all__ = [
    "ApplicationDetail",
    "ApplicationSummary",
    "AuditEventInfo",
    "DataSampleResult",
    "EdgeInfo",
    "ErrorBody",
    "FieldError",
    "RegisterApplication",
    "RoundSummary",
    "ValidationErrorBody",
    "VertexInfo",
]

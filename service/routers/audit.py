"""The audit trail of a namespace (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..audit import client_of
from ..dependencies import AdminDep, SessionDep, StateDep
from ..schemas import AuditEventInfo, ErrorBody, audit_info
from ..store import repository

router = APIRouter(prefix="/api/v1", tags=["audit"])


@router.get(
    "/namespaces/{namespace}/audit-events",
    response_model=list[AuditEventInfo],
    responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}},
)
def audit_events(
    namespace: str,
    state: StateDep,
    session: SessionDep,
    principal: AdminDep,
    request: Request,
    application: Annotated[str | None, Query(description="Only this application.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most events (1-1000).")] = 100,
) -> list[AuditEventInfo]:
    """Who read, triggered, listed, registered or deleted what and who was refused (401/403),
    newest first (events are written within about a second; identical reads are one event
    per ``audit_read_window_seconds`` with ``requestCount``, ``at`` the first and ``lastAt``
    the last of them, and this process's open windows are written before the listing). This
    listing is itself audited, after it is read."""
    state.audit.flush()
    events = [
        audit_info(e)
        for e in repository.list_audit_events(
            session, namespace=namespace, application=application, limit=limit
        )
    ]
    state.audit.note(
        principal.user,
        "list",
        namespace=namespace,
        application=application or "",
        record_count=len(events),
        detail="audit-events",
        client=client_of(request),
    )
    return events

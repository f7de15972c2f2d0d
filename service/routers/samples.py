"""Data samples: the lazy-trigger/polling endpoint, round history and one round's result."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from sparkglass.runtime.contract.sample_result import (
    MAX_RECORDS_PER_RESPONSE,
    DataSampleResult,
    post_filter,
)

from ..auth import Permission
from ..dependencies import (
    FORBIDDEN,
    BearerDep,
    ReaderDep,
    SessionDep,
    StateDep,
    authorized_principal,
    check,
)
from ..lookups import application_or_404, vertex_or_404
from ..schemas import ErrorBody, RoundSummary, round_summary
from ..shared_rounds import PollAnswer, TriggerForbiddenError
from ..store import repository
from ..store.repository import AuditRecord

router = APIRouter(
    prefix="/api/v1/namespaces/{namespace}/applications/{application}", tags=["data samples"]
)

#: Allowed ranges of the post-filter query parameters (the 422 message names them).
MAX_SUBTASK_INDEX = 100_000
PARAMETER_RANGES: dict[str, tuple[int, int]] = {
    "maxRecords": (1, MAX_RECORDS_PER_RESPONSE),
    "subtaskIndex": (0, MAX_SUBTASK_INDEX),
}

SubtaskIndex = Annotated[
    int | None,
    Query(
        alias="subtaskIndex",
        ge=0,
        le=MAX_SUBTASK_INDEX,
        description=f"Only this subtask's records (0-{MAX_SUBTASK_INDEX}).",
    ),
]
MaxRecords = Annotated[
    int | None,
    Query(
        alias="maxRecords",
        ge=1,
        le=MAX_RECORDS_PER_RESPONSE,
        description=f"At most this many records (1-{MAX_RECORDS_PER_RESPONSE}), fairly shared.",
    ),
]

#: Bodies larger than this are sent in pieces of this size: handed to the server whole, a
#: ~50 MB body is copied into the connection's write buffer, once per slow reader.
STREAM_CHUNK_BYTES = 256 * 1024


def json_body(body: bytes) -> Response:
    """``body`` (JSON) as a response; large bodies are streamed from memory in pieces so that
    each connection buffers at most a piece, whatever its reader's speed."""
    if len(body) <= STREAM_CHUNK_BYTES:
        return Response(body, media_type="application/json")
    view = memoryview(body)

    async def pieces() -> AsyncIterator[memoryview]:
        for i in range(0, len(view), STREAM_CHUNK_BYTES):
            yield view[i : i + STREAM_CHUNK_BYTES]

    return StreamingResponse(
        pieces(), media_type="application/json", headers={"content-length": str(len(body))}
    )


_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody},
    404: {"model": ErrorBody},
    422: {"model": ErrorBody},
}


@router.get(
    "/vertices/{vertex}/data-sample",
    response_model=DataSampleResult,
    responses=_ERRORS,
)
async def data_sample(
    namespace: str,
    application: str,
    vertex: str,
    state: StateDep,
    credentials: BearerDep,
    subtask_index: SubtaskIndex = None,
    max_records: MaxRecords = None,
) -> Response:
    """Lazy trigger + polling: the first call starts a round and answers
    ``PENDING``; while a round runs, the previous result with ``stale=true`` (or ``PENDING``);
    afterwards the result, cached for the refresh interval. Starting a round needs ``create``
    on ``datasamples`` (local: sampler role); reading needs ``get`` (viewer)."""
    # The hot path (many clients polling a fresh result) runs on the event loop from memory;
    # anything that may block (store, Kubernetes reviews, filters) goes to the thread pool.
    principal = await authorized_principal(state, credentials, namespace, Permission.READ)
    app = state.applications.get(namespace, application)
    if app is None:
        app = await run_in_threadpool(application_or_404, state, namespace, application)
    vertex_or_404(app, vertex)
    fresh = state.coordinator.fresh_answer(app, vertex)
    answer: PollAnswer
    if fresh is not None:
        answer = fresh
    else:

        def may_trigger() -> bool:
            return check(state, principal, namespace, Permission.TRIGGER)

        poll = functools.partial(
            state.coordinator.poll, app, vertex, actor=principal.user, may_trigger=may_trigger
        )
        try:
            answer = await run_in_threadpool(poll)
        except TriggerForbiddenError:
            raise FORBIDDEN from None
    if subtask_index is None and max_records is None:
        result = answer.result
        body = state.coordinator.render(result)
    else:
        result = await run_in_threadpool(
            post_filter, answer.result, subtask_index, max_records
        )
        body = result.model_dump_json(by_alias=True).encode()
    state.audit.record(
        AuditRecord(
            actor=principal.user,
            action="trigger" if answer.started_round else "read",
            namespace=namespace,
            application=application,
            vertex=vertex,
            round_id=answer.started_round or result.round_id,
            record_count=result.record_count(),
            status=result.status.value,
            at=repository.now_ms(),
        )
    )
    return json_body(body)


@router.get("/vertices/{vertex}/rounds", response_model=list[RoundSummary], responses=_ERRORS)
def round_history(
    namespace: str,
    application: str,
    vertex: str,
    state: StateDep,
    session: SessionDep,
    principal: ReaderDep,
    limit: Annotated[int, Query(ge=1, le=500, description="Most rounds to list (1-500).")] = 50,
) -> list[RoundSummary]:
    """The vertex's rounds, newest first (no records)."""
    app = application_or_404(state, namespace, application, session)
    vertex_or_404(app, vertex)
    rounds = [
        round_summary(r) for r in repository.list_rounds(session, app.id, vertex, limit=limit)
    ]
    state.audit.note(
        principal.user,
        "list",
        namespace=namespace,
        application=application,
        vertex=vertex,
        record_count=len(rounds),
        detail="rounds",
    )
    return rounds


@router.get("/rounds/{round_id}", response_model=DataSampleResult, responses=_ERRORS)
def round_result(
    namespace: str,
    application: str,
    round_id: str,
    state: StateDep,
    session: SessionDep,
    principal: ReaderDep,
    subtask_index: SubtaskIndex = None,
    max_records: MaxRecords = None,
) -> Response:
    """One round's full stored result (the ``resultsURL`` of a DataSample)."""
    app = application_or_404(state, namespace, application, session)
    row = repository.get_round(session, round_id)
    if row is None or row.application_id != app.id:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no round {round_id!r} in application {application!r}",
        )
    with state.coordinator.memory_gate:  # a stored result may be ~50 MB
        result = post_filter(repository.load_result(session, row), subtask_index, max_records)
        body = result.model_dump_json(by_alias=True).encode()
    state.audit.record(
        AuditRecord(
            actor=principal.user,
            action="read",
            namespace=namespace,
            application=application,
            vertex=row.vertex,
            round_id=row.id,
            record_count=result.record_count(),
            status=result.status.value,
            at=repository.now_ms(),
        )
    )
    return json_body(body)

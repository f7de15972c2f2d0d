"""Data samples: the lazy-trigger/polling endpoint, round history and one round's result."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.round_request import PLAIN, round_request
from sparkglass.runtime.contract.sample_result import (
    MAX_RECORDS_PER_RESPONSE,
    DataSampleResult,
)

from ..audit import client_of
from ..auth import Permission, Principal
from ..content_coding import accept_encoding, accepts_gzip
from ..dependencies import (
    FORBIDDEN,
    BearerDep,
    ReaderDep,
    SessionDep,
    StateDep,
    authorized_principal,
    check,
)
from ..execution import RoundRefused
from ..lookups import application_or_404, vertex_or_404
from ..result_body import (
    BodyPlan,
    body_scope,
    entity_tag,
    not_modified,
    not_modified_response,
    plan_body,
    validator_headers,
)
from ..schemas import ErrorBody, RoundSummary, ValidationErrorBody, round_summary
from ..shared_rounds import PollAnswer, TooManyRoundsError, TriggerForbiddenError
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

Kind = Annotated[
    str | None,
    Query(description="output (default), violations or errors: which rows a round returns."),
]
Filter = Annotated[
    str | None,
    Query(
        max_length=4096,
        description="Spark SQL predicate over the vertex's columns, evaluated on the executors "
        "(e.g. carrier = 'UA' AND dep_delay > 60); may not name a redacted column.",
    ),
]
Columns = Annotated[
    str | None,
    Query(max_length=20_000, description="Comma-separated columns to return, in order."),
]
ExpectationName = Annotated[
    str | None, Query(description="With kind=violations: only rows failing this expectation.")
]

#: ``If-None-Match``: the ``ETag`` of the body the client already holds; a match answers
#: ``304 Not Modified`` with no body.
IfNoneMatch = Annotated[str | None, Header(description="ETag of the body already held")]

_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody},
    404: {"model": ErrorBody},
    422: {"model": ValidationErrorBody},
}
#: ``Retry-After`` (s) of a narrowed round refused by the application's cap: rounds last a
#: sampling window (a few seconds), so one slot is usually free by then.
RETRY_NARROWED_AFTER_S = 2


@router.get(
    "/vertices/{vertex}/data-sample",
    response_model=DataSampleResult,
    responses={**_ERRORS, 429: {"model": ErrorBody}},
)
async def data_sample(
    namespace: str,
    application: str,
    vertex: str,
    state: StateDep,
    credentials: BearerDep,
    http_request: Request,
    subtask_index: SubtaskIndex = None,
    max_records: MaxRecords = None,
    kind: Kind = None,
    filter: Filter = None,
    columns: Columns = None,
    expectation: ExpectationName = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """Lazy trigger + polling: the first call starts a round and answers
    ``PENDING``; while a round runs, the previous result with ``stale=true`` (or ``PENDING``);
    afterwards the result, cached for the refresh interval. Starting a round needs ``create``
    on ``datasamples`` (local: sampler role); reading needs ``get`` (viewer).

    ``kind``, ``filter``, ``columns`` and ``expectation`` ask for a narrower round: rounds of
    one such request are shared, stored and refreshed as plain rounds are, apart from them
    (in Kubernetes mode, through a DataSample with those fields). Before one starts, the
    request is checked (local mode: by the driver; Kubernetes mode: by a dry run of the
    DataSample, which the CRD's rules and its admission webhook judge): a filter or column
    that does not fit the vertex answers 422 naming it; any other failure of the check lets
    the round start. An application runs at most ``narrowed_rounds_per_application`` such
    rounds at once per service replica, all of them together ``narrowed_rounds_per_replica``;
    past either a poll that would start one answers with the request's older result (stale),
    or 429 with ``Retry-After`` when it has none.

    Every body carries a weak ``ETag``; a poll whose ``If-None-Match`` names the current one
    gets ``304 Not Modified`` and no body. Bodies are gzip-compressed when the client accepts
    it."""
    # The hot path (many clients polling a fresh result) runs on the event loop from memory;
    # anything that may block (store, Kubernetes reviews, filters) goes to the thread pool.
    principal = await authorized_principal(state, credentials, namespace, Permission.READ)
    app = state.applications.get(namespace, application)
    if app is None or app.api_version:
        # Another operator's application needs a second check (:func:`visible`), which may
        # ask the API server: off the event loop.
        app = await run_in_threadpool(
            functools.partial(
                application_or_404, state, namespace, application, principal=principal
            )
        )
    vertex_or_404(app, vertex)
    narrowing = PLAIN
    if any(v is not None for v in (kind, filter, columns, expectation)):
        try:
            narrowing = round_request(kind, filter, columns, expectation)
        except InvalidParameterError as exc:
            raise _unprocessable(exc.field, str(exc)) from None
    fresh = state.coordinator.fresh_answer(app, vertex, narrowing)
    answer: PollAnswer
    if fresh is not None:
        answer = fresh
    else:

        def may_trigger() -> bool:
            if not check(state, principal, namespace, Permission.TRIGGER):
                return False
            if state.coordinator.slot_problem(app.id, narrowing) is not None:
                return True  # no round can start (429): the request is not worth checking
            try:
                state.coordinator.check(app, vertex, principal.user, narrowing)
            except RoundRefused as exc:
                raise _unprocessable(exc.field, str(exc)) from None
            return True

        poll = functools.partial(
            state.coordinator.poll,
            app,
            vertex,
            actor=principal.user,
            may_trigger=may_trigger,
            narrowing=narrowing,
        )
        try:
            answer = await run_in_threadpool(poll)
        except TriggerForbiddenError:
            raise FORBIDDEN from None
        except TooManyRoundsError as exc:
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                detail=str(exc),
                headers={"Retry-After": str(RETRY_NARROWED_AFTER_S)},
            ) from None
    # The records go from the store (or the byte-bounded cache) to the client a chunk at a
    # time: no request holds a whole result (result_body.py).
    result = answer.result
    response, record_count = await state.coordinator.bodies.response(
        result,
        subtask_index,
        max_records,
        if_none_match,
        accept_gzip=accepts_gzip(accept_encoding(http_request.headers)),
        scope=body_scope(app.namespace, app.name, app.api_version),
    )
    state.audit.record(
        poll_record(
            principal,
            namespace,
            application,
            vertex,
            answer,
            record_count,
            client_of(http_request),
        )
    )
    return response


def poll_record(
    principal: Principal,
    namespace: str,
    application: str,
    vertex: str,
    answer: PollAnswer,
    record_count: int,
    client: str | None,
) -> AuditRecord:
    """The audit event of one data-sample poll answered with ``answer`` (a ``trigger`` when
    it started a round, else a ``read``), ``record_count`` records sent (0 for a 304)."""
    return AuditRecord(
        actor=principal.user,
        action="trigger" if answer.started_round else "read",
        namespace=namespace,
        application=application,
        vertex=vertex,
        round_id=answer.started_round or answer.result.round_id,
        record_count=record_count,
        status=answer.result.status.value,
        at=repository.now_ms(),
        client=client,
    )


def _unprocessable(field: str | None, message: str) -> RequestValidationError:
    """A 422 in the service's own shape (``detail`` naming the parameter, ``errors``)."""
    name = field or "filter"
    prefix = f"{name}: "
    msg = message[len(prefix) :] if message.startswith(prefix) else message
    return RequestValidationError([{"loc": ("query", name), "msg": msg, "type": "value_error"}])


@router.get("/vertices/{vertex}/rounds", response_model=list[RoundSummary], responses=_ERRORS)
def round_history(
    namespace: str,
    application: str,
    vertex: str,
    state: StateDep,
    session: SessionDep,
    principal: ReaderDep,
    http_request: Request,
    limit: Annotated[int, Query(ge=1, le=500, description="Most rounds to list (1-500).")] = 50,
) -> list[RoundSummary]:
    """The vertex's rounds, newest first (no records)."""
    app = application_or_404(state, namespace, application, session, principal=principal)
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
        client=client_of(http_request),
    )
    return rounds


@router.get("/rounds/{round_id}", response_model=DataSampleResult, responses=_ERRORS)
async def round_result(
    namespace: str,
    application: str,
    round_id: str,
    state: StateDep,
    principal: ReaderDep,
    http_request: Request,
    subtask_index: SubtaskIndex = None,
    max_records: MaxRecords = None,
    if_none_match: IfNoneMatch = None,
) -> Response:
    """One round's full stored result (the ``resultsURL`` of a DataSample), with a weak
    ``ETag``: ``If-None-Match`` naming it answers ``304`` with no body. The body is written
    from the store under the service's stream gate (503 with ``Retry-After`` when
    ``stream_concurrency`` bodies are being sent and none ends within
    ``stream_wait_seconds``)."""

    def load() -> tuple[str, BodyPlan | None, str, str]:
        with state.sessions() as session:
            app = application_or_404(state, namespace, application, session, principal=principal)
            row = repository.get_round(session, round_id)
            if row is None or row.application_id != app.id:
                raise HTTPException(
                    status.HTTP_404_NOT_FOUND,
                    detail=f"no round {round_id!r} in application {application!r}",
                )
            head = repository.round_head(row)
            etag = entity_tag(head, subtask_index, max_records)
            if not_modified(if_none_match, etag):
                return etag, None, row.vertex, head.status.value
            # A stored result may be ~50 MB: its body is written from the store a page at
            # a time.
            plan = plan_body(session, head, subtask_index, max_records)
            return etag, plan, row.vertex, head.status.value

    etag, plan, vertex, round_status = await run_in_threadpool(load)
    if plan is None:
        response = not_modified_response(etag)
    else:
        response = await state.coordinator.bodies.stream(plan, validator_headers(etag))
    # A 304 is audited too (no records sent); repeated ones are coalesced (audit.py).
    state.audit.record(
        AuditRecord(
            actor=principal.user,
            action="read",
            namespace=namespace,
            application=application,
            vertex=vertex,
            round_id=round_id,
            record_count=0 if plan is None else plan.record_count,
            status=round_status,
            at=repository.now_ms(),
            client=client_of(http_request),
        )
    )
    return response

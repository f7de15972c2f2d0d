"""DataSample results, saved by the operator: one route, one writer.

The operator runs a DataSample's round on the driver and PUTs the whole result here
(:class:`~sparkglass.runtime.contract.saved_result.ResultUpload`); it is saved in the round
of the DataSample's uid (:func:`~sparkglass.service.store.repository.save_datasample_result`)
and served from there. Only the identities in ``result_writers`` may write, authenticated
before any byte of the body is read (the body is not a route parameter, so FastAPI reads it
only when the handler does), and in Kubernetes mode with a token bound to
``result_audience``: what crosses the cluster network is no API server credential. Where the
service reads the API server, a result is saved only for the DataSample the API server holds
under that name and uid, and only at its own application (of the kind its ``applicationRef``
names), vertex and request.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from sparkglass.crds.datasample import DataSampleSpec
from sparkglass.runtime.contract.description import DNS1123_LABEL, DNS1123_MAX_LENGTH
from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.result_caps import ResultCaps, ResultRejected
from sparkglass.runtime.contract.saved_result import ResultSaved, ResultUpload

from ..audit import client_of
from ..dependencies import FORBIDDEN, BearerDep, StateDep, authenticate
from ..execution.kubernetes import read_datasample
from ..schemas import ErrorBody
from ..settings import AuthMode
from ..state import ServiceState
from ..store import repository

router = APIRouter(prefix="/api/v1", tags=["results"])

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

#: The route's path, for the body limit of its own (``max_result_bytes``).
RESULT_PATH = r"/api/v1/namespaces/[^/]+/datasamples/[^/]+/result"


def result_writer(state: StateDep, credentials: BearerDep) -> str:
    """The caller's name when it may save results: 401 without a valid token (of the
    ``result_audience`` in Kubernetes mode), 403 unless it is one of ``result_writers``."""
    settings = state.settings
    audiences = (settings.result_audience,) if settings.auth_mode is AuthMode.KUBERNETES else ()
    principal = authenticate(state, credentials, audiences)
    # Local mode: a name is not enough, the token must be an admin's too.
    if principal.user not in settings.result_writer_names or principal.role not in (None, "admin"):
        raise FORBIDDEN
    return principal.user


WriterDep = Annotated[str, Depends(result_writer)]


@router.put(
    "/namespaces/{namespace}/datasamples/{name}/result",
    response_model=ResultSaved,
    responses={
        401: {"model": ErrorBody},
        403: {"model": ErrorBody},
        409: {
            "model": ErrorBody,
            "description": "The round belongs to another application, or the application of "
            "that name is of another kind than the DataSample's applicationRef.",
        },
        413: {"model": ErrorBody},
        422: {"model": ErrorBody},
    },
)
async def save_result(
    namespace: str, name: str, request: Request, state: StateDep, writer: WriterDep
) -> ResultSaved:
    """Save (or replace) the result of the DataSample ``name`` (the operator's call). The
    body is a ``ResultUpload`` of at most ``max_result_bytes``; its records are checked
    against the contract's caps again (422 naming the cap), and a round of another
    application or vertex is never overwritten (409)."""
    if not DNS1123_LABEL.match(namespace) or len(namespace) > DNS1123_MAX_LENGTH:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"namespace: not a DNS-1123 label (1-{DNS1123_MAX_LENGTH} characters)",
        )
    if not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail="name: not a DNS-1123 subdomain (1-253 characters)",
        )
    try:
        upload = ResultUpload.model_validate_json(await request.body())
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=where) from None
    # Without the API server (local mode) every application is of sparkglass's kind.
    api_version: str | None = None
    if state.datasamples is not None:
        obj = await run_in_threadpool(read_datasample, state.datasamples, namespace, name)
        upload, api_version = _as_the_datasample_says(upload, obj, f"{namespace}/{name}")
    caps = ResultCaps(upload.max_record_length)
    try:
        for sub in upload.result.samples:
            caps.check(sub)
    except ResultRejected as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from None
    try:
        round_id = await run_in_threadpool(_save, state, namespace, name, upload, api_version)
    except repository.RoundOwnershipError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    state.audit.note(
        writer,
        "save",
        namespace=namespace,
        application=upload.application,
        vertex=upload.vertex,
        round_id=round_id,
        record_count=upload.result.record_count(),
        detail=f"datasample {name}",
        client=client_of(request),
    )
    return ResultSaved(round_id=round_id)


def _as_the_datasample_says(
    upload: ResultUpload, obj: dict[str, Any] | None, where: str
) -> tuple[ResultUpload, str | None]:
    """``upload`` if it is the result of the DataSample the API server holds as ``where``
    (its uid, application, vertex and request), else 409: even the operator's token only
    ever saves a DataSample's result at that DataSample's own target. With the kind of
    application its ``applicationRef`` names (its ``apiVersion``; ``None``: sparkglass's
    own): the name alone is not the application, another operator's may share it."""
    if obj is None:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"no DataSample {where}")
    if str((obj.get("metadata") or {}).get("uid") or "") != upload.uid:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"DataSample {where} has another uid")
    try:
        spec = DataSampleSpec.parse(obj.get("spec"))
        key = spec.round_request().key()
    except (ValidationError, InvalidParameterError) as exc:
        raise HTTPException(
            status.HTTP_409_CONFLICT, detail=f"DataSample {where} has an invalid spec"
        ) from exc
    asked = (spec.application_ref.name, spec.vertex, key)
    if (upload.application, upload.vertex, upload.request_key) != asked:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail=f"the result is not for what DataSample {where} asks (application, "
            "vertex or request differ)",
        )
    return upload, repository.stored_api_version(spec.application_ref.api_version.value)


def _save(
    state: ServiceState,
    namespace: str,
    name: str,
    upload: ResultUpload,
    api_version: str | None,
) -> str:
    return repository.save_datasample_result_retrying(
        state.sessions,
        namespace=namespace,
        application=upload.application,
        vertex=upload.vertex,
        result=upload.result,
        uid=upload.uid,
        name=name,
        started_at_ms=upload.started_at_ms,
        request_key=upload.request_key,
        api_version=api_version,
    )

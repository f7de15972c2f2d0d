"""Applications: list, show (with the pipeline graph), register and remove (local mode)."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from sparkglass.runtime.contract.expectations import ExpectationCounts
from sparkglass.runtime.control.client import ControlClient, ControlError

from ..audit import client_of
from ..auth import Permission, Principal
from ..catalog import CatalogError, register_local_application
from ..dependencies import AdminDep, PrincipalDep, ReaderDep, SessionDep, StateDep, check
from ..driver_trust import driver_location, driver_tls
from ..lookups import application_or_404, forget_application, refresh_catalog, visible
from ..pipeline_progress import ProgressUnavailable
from ..schemas import (
    ApplicationDetail,
    ApplicationSummary,
    ErrorBody,
    RegisterApplication,
    application_detail,
    application_summary,
)
from ..settings import LOCAL_NAMESPACE, ExecutionMode
from ..state import ServiceState
from ..store import repository
from ..store.cipher import StoreKeyMissing
from ..store.orm import Application

router = APIRouter(prefix="/api/v1", tags=["applications"])

_ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorBody},
    403: {"model": ErrorBody},
    404: {"model": ErrorBody},
}


@router.get("/applications", response_model=list[ApplicationSummary], responses=_ERRORS)
def list_all_applications(
    state: StateDep, session: SessionDep, principal: PrincipalDep, request: Request
) -> list[ApplicationSummary]:
    """Applications in every namespace the caller may read."""
    if state.catalog is not None:
        known = {a.namespace for a in repository.list_applications(session)}
    else:
        known = {LOCAL_NAMESPACE}
    allowed = {ns for ns in known if check(state, principal, ns, Permission.READ)}
    apps = [
        a
        for a in repository.list_applications(session)
        if a.namespace in allowed and visible(state, principal, a)
    ]
    listed = _summaries(state, apps)
    state.audit.note(
        principal.user,
        "list",
        namespace="",
        record_count=len(listed),
        detail="applications",
        client=client_of(request),
    )
    return listed


@router.get(
    "/namespaces/{namespace}/applications",
    response_model=list[ApplicationSummary],
    responses=_ERRORS,
)
def list_applications(
    namespace: str, state: StateDep, session: SessionDep, principal: ReaderDep, request: Request
) -> list[ApplicationSummary]:
    """Applications of one namespace (``local`` in local mode)."""
    refresh_catalog(state, namespace)
    apps = [
        a for a in repository.list_applications(session, namespace) if visible(state, principal, a)
    ]
    listed = _summaries(state, apps)
    state.audit.note(
        principal.user,
        "list",
        namespace=namespace,
        record_count=len(listed),
        detail="applications",
        client=client_of(request),
    )
    return listed


def _summaries(state: ServiceState, apps: Sequence[Application]) -> list[ApplicationSummary]:
    """Listing entries with what is known of each driver: a listing (never a poll) probes
    the drivers not heard from within the last seconds, and waits a bounded time for them
    (:class:`~sparkglass.service.driver_liveness.DriverLiveness`)."""
    drivers = state.coordinator.drivers.statuses(apps, state.driver_trust)
    return [application_summary(a, drivers.get(a.id)) for a in apps]


@router.get(
    "/namespaces/{namespace}/applications/{application}",
    response_model=ApplicationDetail,
    responses=_ERRORS,
)
def get_application(
    namespace: str, application: str, state: StateDep, session: SessionDep, principal: ReaderDep
) -> ApplicationDetail:
    """One application with its vertices (attributes) and edges (``pipelined``/``blocking``);
    its driver's state as last probed (a detail never probes)."""
    app = application_or_404(state, namespace, application, session, principal=principal)
    return application_detail(app, state.coordinator.drivers.known(app))


@router.get(
    "/namespaces/{namespace}/applications/{application}/expectations",
    response_model=list[ExpectationCounts],
    responses={**_ERRORS, 502: {"model": ErrorBody}},
)
def get_expectations(
    namespace: str, application: str, state: StateDep, session: SessionDep, principal: ReaderDep
) -> list[ExpectationCounts]:
    """Pass and fail counts of each expectation of the application's streaming vertices
    (totals and last micro-batch), as its driver counts them. Local mode: asked of the
    driver control endpoint now. Kubernetes mode (no driver URL; the service holds no driver
    token): from the SparkApplication's ``status.progress``, which the operator refreshes
    from the driver every ``--progress-seconds`` (60 s by default, when they changed). 502 when
    the driver cannot be asked, or the operator has published no metrics (yet), the reason in
    ``detail``."""
    app = application_or_404(state, namespace, application, session, principal=principal)
    if not app.driver_url:
        try:
            return state.progress.read(app).expectation_counts()
        except ProgressUnavailable as exc:
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=str(exc)) from None
    tls = state.driver_trust.get(namespace, application)
    try:
        token = repository.driver_token(session, app)  # stored encrypted
        with ControlClient(app.driver_url, token or "", timeout_s=10, tls=tls) as driver:
            return driver.expectations()
    except (ControlError, ValueError) as exc:
        # ValueError: the store key cannot open the token, or a certificate is pinned for a
        # URL that is not https:// (neither message holds a secret).
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=str(exc)) from None


@router.put(
    "/namespaces/{namespace}/applications/{application}",
    response_model=ApplicationDetail,
    responses={**_ERRORS, 409: {"model": ErrorBody}, 502: {"model": ErrorBody}},
    # The body is read by the route itself, after authentication (see below); OpenAPI
    # still describes it.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": RegisterApplication.model_json_schema()}},
        }
    },
)
async def register_application(
    namespace: str, application: str, request: Request, state: StateDep, principal: AdminDep
) -> ApplicationDetail:
    """Local mode: register (or re-register) a running driver; reads its pipeline (admin).

    Body: ``{"driverUrl": ..., "driverToken": ..., "driverStartedAt": ..., "driverCaPem":
    ...}`` (``driverStartedAt`` optional: the driver's SparkContext start, ms;
    ``driverCaPem`` optional: the certificate to verify an ``https://`` driver with); 422
    naming the bad field; 502 when the driver cannot be read (unreachable, or a certificate
    that fails verification: then the token was not sent). Another driver than the
    registered one (URL, token or start) begins a new run: the earlier run's rounds stay in
    the history, never the current result."""
    # A declared body parameter would make FastAPI read (and buffer) the whole body before
    # any dependency runs, i.e. before the caller is authenticated: read it only now.
    raw = await request.body()
    try:
        body = RegisterApplication.model_validate_json(raw or b"null")
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    return await run_in_threadpool(_register, namespace, application, body, state, principal)


def _register(
    namespace: str,
    application: str,
    body: RegisterApplication,
    state: ServiceState,
    principal: Principal,
) -> ApplicationDetail:
    if state.settings.execution_mode is not ExecutionMode.LOCAL or namespace != LOCAL_NAMESPACE:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail="applications are registered in local mode only, in namespace 'local'",
        )
    tls = driver_tls("driverCaPem", body.driver_url, body.driver_ca_pem)  # validated already
    try:
        registered = register_local_application(
            state.sessions,
            application,
            body.driver_url,
            body.driver_token,
            namespace=namespace,
            tls=tls,
            driver_started_at=body.driver_started_at,
        )
    except StoreKeyMissing as exc:  # PostgreSQL without SPARKGLASS_STORE_KEY
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from None
    except CatalogError as exc:
        state.audit.note(
            principal.user,
            "register",
            namespace=namespace,
            application=application,
            status="502",
            detail=str(exc),
        )
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=str(exc)) from None
    state.driver_trust.set(namespace, application, tls)
    # What was known of the driver before is of another one, or older than this answer.
    state.coordinator.drivers.forget(registered.application_id)
    if registered.new_run:
        # Answers this replica holds are of the earlier run's driver (other replicas tell
        # by the run their cached answers were made for: shared_rounds.py).
        state.coordinator.forget(registered.application_id)
    where = driver_location(body.driver_url)
    if tls is not None:
        where += " (its own certificate pinned)"
    if registered.new_run:
        where += f"; run {registered.run} begins"
    state.audit.note(
        principal.user,
        "register",
        namespace=namespace,
        application=application,
        status="200",
        detail=f"driver {where}",
    )
    state.applications.invalidate(namespace, application)
    app = application_or_404(state, namespace, application, principal=principal)
    return application_detail(app, state.coordinator.drivers.known(app))


@router.delete(
    "/namespaces/{namespace}/applications/{application}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=_ERRORS,
)
def delete_application(
    namespace: str, application: str, state: StateDep, session: SessionDep, principal: AdminDep
) -> Response:
    """Forget an application with its rounds and records (admin)."""
    app = application_or_404(state, namespace, application, session, principal=principal)
    with state.sessions.begin() as writer:
        rounds = repository.count_rounds(writer, app.id)
        repository.delete_application(writer, namespace, application)
    state.audit.note(
        principal.user,
        "delete",
        namespace=namespace,
        application=application,
        status="204",
        detail=f"deleted with {rounds} rounds",
    )
    forget_application(state, app.id, namespace, application)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

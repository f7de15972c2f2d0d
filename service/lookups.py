"""Finding an application or vertex for a route, with 404s that list what exists."""

from __future__ import annotations

import contextlib

from fastapi import HTTPException, status
from sqlalchemy.orm import Session

from .auth import Principal
from .catalog import CatalogError
from .dependencies import check
from .foreign_apps import permission_to_see
from .state import ServiceState
from .store import repository
from .store.orm import Application


def refresh_catalog(state: ServiceState, namespace: str, name: str | None = None) -> None:
    """Kubernetes mode: re-read SparkApplications (rate-limited); 503 when unreachable."""
    if state.catalog is None:
        return
    try:
        state.catalog.refresh(namespace, name)
    except CatalogError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None


def visible(state: ServiceState, principal: Principal, app: Application) -> bool:
    """Whether ``principal`` (already allowed to read in the namespace) may see ``app``:
    always for sparkglass's own and local applications; for another operator's, only with
    ``get`` on its kind there (:mod:`.foreign_apps`). 503 when it cannot be decided."""
    try:
        permission = permission_to_see(app.api_version)
    except LookupError:
        return False
    return permission is None or check(state, principal, app.namespace, permission)


def application_or_404(
    state: ServiceState,
    namespace: str,
    name: str,
    session: Session | None = None,
    *,
    principal: Principal,
) -> Application:
    """The application or 404 naming the applications of ``namespace`` that ``principal``
    may see (:func:`visible`): an application it may not see is answered as one that does
    not exist.

    Rows are cached for a couple of seconds (:mod:`.app_cache`); a store session is opened
    only on a cache miss when none is given (the poll's hot path: no session, no thread-pool
    hop for a dependency).
    """
    app = state.applications.get(namespace, name)
    if app is not None and visible(state, principal, app):
        return app
    with contextlib.nullcontext(session) if session is not None else state.sessions() as s:
        if app is None:
            app = _load_application(state, s, namespace, name, principal)
            if visible(state, principal, app):
                return app
        raise _not_found(state, s, namespace, name, principal)


def _not_found(
    state: ServiceState, session: Session, namespace: str, name: str, principal: Principal
) -> HTTPException:
    names = [
        a.name
        for a in repository.list_applications(session, namespace)
        if visible(state, principal, a)
    ]
    known = ", ".join(names) if names else "none"
    return HTTPException(
        status.HTTP_404_NOT_FOUND,
        detail=f"no application {name!r} in namespace {namespace!r}; applications: {known}",
    )


def _load_application(
    state: ServiceState, session: Session, namespace: str, name: str, principal: Principal
) -> Application:
    refresh_catalog(state, namespace, name)
    app = repository.get_application(session, namespace, name)
    if app is None:
        raise _not_found(state, session, namespace, name, principal)
    state.applications.put(app)
    return app


def has_vertex(app: Application, vertex: str) -> bool:
    """Whether ``vertex`` is one of the application's vertices."""
    return any(v.name == vertex for v in app.vertices)


def vertex_or_404(app: Application, vertex: str) -> None:
    """404 naming the application's vertices unless ``vertex`` is one of them."""
    if not has_vertex(app, vertex):
        names = [v.name for v in app.vertices]
        known = ", ".join(names) if names else "none"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no vertex {vertex!r} in application {app.name!r}; vertices: {known}",
        )


def forget_application(state: ServiceState, application_id: int, namespace: str, name: str) -> None:
    """Drop what this replica holds in memory of the application row ``application_id``
    (``namespace/name``): deleted, or replaced by another kind's application of its name.
    Its answers, bodies and metrics are that application's alone; kept, they would be
    served as another's (a user who may read one kind but not the other reading them)."""
    state.coordinator.forget(application_id)
    state.coordinator.drivers.forget(application_id)
    state.coordinator.bodies.forget(f"{namespace}/{name}")
    state.progress.forget(namespace, name)
    state.metrics.expectations.forget(namespace, name)
    state.metrics.progress.forget(namespace, name)
    state.driver_trust.forget(namespace, name)
    state.applications.invalidate(namespace, name)

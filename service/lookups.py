"""Finding an application or vertex for a route, with 404s that list what exists."""

from __future__ import annotations

from fastapi import HTTPException, status
from sqlalchemy.orm import Session

from .catalog import CatalogError
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


def application_or_404(
    state: ServiceState, namespace: str, name: str, session: Session | None = None
) -> Application:
    """The application or 404 naming the applications of ``namespace``.

    Rows are cached for a couple of seconds (:mod:`.app_cache`); a store session is opened
    only on a cache miss when none is given (the poll's hot path: no session, no thread-pool
    hop for a dependency).
    """
    cached = state.applications.get(namespace, name)
    if cached is not None:
        return cached
    if session is None:
        with state.sessions() as own:
            return _load_application(state, own, namespace, name)
    return _load_application(state, session, namespace, name)


def _load_application(
    state: ServiceState, session: Session, namespace: str, name: str
) -> Application:
    refresh_catalog(state, namespace, name)
    app = repository.get_application(session, namespace, name)
    if app is not None:
        state.applications.put(app)
    else:
        names = [a.name for a in repository.list_applications(session, namespace)]
        known = ", ".join(names) if names else "none"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no application {name!r} in namespace {namespace!r}; applications: {known}",
        )
    return app


def vertex_or_404(app: Application, vertex: str) -> None:
    """404 naming the application's vertices unless ``vertex`` is one of them."""
    names = [v.name for v in app.vertices]
    if vertex not in names:
        known = ", ".join(names) if names else "none"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no vertex {vertex!r} in application {app.name!r}; vertices: {known}",
        )

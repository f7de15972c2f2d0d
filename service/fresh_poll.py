"""The fast path of the hot poll: ``304 Not Modified`` for a fresh cached data-sample answer,
answered as a pure ASGI component without FastAPI's routing and dependency solving.

Hundreds of open pages poll ``GET .../vertices/{vertex}/data-sample`` every few seconds
with the ``ETag`` of the result they show; while the result is unchanged each poll costs a
304. Through FastAPI most of that cost is parameter and dependency handling
(docs/performance.md, "The fresh poll's fast path"). :class:`FreshPollMiddleware` answers
such a poll itself when everything the route would decide is already in memory, and hands
every other request to the application unchanged:

* method ``GET``, the data-sample route's path, and no query parameter the route reads
  (``subtaskIndex``, ``maxRecords``, ``kind``, ``filter``, ``columns``, ``expectation``:
  taken from the route itself; other parameters the route ignores too);
* a bearer token (read by the route's own ``HTTPBearer``) whose principal the route
  layer's cache holds, and a cached *allowed* decision for that token, the path's namespace
  and ``read`` (:func:`~.dependencies.cached_principal`, :func:`~.dependencies.cached_decision`:
  a miss or a cached denial goes to the route, which asks the authenticator and answers
  401/403 as always); nothing here calls the authenticator or the store;
* the application in the application cache, and sparkglass's own or a local one (another
  operator's needs the route's second check), with the vertex;
* a fresh (or interim) answer in the coordinator
  (:meth:`~.shared_rounds.SharedRounds.fresh_answer`), whose
  :func:`~.result_body.entity_tag` the ``If-None-Match`` names
  (:func:`~.result_body.conditional_answer`, as the route compares it).

The 304 is the route's (:func:`~.result_body.not_modified_response`), the request is
audited with the route's event (:func:`~.routers.samples.poll_record`), and ``scope["route"]``
is the route so that metrics count it under its template. It sits inside the security
middlewares (metrics, security headers, the auth-failure limiter, the body limit), which
apply to it as to the route.
"""

from __future__ import annotations

from typing import Any

from fastapi.dependencies.models import Dependant
from starlette.datastructures import Headers, QueryParams
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from .audit import client_of_scope
from .auth import Permission
from .dependencies import (
    bearer_credentials,
    bearer_scheme,
    cached_decision,
    cached_principal,
    get_state,
    token_key,
)
from .lookups import has_vertex
from .result_body import conditional_answer
from .routers import samples
from .state import ServiceState
from .store.repository import AuditRecord

#: What the route's own dependencies are: the fast path decides as they do, so a route that
#: gains another (a limit, a required header) must not be answered here.
_ROUTE_DEPENDENCIES = frozenset({get_state, bearer_scheme})


def _decides_as_expected(dependant: Dependant) -> bool:
    """Whether the route depends on exactly what this module decides with (and nothing
    added where the router was included)."""
    calls = {d.call for d in dependant.dependencies}
    return calls == _ROUTE_DEPENDENCIES and all(not d.dependencies for d in dependant.dependencies)


def _query_params(dependant: Dependant) -> list[Any]:
    """The query parameters ``dependant`` reads, its dependencies' included."""
    found = list(dependant.query_params)
    for sub in dependant.dependencies:
        found.extend(_query_params(sub))
    return found


class FreshPollMiddleware:
    """Answers a conditional data-sample poll of a fresh, unchanged result with 304 from
    memory (see the module docstring); every other request goes to ``app``.

    ``routes``: the application's routes, searched (once, on the first request) for the
    data-sample route. ``answered`` counts the polls answered here."""

    def __init__(self, app: ASGIApp, state: ServiceState, routes: list[BaseRoute]) -> None:
        self._app = app
        self._state = state
        self._routes = routes
        self._route: BaseRoute | None = None
        #: The query parameters the route reads (by their names in the URL).
        self._narrowing: frozenset[str] = frozenset()
        self.answered = 0

    def _data_sample_route(self) -> BaseRoute | None:
        if self._route is None:
            for route in self._routes:
                if getattr(route, "endpoint", None) is samples.data_sample:
                    dependant = getattr(route, "dependant", None)
                    if dependant is None or not _decides_as_expected(dependant):
                        return None
                    self._narrowing = frozenset(p.alias for p in _query_params(dependant))
                    self._route = route
                    break
        return self._route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET":
            answer = await self._answer(scope)
            if answer is not None:
                response, record = answer
                self._state.audit.record(record)
                self.answered += 1
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _answer(self, scope: Scope) -> tuple[Response, AuditRecord] | None:
        """The 304 and its audit event, or ``None`` when the route must answer."""
        route = self._data_sample_route()
        if route is None:
            return None
        match, child = route.matches(scope)
        if match is not Match.FULL:
            return None
        if scope.get("query_string") and not self._narrowing.isdisjoint(
            QueryParams(scope["query_string"]).keys()
        ):
            return None
        if_none_match = Headers(scope=scope).get("if-none-match")
        if not if_none_match:
            return None
        credentials = await bearer_credentials(HTTPConnection(scope))
        if credentials is None or not credentials.credentials:
            return None
        state = self._state
        key = token_key(credentials.credentials)
        principal = cached_principal(state, key)
        if principal is None:
            return None
        params = child["path_params"]
        namespace, application, vertex = (
            params["namespace"],
            params["application"],
            params["vertex"],
        )
        if cached_decision(state, key, namespace, Permission.READ) is not True:
            return None
        app = state.applications.get(namespace, application)
        if app is None or app.api_version or not has_vertex(app, vertex):
            return None
        fresh = state.coordinator.fresh_answer(app, vertex)
        if fresh is None:
            return None
        _, unchanged = conditional_answer(fresh.result, None, None, if_none_match)
        if unchanged is None:
            return None
        scope.update(child)  # the route's path parameters and the route itself (metrics)
        record = samples.poll_record(
            principal, namespace, application, vertex, fresh, 0, client_of_scope(scope)
        )
        return unchanged, record

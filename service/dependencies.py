"""FastAPI dependencies: the service state, DB sessions, the caller and permission checks.

Authentication failures answer 401 with ``WWW-Authenticate: Bearer``; authorization failures
answer 403 ``forbidden`` and nothing else, so a denied caller learns nothing about what exists.
Authorization runs before any lookup for the same reason (a 404 would reveal names).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.requests import HTTPConnection

from .auth import AuthBackendError, Permission, Principal
from .state import ServiceState

_bearer = HTTPBearer(auto_error=False, description="A bearer token (local token or Kubernetes)")
#: The routes' bearer scheme (the fresh poll's fast path checks the route depends on it).
bearer_scheme = _bearer

UNAUTHORIZED = HTTPException(
    status.HTTP_401_UNAUTHORIZED,
    detail="missing or invalid bearer token",
    headers={"WWW-Authenticate": "Bearer"},
)
FORBIDDEN = HTTPException(status.HTTP_403_FORBIDDEN, detail="forbidden")


async def get_state(request: Request) -> ServiceState:
    """The service's shared state (async: FastAPI runs sync dependencies on the thread
    pool, and a hop per dependency adds up at hundreds of polls per second)."""
    state: ServiceState = request.app.state.sparkglass
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


def get_session(state: StateDep) -> Iterator[Session]:
    """A store session for one request (read-mostly; writes commit explicitly)."""
    with state.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def authenticate(
    state: ServiceState,
    credentials: HTTPAuthorizationCredentials | None,
    audiences: tuple[str, ...] = (),
) -> Principal:
    """The authenticated caller; 401 without a valid token (with ``audiences``: one bound
    to one of them), 503 when the identity provider cannot be asked."""
    if credentials is None or not credentials.credentials:
        raise UNAUTHORIZED
    try:
        principal = (
            state.authenticator.authenticate(credentials.credentials, audiences)
            if audiences
            else state.authenticator.authenticate(credentials.credentials)
        )
    except AuthBackendError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None
    if principal is None:
        raise UNAUTHORIZED
    return principal


def get_principal(state: StateDep, credentials: BearerDep) -> Principal:
    """Dependency form of :func:`authenticate`."""
    return authenticate(state, credentials)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def check(
    state: ServiceState, principal: Principal, namespace: str, permission: Permission
) -> bool:
    """Whether ``principal`` has ``permission`` in ``namespace``; 503 if undecidable."""
    try:
        return state.authenticator.authorize(principal, namespace, permission)
    except AuthBackendError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from None


#: How long the route layer remembers "token -> principal" and "(principal, namespace,
#: permission) -> allowed" so a poll served from memory needs no thread-pool hop. Short on
#: purpose: the authenticators keep their own, configurable caches behind it.
DECISION_TTL_S = 1.0


async def authorized_principal(
    state: ServiceState,
    credentials: HTTPAuthorizationCredentials | None,
    namespace: str,
    permission: Permission,
) -> Principal:
    """401/403/503 like :func:`require`, answering from a one-second in-memory cache on the
    event loop and calling the (possibly blocking) authenticator on the thread pool only on
    a miss; the misses of many pollers at once share one call (:class:`SingleFlight`)."""
    if credentials is None or not credentials.credentials:
        raise UNAUTHORIZED
    key = token_key(credentials.credentials)
    principal = cached_principal(state, key)
    if principal is None:
        principal = await state.principal_calls.run(
            key, functools.partial(authenticate, state, credentials)
        )
        state.principal_cache.set(key, principal, _principal_ttl(principal))
    allowed = cached_decision(state, key, namespace, permission)
    if allowed is None:
        decision_key = (key, namespace, permission)
        allowed = await state.decision_calls.run(
            decision_key, functools.partial(check, state, principal, namespace, permission)
        )
        state.decision_cache.set(decision_key, bool(allowed), DECISION_TTL_S)
    if not allowed:
        raise FORBIDDEN
    return principal


async def bearer_credentials(connection: HTTPConnection) -> HTTPAuthorizationCredentials | None:
    """The request's bearer credentials exactly as the routes' :data:`BearerDep` reads them
    (``None`` without a ``Bearer`` token): the same ``HTTPBearer``."""
    return await _bearer(connection)


def token_key(token: str) -> str:
    """The key of ``token`` in the route layer's caches: its SHA-256, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def cached_principal(state: ServiceState, key: str) -> Principal | None:
    """The principal the route layer's cache holds for the token of ``key``, or ``None``
    (never asks the authenticator)."""
    hit, principal = state.principal_cache.get(key)
    return principal if hit else None


def cached_decision(
    state: ServiceState, key: str, namespace: str, permission: Permission
) -> bool | None:
    """The cached decision whether the token of ``key`` has ``permission`` in
    ``namespace``, or ``None`` when none is cached (never asks the authenticator)."""
    hit, allowed = state.decision_cache.get((key, namespace, permission))
    return bool(allowed) if hit else None


def _principal_ttl(principal: Principal) -> float:
    """Seconds the route layer may remember ``principal``: :data:`DECISION_TTL_S`, and never
    past its credential's expiry (an expired token gets 401 at once)."""
    if principal.expires_at is None:
        return DECISION_TTL_S
    return min(DECISION_TTL_S, (principal.expires_at - time.time() * 1000) / 1000)


def require(
    permission: Permission,
) -> Callable[[str, ServiceState, HTTPAuthorizationCredentials | None], Principal]:
    """A dependency that answers 403 unless the caller has ``permission`` in the path's
    ``namespace``."""

    def dependency(namespace: str, state: StateDep, credentials: BearerDep) -> Principal:
        # Authentication and authorization in one dependency: one thread-pool hop, not two.
        principal = authenticate(state, credentials)
        if not check(state, principal, namespace, permission):
            raise FORBIDDEN
        return principal

    return dependency


ReaderDep = Annotated[Principal, Depends(require(Permission.READ))]
AdminDep = Annotated[Principal, Depends(require(Permission.ADMIN))]

"""The audit trail: who read, triggered, listed, registered or deleted what, and who was
refused (401/403), when, from where and how many records they got.

Events are queued in memory and written in batches every ``audit_flush_seconds`` by a
background thread (and on shutdown), so a poll costs no extra database write in its own
request: 200 clients polling every 3 s would otherwise add ~70 writes/s to SQLite.

The queue is bounded (``audit_buffer_events``): while the database refuses writes, the
oldest events beyond the bound are dropped, counted in
``sparkglass_audit_events_dropped_total`` and logged once per flush, so a failing database
costs a bounded amount of memory and the loss is visible.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import deque
from typing import TYPE_CHECKING

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException

from .store import repository
from .store.repository import AuditRecord

if TYPE_CHECKING:
    from .state import ServiceState

log = logging.getLogger(__name__)

#: Default of ``Settings.audit_buffer_events``.
DEFAULT_BUFFER_EVENTS = 10_000

#: Who a 401 is recorded as: no principal could be established.
ANONYMOUS = "anonymous"

_MAX_DETAIL = 512
_MAX_CLIENT = 64


class AuditWriter:
    """Buffers :class:`AuditRecord` events (at most ``max_events``) and flushes them to the
    store.

    ``registry``: where ``sparkglass_audit_events_dropped_total`` is registered (the
    service's metrics registry; a private one when ``None``). Raises ``ValueError`` when
    ``max_events`` is below 1 or ``flush_seconds`` not positive.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        flush_seconds: float = 1.0,
        max_events: int = DEFAULT_BUFFER_EVENTS,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if max_events < 1:
            raise ValueError(f"audit_buffer_events must be at least 1, got {max_events}")
        if flush_seconds <= 0:
            raise ValueError(f"audit_flush_seconds must be above 0, got {flush_seconds}")
        self._sessions = sessions
        self._flush_seconds = flush_seconds
        self._max = max_events
        self._pending: deque[AuditRecord] = deque()
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dropped_total = 0
        self._dropped_unlogged = 0
        self._dropped_counter = Counter(
            "sparkglass_audit_events_dropped",
            "Audit events dropped because the in-memory buffer was full while the database "
            "could not take them.",
            registry=registry if registry is not None else CollectorRegistry(),
        )

    @property
    def pending(self) -> int:
        """How many events wait to be written (at most ``max_events``)."""
        with self._lock:
            return len(self._pending)

    @property
    def dropped(self) -> int:
        """How many events were dropped since start."""
        with self._lock:
            return self._dropped_total

    @property
    def max_events(self) -> int:
        """The buffer's bound."""
        return self._max

    def record(self, event: AuditRecord) -> None:
        """Queue one event (written within ``flush_seconds``); drops the oldest queued event
        when the buffer is full."""
        with self._lock:
            self._pending.append(event)
            self._trim_locked()

    def note(
        self,
        actor: str,
        action: str,
        *,
        namespace: str,
        application: str = "",
        vertex: str = "",
        status: str | None = None,
        detail: str | None = None,
        client: str | None = None,
        round_id: str | None = None,
        record_count: int = 0,
    ) -> None:
        """Queue an event that is not a sample read (admin actions, listings, denials)."""
        self.record(
            AuditRecord(
                actor=actor[:253],
                action=action,
                namespace=namespace[:253],
                application=application[:253],
                vertex=vertex[:63],
                round_id=round_id,
                record_count=record_count,
                status=status,
                at=repository.now_ms(),
                client=None if client is None else client[:_MAX_CLIENT],
                detail=None if detail is None else detail[:_MAX_DETAIL],
            )
        )

    def flush(self) -> int:
        """Write every queued event now; returns how many were written (0 when the database
        failed: the events stay queued, within the bound). Waits for a flush under way in
        another thread, so that every event queued before the call is written when it
        returns (the audit route flushes, then reads)."""
        with self._flush_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        with self._lock:
            batch = list(self._pending)
            self._pending.clear()
        if batch:
            try:
                with self._sessions.begin() as session:
                    written = repository.add_audit_events(session, batch)
            except Exception as exc:
                # Keep the events for the next attempt rather than losing the trail, but
                # only as many as the bound allows (the newest win).
                # First line only: SQLAlchemy appends the statement and every row.
                reason = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                log.warning("audit flush of %d events failed; will retry: %s", len(batch), reason)
                with self._lock:
                    self._pending.extendleft(reversed(batch))
                    self._trim_locked()
                written = 0
        else:
            written = 0
        self._log_drops()
        return written

    def start(self) -> None:
        """Start the background flusher thread."""
        self._thread = threading.Thread(target=self._run, name="sparkglass-audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the flusher and write what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_seconds):
            self.flush()

    def _trim_locked(self) -> None:
        excess = len(self._pending) - self._max
        if excess <= 0:
            return
        for _ in range(excess):
            self._pending.popleft()
        self._dropped_total += excess
        self._dropped_unlogged += excess
        self._dropped_counter.inc(excess)

    def _log_drops(self) -> None:
        # One line per flush interval, not per event: a failing database under load would
        # otherwise flood the log.
        with self._lock:
            newly, total = self._dropped_unlogged, self._dropped_total
            self._dropped_unlogged = 0
        if newly:
            log.error(
                "audit buffer full (%d events): dropped %d events (%d since start) while the "
                "database could not take them",
                self._max,
                newly,
                total,
            )


def client_of(request: Request) -> str | None:
    """The caller's address (host only: the port says nothing about who it is)."""
    return request.client.host if request.client else None


async def audit_denials(request: Request, exc: Exception) -> Response:
    """Exception handler of :class:`HTTPException`: records every 401 and 403 (who, from
    where, which route) in the audit trail, then answers exactly like FastAPI's default."""
    assert isinstance(exc, HTTPException)
    if exc.status_code in (401, 403):
        state: ServiceState | None = getattr(request.app.state, "sparkglass", None)
        if state is not None:
            try:
                await _record_denial(state, request, exc.status_code)
            except Exception:  # an audit problem must not change the answer
                log.exception("could not audit a %d", exc.status_code)
    return await http_exception_handler(request, exc)


async def _record_denial(state: ServiceState, request: Request, code: int) -> None:
    params = request.path_params
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    actor = ANONYMOUS
    if token:
        digest = hashlib.sha256(token.encode()).hexdigest()
        # The first hex digits let an admin match a refused token to `sparkglass token
        # list` or a tokens file without the trail holding anything usable as a token.
        fingerprint = f"token sha256:{digest[:12]}"
        if code == 403:
            actor = await _actor_of(state, digest, token)
    else:
        fingerprint = "no token"
    state.audit.note(
        actor,
        "denied",
        namespace=str(params.get("namespace", "")),
        application=str(params.get("application", "")),
        vertex=str(params.get("vertex", "")),
        status=str(code),
        client=client_of(request),
        detail=f"{request.method} {request.url.path} ({fingerprint})",
    )


async def _actor_of(state: ServiceState, digest: str, token: str) -> str:
    # A 403 means the token was valid: the route layer's cache usually still holds its
    # principal; otherwise ask the authenticator again (cached there in Kubernetes mode).
    hit, principal = state.principal_cache.get(digest)
    if hit and principal is not None:
        return principal.user
    try:
        principal = await run_in_threadpool(state.authenticator.authenticate, token)
    except Exception:
        return ANONYMOUS
    return principal.user if principal is not None else ANONYMOUS

"""The audit trail: who read, triggered, listed, registered or deleted what, and who was
refused (401/403), when, from where and how many records they got.

Events are queued in memory and written in batches by a background thread
(:class:`AuditWriter`), so a poll costs no extra database write in its own request, and
identical reads are coalesced, so the store grows with rounds and principals, not with
polls. Triggers, writes, admin actions and denials are never coalesced, and a bounded queue
drops reads first, so no request can hide or push out a refusal. The rules:
docs/security.md, "The audit trail"; the settings: service/README.md, "Audit trail".
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import http_exception_handler
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException
from starlette.types import Scope

from .store import repository
from .store.repository import AuditRecord

if TYPE_CHECKING:
    from .state import ServiceState

log = logging.getLogger(__name__)

#: Default of ``Settings.audit_buffer_events``.
DEFAULT_BUFFER_EVENTS = 10_000
#: Default of ``Settings.audit_read_window_seconds``.
DEFAULT_READ_WINDOW_SECONDS = 60.0
#: Default of ``Settings.audit_read_buffer_bytes``.
DEFAULT_READ_BUFFER_BYTES = 4 * 1024 * 1024

#: Who a 401 is recorded as: no principal could be established.
ANONYMOUS = "anonymous"

#: The only actions that are coalesced: reads of samples and listings. Everything else
#: (trigger, register, delete, token-*, denied) is one event per request.
COALESCED_ACTIONS = frozenset({"read", "list"})
#: Statuses never coalesced, whatever the action says (a refusal is always its own event).
_NEVER_COALESCED_STATUSES = frozenset({"401", "403", "429"})

#: Python's cost of one open window beyond its strings (the key tuple, the first event, the
#: window object and the dict slot: about 650 bytes with tracemalloc for short names, so
#: the estimate errs high and the bound holds).
_WINDOW_OVERHEAD_BYTES = 1024

_MAX_DETAIL = 512
_MAX_CLIENT = 64

_Key = tuple[str, str, str, str, str, str | None, str | None, str | None, str | None]


def _key(event: AuditRecord) -> _Key:
    return (
        event.actor,
        event.action,
        event.namespace,
        event.application,
        event.vertex,
        event.round_id,
        event.status,
        event.client,
        event.detail,
    )


def _window_bytes(event: AuditRecord) -> int:
    # UTF-8 bytes, not characters: a key of non-ASCII names holds up to 4 bytes per character.
    return _WINDOW_OVERHEAD_BYTES + sum(len((part or "").encode()) for part in _key(event))


class _Window:
    """Identical reads since ``first`` (``opened``: monotonic seconds)."""

    __slots__ = ("count", "first", "last_at", "opened", "records", "size")

    def __init__(self, first: AuditRecord, opened: float, size: int) -> None:
        self.first = first
        self.opened = opened
        self.count = 1
        self.records = first.record_count
        self.last_at = first.at
        self.size = size

    def event(self) -> AuditRecord:
        if self.count == 1:
            return self.first
        return dataclasses.replace(
            self.first,
            record_count=self.records,
            request_count=self.count,
            last_at=self.last_at,
        )


def coalescible(event: AuditRecord) -> bool:
    """Whether ``event`` may be merged with identical ones: successful reads and listings
    only, never a refusal, write or trigger."""
    return event.action in COALESCED_ACTIONS and event.status not in _NEVER_COALESCED_STATUSES


class AuditWriter:
    """Buffers :class:`AuditRecord` events (at most ``max_events`` waiting to be written),
    coalesces identical reads over ``read_window_seconds`` (open windows bounded by
    ``read_buffer_bytes``) and flushes them to the store.

    ``read_window_seconds`` 0 turns coalescing off (one event per read). ``registry``:
    where ``sparkglass_audit_events_dropped_total`` is registered (the service's metrics
    registry; a private one when ``None``). Raises ``ValueError`` when ``max_events`` is
    below 1, ``flush_seconds`` not positive, or ``read_window_seconds`` /
    ``read_buffer_bytes`` negative.

    Events are written every ``audit_flush_seconds`` by a background thread (and on
    shutdown), so a poll costs no extra database write in its own request: 200 clients
    polling every 3 s would otherwise add ~70 writes/s to SQLite.

    Reads are coalesced (``audit_read_window_seconds``, 60 s by default): repeated identical
    reads, the same principal reading the same round of the same vertex (or the same
    listing) from the same address with the same outcome, become one event per window
    carrying how many requests it stands for (``request_count``) and the first and last time
    (``at``, ``last_at``); ``record_count`` is the sum of the records they were sent (a
    ``304`` sends none). A page polling a shared result once a second then costs one row a
    minute instead of sixty. Only ``read`` and ``list`` events are coalesced: triggers,
    writes, admin actions and denials (401/403) are each queued as their own event at once,
    whatever reads surround them, so no request can hide a refusal or a write inside a
    count. When the open windows reach ``audit_read_buffer_bytes`` the oldest window is
    closed early (queued as an event; nothing is lost, that key just coalesces less).
    Windows are closed when they end, when the audit trail is read in this process
    (:meth:`flush`) and on shutdown.

    The queue of events waiting to be written is bounded (``audit_buffer_events``): while
    the database refuses writes, events beyond the bound are dropped, counted in
    ``sparkglass_audit_events_dropped_total`` (a read window as the reads it stood for) and
    logged once per flush, so a failing database costs a bounded amount of memory and the
    loss is visible. Reads are dropped first (oldest first); a refusal, write or trigger is
    dropped only when the queue holds nothing else, so a flood of reads cannot push a
    denial out of the queue.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        flush_seconds: float = 1.0,
        max_events: int = DEFAULT_BUFFER_EVENTS,
        registry: CollectorRegistry | None = None,
        *,
        read_window_seconds: float = DEFAULT_READ_WINDOW_SECONDS,
        read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES,
    ) -> None:
        if max_events < 1:
            raise ValueError(f"audit_buffer_events must be at least 1, got {max_events}")
        if flush_seconds <= 0:
            raise ValueError(f"audit_flush_seconds must be above 0, got {flush_seconds}")
        if read_window_seconds < 0:
            raise ValueError(
                f"audit_read_window_seconds must be at least 0, got {read_window_seconds}"
            )
        if read_buffer_bytes < 0:
            raise ValueError(f"audit_read_buffer_bytes must be at least 0, got {read_buffer_bytes}")
        self._sessions = sessions
        self._flush_seconds = flush_seconds
        self._max = max_events
        self._window_s = read_window_seconds
        self._max_window_bytes = read_buffer_bytes
        #: Waiting to be written: reads (dropped first) and everything else.
        self._pending_reads: deque[AuditRecord] = deque()
        self._pending: deque[AuditRecord] = deque()
        #: Open read windows, oldest first (insertion order).
        self._windows: dict[_Key, _Window] = {}
        self._window_bytes = 0
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
        """How many events wait to be written (at most ``max_events``; open read windows
        not included)."""
        with self._lock:
            return len(self._pending) + len(self._pending_reads)

    @property
    def open_windows(self) -> int:
        """How many read windows are open (coalescing identical reads)."""
        with self._lock:
            return len(self._windows)

    @property
    def window_bytes(self) -> int:
        """Estimated bytes held by open read windows (at most ``read_buffer_bytes``)."""
        with self._lock:
            return self._window_bytes

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
        """Queue one event (written within ``flush_seconds``), or, for a read or listing,
        count it in its open window (written when the window closes). Drops the oldest
        queued read (or, with none queued, the oldest event) when the buffer is full."""
        with self._lock:
            if not coalescible(event):
                self._pending.append(event)
            elif self._window_s > 0:
                self._coalesce_locked(event, time.monotonic())
            else:
                self._pending_reads.append(event)
            self._trim_locked()

    def _coalesce_locked(self, event: AuditRecord, now: float) -> None:
        key = _key(event)
        window = self._windows.get(key)
        if window is not None and now - window.opened < self._window_s:
            window.count += 1
            window.records += event.record_count
            window.last_at = max(window.last_at, event.at)
            return
        if window is not None:  # ended: written, and a new window opens for this read
            self._close_locked(key)
        size = _window_bytes(event)
        if size > self._max_window_bytes:  # no room at all: its own event
            self._pending_reads.append(event)
            return
        while self._windows and self._window_bytes + size > self._max_window_bytes:
            self._close_locked(next(iter(self._windows)))  # the oldest window, early
        self._windows[key] = _Window(event, now, size)
        self._window_bytes += size

    def _close_locked(self, key: _Key) -> None:
        window = self._windows.pop(key)
        self._window_bytes -= window.size
        self._pending_reads.append(window.event())

    def _close_windows(self, everything: bool) -> None:
        """Queue the windows that ended (``everything``: all of them)."""
        now = time.monotonic()
        with self._lock:
            ended = [
                key
                for key, window in self._windows.items()
                if everything or now - window.opened >= self._window_s
            ]
            for key in ended:
                self._close_locked(key)
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
        """Close every open read window and write every queued event now; returns how many
        were written (0 when the database failed: the events stay queued, within the
        bound). Waits for a flush under way in another thread, so that every event recorded
        before the call is written when it returns (the audit route flushes, then reads)."""
        with self._flush_lock:
            self._close_windows(everything=True)
            return self._flush_locked()

    def _flush_locked(self) -> int:
        with self._lock:
            others = list(self._pending)
            reads = list(self._pending_reads)
            self._pending.clear()
            self._pending_reads.clear()
        written = 0
        if others or reads:
            batch = sorted(others + reads, key=lambda e: e.at)
            try:
                with self._sessions.begin() as session:
                    written = repository.add_audit_events(session, batch)
            except Exception as exc:
                # Keep the events for the next attempt rather than losing the trail, but
                # only as many as the bound allows (reads go first).
                # First line only: SQLAlchemy appends the statement and every row.
                reason = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
                log.warning("audit flush of %d events failed; will retry: %s", len(batch), reason)
                with self._lock:
                    self._pending.extendleft(reversed(others))
                    self._pending_reads.extendleft(reversed(reads))
                    self._trim_locked()
        self._log_drops()
        return written

    def start(self) -> None:
        """Start the background flusher thread."""
        self._thread = threading.Thread(target=self._run, name="sparkglass-audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the flusher and write what is left (open read windows included)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_seconds):
            with self._flush_lock:
                self._close_windows(everything=False)
                self._flush_locked()

    def _trim_locked(self) -> None:
        excess = len(self._pending) + len(self._pending_reads) - self._max
        if excess <= 0:
            return
        lost = 0
        for _ in range(excess):
            # Reads first: a flood of reads must not push a refusal or a write out.
            dropped = (self._pending_reads or self._pending).popleft()
            # A closed read window stands for request_count reads: all of them are lost.
            lost += max(1, dropped.request_count or 1)
        self._dropped_total += lost
        self._dropped_unlogged += lost
        self._dropped_counter.inc(lost)

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
    return client_of_scope(request.scope)


def client_of_scope(scope: Scope) -> str | None:
    """:func:`client_of` from an ASGI ``scope`` (for pure ASGI components)."""
    client = scope.get("client")
    return client[0][:_MAX_CLIENT] if client else None  # type: ignore[no-any-return]


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

"""The audit trail: one event for every sample read or triggered (who, what, when, how many).

Events are queued in memory and written in batches every ``audit_flush_seconds`` by a
background thread (and on shutdown), so a poll costs no extra database write in its own
request: 200 clients polling every 3 s would otherwise add ~70 writes/s to SQLite.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from .store import repository
from .store.repository import AuditRecord

log = logging.getLogger(__name__)


class AuditWriter:
    """Buffers :class:`AuditRecord` events and flushes them to the store."""

    def __init__(self, sessions: sessionmaker[Session], flush_seconds: float = 1.0) -> None:
        self._sessions = sessions
        self._flush_seconds = flush_seconds
        self._pending: list[AuditRecord] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, event: AuditRecord) -> None:
        """Queue one event (written within ``flush_seconds``)."""
        with self._lock:
            self._pending.append(event)

    def flush(self) -> int:
        """Write every queued event now; returns how many were written."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return 0
        try:
            with self._sessions.begin() as session:
                return repository.add_audit_events(session, batch)
        except Exception:
            # Keep the events for the next attempt rather than losing the trail.
            log.exception("audit flush failed; will retry")
            with self._lock:
                self._pending[:0] = batch
            return 0

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

"""Retention: a background sweep deleting rounds, records, audit events and round leases
older than ``retention_seconds``."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from .store import repository
from .store.repository import PurgeCounts

log = logging.getLogger(__name__)


def sweep(sessions: sessionmaker[Session], retention_seconds: float) -> PurgeCounts:
    """Delete everything older than ``retention_seconds`` now; returns the counts."""
    cutoff = repository.now_ms() - int(retention_seconds * 1000)
    with sessions.begin() as session:
        counts = repository.purge_older_than(session, cutoff)
    if counts.rounds or counts.audit_events or counts.leases:
        log.info(
            "retention: deleted %d rounds, %d records, %d audit events, %d round leases",
            counts.rounds,
            counts.records,
            counts.audit_events,
            counts.leases,
        )
    return counts


class RetentionSweeper:
    """Runs :func:`sweep` every ``every_seconds`` on a daemon thread."""

    def __init__(
        self, sessions: sessionmaker[Session], retention_seconds: float, every_seconds: float
    ) -> None:
        self._sessions = sessions
        self._retention = retention_seconds
        self._every = every_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Sweep once now, then periodically."""
        self._thread = threading.Thread(target=self._run, name="sparkglass-retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            try:
                sweep(self._sessions, self._retention)
            except Exception:
                log.exception("retention sweep failed")
            if self._stop.wait(self._every):
                return

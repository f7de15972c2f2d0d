"""Saving a DataSample's full result in the sparkglass service's store.

The status holds a byte-bounded part (``sample_status``); the whole result goes to the
service's database with ``sparkglass.service.store.save_round``, keyed by the round id, so
saving twice (an operator restart between saving and writing the status) replaces the same
round instead of adding a second one. The service serves it at :func:`results_url`.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from sparkglass.runtime.contract.sample_result import DataSampleResult

#: Annotation the service sets on the DataSamples it creates: its own round id.
ROUND_ID_ANNOTATION = "sparkglass.io/round-id"


class ResultStore:
    """The service store at a SQLAlchemy URL (opened lazily, migrations applied once)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._sessions: Any = None
        # Saves run in worker threads; the first ones must not migrate the database twice.
        self._open_lock = threading.Lock()

    def _open(self) -> Any:
        with self._open_lock:
            if self._sessions is None:
                from sparkglass.service.store import open_store

                self._sessions = open_store(self._url)
            return self._sessions

    async def save(
        self,
        *,
        namespace: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        round_id: str,
        sample_name: str,
        started_at_ms: int | None,
    ) -> str:
        """Save (or replace) the round ``round_id``; returns the store's round id.

        Raises whatever the database raises (the caller retries: it is transient).
        """
        return await asyncio.to_thread(
            self._save_sync,
            namespace,
            application,
            vertex,
            result,
            round_id,
            sample_name,
            started_at_ms,
        )

    def _save_sync(
        self,
        namespace: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        round_id: str,
        sample_name: str,
        started_at_ms: int | None,
    ) -> str:
        sessions = self._open()
        # Imported after _open(), which imports SQLAlchemy under its lock: saves run in
        # threads, and two threads importing SQLAlchemy at once can see it half-initialized.
        from sqlalchemy.exc import IntegrityError

        from sparkglass.service.store import save_round

        # The first rounds of an application saved at once (several DataSamples finishing
        # together) race to create its row: the loser's transaction fails on the unique key,
        # and a fresh one finds the winner's row. Not worth a DataSample retry.
        for attempt in Retrying(
            retry=retry_if_exception_type(IntegrityError), stop=stop_after_attempt(3), reraise=True
        ):
            with attempt, sessions.begin() as session:
                return str(
                    save_round(
                        session,
                        namespace=namespace,
                        application=application,
                        vertex=vertex,
                        result=result,
                        round_id=round_id,
                        external_ref=sample_name,
                        triggered_by="sparkglass-operator",
                        started_at=started_at_ms,
                    )
                )
        raise AssertionError("unreachable: Retrying re-raises the last error")


def results_url(service_url: str, namespace: str, application: str, round_id: str) -> str:
    """The service URL of a stored round's full result."""
    return (
        f"{service_url.rstrip('/')}/api/v1/namespaces/{namespace}/applications/"
        f"{application}/rounds/{round_id}"
    )

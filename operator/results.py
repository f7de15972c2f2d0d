"""Saving a DataSample's full result in the sparkglass service's store, keyed by its uid.

The status holds a byte-bounded part (``sparkglass.runtime.contract.datasample_status``);
the whole result goes to the service's database with ``sparkglass.service.store.save_round``.
Which round: the one bound to the DataSample's ``metadata.uid`` (the service binds each
DataSample it creates to its round as soon as the API server answers the creation), else a
round of its own whose id is the uid (a DataSample made with kubectl). The API server gives
every object its uid, no client chooses one, and a DataSample's spec cannot change: so a
result lands only in its own DataSample's round, and saving twice (an operator restart
between saving and writing the status) replaces it. The service serves it at
:func:`results_url`.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import structlog
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from sparkglass.runtime.contract.sample_result import DataSampleResult

log = structlog.get_logger(__name__)


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

    def warm(self) -> None:
        """Open the store now (imports SQLAlchemy and Alembic, applies migrations: seconds, far
        more on a busy machine), so that the first round's save does not wait on it. Failures
        are logged, not raised: the first save opens the store again and reports them."""
        try:
            self._open()
        except Exception as exc:
            log.warning("the result store cannot be opened yet", error=str(exc))

    async def save(
        self,
        *,
        namespace: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        uid: str,
        name: str,
        started_at_ms: int | None,
        request_key: str,
    ) -> str:
        """Save (or replace) the result of the DataSample ``name`` of ``metadata.uid``
        ``uid``; returns the store's round id (module docstring). ``request_key``: the
        DataSample's ``RoundRequest.key()``: a round of the DataSample's own (not one the
        service started and bound to it) is stored as its answer, never a plain poll's
        (whatever it asked: its limits alone may narrow it). Raises
        :class:`RoundIdConflict` (nothing written) when that round belongs to another
        application or vertex, and whatever the database raises (transient)."""
        return await asyncio.to_thread(
            self._save_sync,
            namespace,
            application,
            vertex,
            result,
            uid,
            name,
            started_at_ms,
            request_key,
        )

    def _save_sync(
        self,
        namespace: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        uid: str,
        name: str,
        started_at_ms: int | None,
        request_key: str,
    ) -> str:
        sessions = self._open()
        # Imported after _open(), which imports SQLAlchemy under its lock: saves run in
        # threads, and two threads importing SQLAlchemy at once can see it half-initialized.
        from sqlalchemy.exc import IntegrityError

        from sparkglass.service.store import repository

        # The first rounds of an application saved at once (several DataSamples finishing
        # together) race to create its row: the loser's transaction fails on the unique key,
        # and a fresh one finds the winner's row. Not worth a DataSample retry.
        for attempt in Retrying(
            retry=retry_if_exception_type(IntegrityError), stop=stop_after_attempt(3), reraise=True
        ):
            with attempt, sessions.begin() as session:
                bound = repository.round_of_datasample(session, uid)
                round_id = bound.id if bound is not None else uid
                try:
                    saved = repository.save_round(
                        session,
                        namespace=namespace,
                        application=application,
                        vertex=vertex,
                        result=result,
                        round_id=round_id,
                        external_ref=name,
                        triggered_by="sparkglass-operator",
                        started_at=started_at_ms,
                        # The service's round stays the plain round it started.
                        request_key=(
                            None
                            if bound is not None
                            else repository.datasample_round_key(request_key)
                        ),
                    )
                except repository.RoundOwnershipError as exc:
                    raise RoundIdConflict(str(exc)) from None
                if bound is None:
                    repository.bind_datasample(session, str(saved), uid)
                return str(saved)
        raise AssertionError("unreachable: Retrying re-raises the last error")


class RoundIdConflict(Exception):
    """The round a DataSample's result would be saved in belongs to another application or
    vertex in the store (``save_round`` refused it; nothing was written)."""


def results_url(service_url: str, namespace: str, application: str, round_id: str) -> str:
    """The service URL of a stored round's full result."""
    return (
        f"{service_url.rstrip('/')}/api/v1/namespaces/{namespace}/applications/"
        f"{application}/rounds/{round_id}"
    )

"""Saving a DataSample's full result in the sparkglass service's store.

The status holds a byte-bounded part (``sparkglass.runtime.contract.datasample_status``);
the whole result goes to the service's database with ``sparkglass.service.store.save_round``,
keyed by the round id, so saving twice (an operator restart between saving and writing the
status) replaces the same round instead of adding a second one. The service serves it at
:func:`results_url`.

Which round id: the annotation ``sparkglass.io/round-id`` is user-settable, so it is only a
claim. It is honoured when the store shows that the service created this very DataSample
for that round (:func:`claim_is_bound`); otherwise the driver's round id is used. Either
way ``save_round`` refuses a row that belongs to another application or vertex.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import structlog
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from sparkglass.runtime.contract.sample_result import DataSampleResult

log = structlog.get_logger(__name__)

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
        claimed_round_id: str | None,
        sample: SampleIdentity,
        started_at_ms: int | None,
    ) -> str:
        """Save (or replace) the round; returns the store's round id.

        ``claimed_round_id`` (the DataSample's round-id annotation) is used only when
        :func:`claim_is_bound`; otherwise ``result.round_id`` (the driver's), else the
        DataSample's uid. Raises when that id belongs to another
        application or vertex (:class:`RoundIdConflict`), and whatever the database raises
        (transient).
        """
        return await asyncio.to_thread(
            self._save_sync,
            namespace,
            application,
            vertex,
            result,
            claimed_round_id,
            sample,
            started_at_ms,
        )

    def _save_sync(
        self,
        namespace: str,
        application: str,
        vertex: str,
        result: DataSampleResult,
        claimed_round_id: str | None,
        sample: SampleIdentity,
        started_at_ms: int | None,
    ) -> str:
        sessions = self._open()
        # Imported after _open(), which imports SQLAlchemy under its lock: saves run in
        # threads, and two threads importing SQLAlchemy at once can see it half-initialized.
        from sqlalchemy.exc import IntegrityError

        from sparkglass.service.store import save_round
        from sparkglass.service.store.repository import RoundOwnershipError

        # The first rounds of an application saved at once (several DataSamples finishing
        # together) race to create its row: the loser's transaction fails on the unique key,
        # and a fresh one finds the winner's row. Not worth a DataSample retry.
        for attempt in Retrying(
            retry=retry_if_exception_type(IntegrityError), stop=stop_after_attempt(3), reraise=True
        ):
            with attempt, sessions.begin() as session:
                bound = claimed_round_id is not None and claim_is_bound(
                    session,
                    namespace=namespace,
                    application=application,
                    vertex=vertex,
                    round_id=claimed_round_id,
                    sample=sample,
                )
                if claimed_round_id is not None and not bound:
                    log.warning(
                        "round-id annotation ignored: the service did not create this DataSample "
                        "for that round",
                        namespace=namespace,
                        name=sample.name,
                        application=application,
                        claimed=claimed_round_id,
                    )
                try:
                    saved = save_round(
                        session,
                        namespace=namespace,
                        application=application,
                        vertex=vertex,
                        result=result,
                        round_id=claimed_round_id if bound else (result.round_id or sample.uid),
                        external_ref=sample.name,
                        triggered_by="sparkglass-operator",
                        started_at=started_at_ms,
                    )
                except RoundOwnershipError as exc:
                    raise RoundIdConflict(str(exc)) from None
                return str(saved)
        raise AssertionError("unreachable: Retrying re-raises the last error")


class RoundIdConflict(Exception):
    """The round id a DataSample would be saved under belongs to another application or
    vertex in the store (``save_round`` refused it; nothing was written)."""


@dataclass(frozen=True)
class SampleIdentity:
    """What the API server (not the user) fixed about a DataSample: its name, its uid, and
    ``metadata.creationTimestamp`` in ms since the epoch (second precision)."""

    name: str
    uid: str
    created_ms: int


def claim_is_bound(
    session: Any,
    *,
    namespace: str,
    application: str,
    vertex: str,
    round_id: str,
    sample: SampleIdentity,
) -> bool:
    """Whether the service created the DataSample ``sample`` for its round ``round_id``.

    True when all hold: the store has the round, for this (namespace, application) and
    vertex; the DataSample bears the name the service gives that round's DataSample
    (``datasample_name``: names are unique in a namespace, so while the service's DataSample
    exists no other can bear it); and the DataSample was created before the round ended (a
    DataSample re-created under that name after the service's one was deleted, which only
    happens once the round is over, cannot rewrite it).
    """
    from sparkglass.runtime.contract.sample_result import SampleStatus
    from sparkglass.service.execution.kubernetes import datasample_name
    from sparkglass.service.store import get_application, get_round

    if sample.name != datasample_name(application, vertex, round_id):
        return False
    row = get_round(session, round_id)
    app = get_application(session, namespace, application)
    if row is None or app is None or row.application_id != app.id or row.vertex != vertex:
        return False
    if row.status == SampleStatus.PENDING.value:
        return True
    return row.end_timestamp is not None and sample.created_ms < row.end_timestamp


def results_url(service_url: str, namespace: str, application: str, round_id: str) -> str:
    """The service URL of a stored round's full result."""
    return (
        f"{service_url.rstrip('/')}/api/v1/namespaces/{namespace}/applications/"
        f"{application}/rounds/{round_id}"
    )

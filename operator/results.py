"""Saving a DataSample's full result in the sparkglass service's store.

The status holds a byte-bounded part (``sparkglass.runtime.contract.datasample_status``);
the whole result goes to the service's database with ``sparkglass.service.store.save_round``,
keyed by the round id, so saving twice (an operator restart between saving and writing the
status) replaces the same round instead of adding a second one. The service serves it at
:func:`results_url`.

Which round id: the annotation ``sparkglass.io/round-id`` is user-settable, so it is only a
claim. It is honoured when the store shows that the service created this very DataSample
for that round (:func:`claim_is_bound`: the round's row holds the DataSample's uid, which
the service recorded when it created it); otherwise the driver's round id is used. Either
way the save is refused (:class:`RoundIdConflict`) when that row belongs to another
application or vertex, or is bound to another DataSample's uid: round ids are not secret,
and a row the service bound is written by that DataSample's save or by the service only.
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
        DataSample's uid. Raises :class:`RoundIdConflict` (nothing written) when that id
        belongs to another application or vertex, or is bound to another DataSample's uid,
        and whatever the database raises (transient).
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
                        "(name and uid) for that round",
                        namespace=namespace,
                        name=sample.name,
                        uid=sample.uid,
                        created_ms=sample.created_ms,
                        application=application,
                        claimed=claimed_round_id,
                    )
                round_id = (
                    claimed_round_id
                    if bound and claimed_round_id is not None
                    else (result.round_id or sample.uid)
                )
                _check_not_bound_elsewhere(session, round_id, sample)
                try:
                    saved = save_round(
                        session,
                        namespace=namespace,
                        application=application,
                        vertex=vertex,
                        result=result,
                        round_id=round_id,
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
    ``metadata.creationTimestamp`` in ms since the epoch (second precision; logged only: the
    claim is bound by the uid)."""

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
    (``datasample_name``); and its uid is the one the service recorded in the round's row
    when the API server answered its creation (``repository.bind_datasample``). The uid is
    what binds: a name can be taken again as soon as its object is deleted, even while the
    round runs, so whoever may delete and create DataSamples could otherwise put one of their
    own (other ``filter``/``columns``) under the service's name and have its result saved as
    the service's round. A round without a recorded uid (a service older than the binding)
    is claimed by no DataSample.
    """
    from sparkglass.service.execution.kubernetes import datasample_name
    from sparkglass.service.store import get_application, get_round

    if sample.name != datasample_name(application, vertex, round_id):
        return False
    row = get_round(session, round_id)
    app = get_application(session, namespace, application)
    if row is None or app is None or row.application_id != app.id or row.vertex != vertex:
        return False
    return row.datasample_uid is not None and row.datasample_uid == sample.uid


def _check_not_bound_elsewhere(session: Any, round_id: str, sample: SampleIdentity) -> None:
    """Raise :class:`RoundIdConflict` when the row ``round_id`` is bound to another
    DataSample's uid. The id a save falls back to is the driver's (the application's own
    code chooses it) and round ids are not secret, so without this a DataSample whose claim
    was refused could still land on the service's round by way of its driver's answer."""
    from sparkglass.service.store import get_round

    row = get_round(session, round_id)
    if row is not None and row.datasample_uid is not None and row.datasample_uid != sample.uid:
        raise RoundIdConflict(
            f"round {round_id!r} belongs to another DataSample (uid {row.datasample_uid}), "
            f"not to {sample.name} (uid {sample.uid}): not overwritten"
        )


def results_url(service_url: str, namespace: str, application: str, round_id: str) -> str:
    """The service URL of a stored round's full result."""
    return (
        f"{service_url.rstrip('/')}/api/v1/namespaces/{namespace}/applications/"
        f"{application}/rounds/{round_id}"
    )

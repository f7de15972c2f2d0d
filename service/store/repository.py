"""Store operations: every read and write of the store goes through these functions.

Each function takes an open :class:`~sqlalchemy.orm.Session` and leaves committing to the
caller (``with sessions.begin() as session: ...``), so several calls can share one
transaction. Times are ms since the epoch.

The operator saves a finished round with :func:`save_round`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from sparkglass.crds.datasample import SPARKGLASS_API_VERSION
from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
)

from .cipher import StoreCipher, StoreKeyInvalid, StoreKeyMissing, cipher_of
from .orm import ApiToken, Application, AuditEvent, Round, SampleRecord, Vertex, VertexLease

#: Roles a local-mode token can hold, weakest first.
ROLES = ("viewer", "sampler", "admin")


def now_ms() -> int:
    """The current time in ms since the epoch."""
    return int(time.time() * 1000)


# --------------------------------------------------------------------------- applications


def upsert_application(
    session: Session,
    namespace: str,
    name: str,
    *,
    description: PipelineDescription | None = None,
    edges: list[dict[str, Any]] | None = None,
    driver_url: str | None = None,
    driver_token: str | None = None,
    sampling: dict[str, Any] | None = None,
    vertex_plan: dict[str, dict[str, Any]] | None = None,
    plan_error: str | None = None,
    api_version: str | None = None,
) -> Application:
    """Create or update the application ``namespace/name``; replaces its vertices when
    ``description`` is given (with ``edges``, ``vertex_plan`` and ``plan_error`` from
    :func:`sparkglass.service.graph.graph_of`). Returns the (flushed) row.

    ``api_version``: another operator's SparkApplication's (None: sparkglass's own, or a
    local application). A row of another ``api_version`` under the same name is another
    application: it is deleted with its rounds first, so that its history never shows as
    this one's.

    ``driver_token`` is stored encrypted with the session's cipher (:mod:`.cipher`); without
    one, :class:`~.cipher.StoreKeyMissing` (naming ``SPARKGLASS_STORE_KEY``) is raised."""
    app = get_application(session, namespace, name)
    if app is not None and app.api_version != api_version:
        delete_application(session, namespace, name)
        session.flush()
        app = None
    t = now_ms()
    if app is None:
        app = Application(
            namespace=namespace,
            name=name,
            api_version=api_version,
            edges=[],
            sampling={},
            registered_at=t,
            updated_at=t,
        )
        session.add(app)
        session.flush()
    app.updated_at = t
    if driver_url is not None:
        app.driver_url = driver_url
    if driver_token is not None:
        # Never stored in plaintext (store/cipher.py).
        cipher = cipher_of(session)
        if cipher is None:
            raise StoreKeyMissing()
        app.driver_token = cipher.encrypt(driver_token)
    if sampling is not None:
        app.sampling = sampling
    if edges is not None:
        app.edges = edges
    if description is not None:
        app.pipeline_name = description.name
        app.plan_error = plan_error
        wanted = {v.name: (i, v) for i, v in enumerate(description.vertices)}
        for existing in list(app.vertices):
            if existing.name not in wanted:
                app.vertices.remove(existing)
        by_name = {v.name: v for v in app.vertices}
        for vname, (pos, vd) in wanted.items():
            row = by_name.get(vname)
            if row is None:
                row = Vertex(name=vname)
                app.vertices.append(row)
            row.position = pos
            row.kind = vd.kind.value
            row.inputs = list(vd.inputs)
            row.bounded = vd.bounded
            row.python = vd.python
            row.attributes = vd.attributes.to_json_dict()
            row.plan = (vertex_plan or {}).get(vname, {})
    session.flush()
    return app


def driver_token(session: Session, app: Application) -> str | None:
    """The plaintext driver token of ``app`` (``None`` when it has none), decrypted with the
    session's cipher. Raises :class:`~.cipher.StoreKeyInvalid` when the key cannot open it,
    :class:`~.cipher.StoreKeyMissing` when there is no key."""
    if app.driver_token is None:
        return None
    if not StoreCipher.is_encrypted(app.driver_token):
        return app.driver_token  # an older version's plaintext, until the next start
    cipher = cipher_of(session)
    if cipher is None:
        raise StoreKeyMissing()
    return cipher.decrypt(app.driver_token)


def encrypt_driver_tokens(session: Session) -> tuple[int, int]:
    """Encrypt every plaintext driver token (stored by an older version) and re-encrypt
    those under an older key with the session's first key. Returns ``(rewritten, left)``:
    ``left`` counts tokens no key opens (or plaintext when there is no key), unchanged."""
    cipher = cipher_of(session)
    rows = session.scalars(select(Application).where(Application.driver_token.is_not(None)))
    rewritten = left = 0
    for app in rows:
        assert app.driver_token is not None
        if cipher is None:
            left += not StoreCipher.is_encrypted(app.driver_token)
            continue
        try:
            new = cipher.rotate(app.driver_token)
        except StoreKeyInvalid:
            left += 1
            continue
        if new != app.driver_token:
            app.driver_token = new
            rewritten += 1
    session.flush()
    return rewritten, left


def get_application(session: Session, namespace: str, name: str) -> Application | None:
    """The application ``namespace/name`` or ``None``."""
    return session.scalar(
        select(Application).where(Application.namespace == namespace, Application.name == name)
    )


def list_applications(session: Session, namespace: str | None = None) -> Sequence[Application]:
    """All applications (of ``namespace`` when given), by namespace then name."""
    q = select(Application).order_by(Application.namespace, Application.name)
    if namespace is not None:
        q = q.where(Application.namespace == namespace)
    return session.scalars(q).all()


def delete_application(session: Session, namespace: str, name: str) -> bool:
    """Delete an application with its rounds and records; ``False`` if unknown."""
    app = get_application(session, namespace, name)
    if app is None:
        return False
    round_ids = select(Round.id).where(Round.application_id == app.id)
    session.execute(delete(SampleRecord).where(SampleRecord.round_id.in_(round_ids)))
    session.execute(delete(Round).where(Round.application_id == app.id))
    session.execute(delete(VertexLease).where(VertexLease.application_id == app.id))
    session.delete(app)
    session.flush()
    return True


def note_driver(
    session: Session, app: Application, *, new_run: bool, driver_started_at: int | None, at: int
) -> int:
    """Record that ``app``'s driver answered at ``at`` (ms), as it does when registered.

    ``new_run``: the driver is another one than the current run's (a restart): the run
    count goes one up, and the vertices' leases are released so the new driver's first
    rounds need not wait out an interval the gone one claimed. The run begins at
    ``driver_started_at`` (the driver's own start, when known) or ``at``. Returns the
    application's current run."""
    if new_run or app.run_started_at is None:
        if new_run:
            app.run = (app.run or 1) + 1
            app.driver_started_at = None
            session.execute(
                update(VertexLease)
                .where(VertexLease.application_id == app.id)
                .values(next_start_at=0, round_id=None)
                .execution_options(synchronize_session=False)
            )
        app.run_started_at = driver_started_at if driver_started_at is not None else at
    if driver_started_at is not None:
        app.driver_started_at = driver_started_at
    app.driver_seen_at = at
    session.flush()
    return app.run


def mark_driver_seen(session: Session, application_id: int, run: int, at: int) -> bool:
    """Note that the driver of run ``run`` of the application answered at ``at`` (ms);
    nothing is written when the application is in another run by now, or was seen later
    already. Whether the row was written."""
    result = session.execute(
        update(Application)
        .where(
            Application.id == application_id,
            Application.run == run,
            (Application.driver_seen_at.is_(None)) | (Application.driver_seen_at < at),
        )
        .values(driver_seen_at=at)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


# --------------------------------------------------------------------------- shared rounds


def claim_round(
    session: Session,
    application_id: int,
    vertex: str,
    round_id: str,
    *,
    interval_ms: int,
    at: int | None = None,
    request_key: str = "",
) -> bool:
    """Try to become the one caller that starts a round of ``vertex`` for ``request_key`` (a
    round request's key, empty for a plain round) in this interval.

    Ensures the (application, vertex, request) lease row exists (``INSERT ... ON CONFLICT DO
    NOTHING``), then moves its ``next_start_at`` to ``at + interval_ms`` with one conditional
    UPDATE. The database serializes concurrent UPDATEs of one row (PostgreSQL re-checks the
    WHERE clause after a concurrent commit; SQLite has a single writer), so exactly one
    claimant per interval sees ``rowcount == 1``, whatever process or replica it runs in.
    Commit promptly after a successful claim: the row stays locked until then.
    """
    at = now_ms() if at is None else at
    dialect = session.get_bind().dialect.name
    digest = lease_digest(request_key)
    values = {
        "application_id": application_id,
        "vertex": vertex,
        "request_digest": digest,
        "claimed_at": 0,
        "next_start_at": 0,
    }
    if dialect == "postgresql":
        session.execute(postgresql.insert(VertexLease).values(values).on_conflict_do_nothing())
    elif dialect == "sqlite":
        session.execute(sqlite.insert(VertexLease).values(values).on_conflict_do_nothing())
    elif session.get(VertexLease, (application_id, vertex, digest)) is None:  # pragma: no cover
        session.add(VertexLease(**values))
        session.flush()
    result = session.execute(
        update(VertexLease)
        .where(
            VertexLease.application_id == application_id,
            VertexLease.vertex == vertex,
            VertexLease.request_digest == digest,
            VertexLease.next_start_at <= at,
        )
        .values(round_id=round_id, claimed_at=at, next_start_at=at + interval_ms)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


#: ``Round.request_key`` of a plain round the service started: the only answers to a plain
#: poll. A round the service started for a kind, filter, columns or expectation has the
#: request's ``RoundRequest.key()`` (JSON, never empty), and answers polls of that request.
PLAIN_ROUND = ""


def lease_digest(request_key: str) -> str:
    """``VertexLease.request_digest`` of ``request_key``: empty for a plain round, else the
    SHA-256 of the key (hex, 64 characters: a filter may be 4,096 characters long)."""
    return hashlib.sha256(request_key.encode()).hexdigest() if request_key else ""


def datasample_round_key(request_key: str) -> str:
    """``Round.request_key`` of a ``kubectl`` DataSample's own round (``request_key``: its
    ``RoundRequest.key()``, empty for no kind, filter or columns)."""
    return f"datasample:{request_key}"


def create_round(
    session: Session,
    round_id: str,
    application_id: int,
    vertex: str,
    *,
    triggered_by: str | None,
    at: int | None = None,
    run: int | None = None,
    request_key: str = PLAIN_ROUND,
) -> Round:
    """Insert a ``PENDING`` round row for ``request_key`` (a plain round: empty; a
    ``kubectl`` DataSample's own round is marked by :func:`save_round`) of the application's
    ``run`` (default: its current run, read from the store)."""
    if run is None:
        run = session.scalar(select(Application.run).where(Application.id == application_id))
    row = Round(
        id=round_id,
        application_id=application_id,
        vertex=vertex,
        status=SampleStatus.PENDING.value,
        started_at=now_ms() if at is None else at,
        total_record_count=0,
        total_truncated=False,
        dropped_by_contention=0,
        dropped_by_rate_limit=0,
        failed_subtasks=[],
        triggered_by=triggered_by,
        request_key=request_key,
        run=run,
    )
    session.add(row)
    session.flush()
    return row


def release_claim(
    session: Session,
    application_id: int,
    vertex: str,
    round_id: str,
    *,
    at: int,
    request_key: str = "",
) -> None:
    """Let the next poll claim ``vertex`` again from ``at`` on (ms), if ``round_id`` still holds
    its lease: a round that found the query idle should not block the next one for a whole
    refresh interval."""
    session.execute(
        update(VertexLease)
        .where(
            VertexLease.application_id == application_id,
            VertexLease.vertex == vertex,
            VertexLease.request_digest == lease_digest(request_key),
            VertexLease.round_id == round_id,
        )
        .values(next_start_at=at)
    )


#: Longest DataSample uid the store keeps (``rounds.datasample_uid``; the API server's are
#: 36-character UUIDs).
MAX_DATASAMPLE_UID_LENGTH = 253


def bind_datasample(session: Session, round_id: str, uid: str) -> bool:
    """Record that the DataSample with ``metadata.uid`` ``uid`` is round ``round_id``'s (the
    service, once the API server answered the DataSample's creation; the operator then saves
    its result in this round, :func:`round_of_datasample`). True when the row now holds
    ``uid``; False (nothing written) when there is no such round, or it is bound to another
    DataSample already: the first binding stands. Raises ``ValueError`` naming the field for
    an empty uid or one longer than :data:`MAX_DATASAMPLE_UID_LENGTH`.
    """
    if not uid or len(uid) > MAX_DATASAMPLE_UID_LENGTH:
        raise ValueError(
            f"datasample_uid: expected 1-{MAX_DATASAMPLE_UID_LENGTH} characters, got {len(uid)}"
        )
    result = session.execute(
        update(Round)
        .where(
            Round.id == round_id,
            (Round.datasample_uid.is_(None)) | (Round.datasample_uid == uid),
        )
        .values(datasample_uid=uid)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


def round_of_datasample(session: Session, uid: str) -> Round | None:
    """The round bound to the DataSample of ``metadata.uid`` ``uid``, if any."""
    return session.scalars(select(Round).where(Round.datasample_uid == uid)).first()


#: Columns of a round's outcome (what :func:`adopt_datasample_round` carries over from the
#: operator's round into the service's): not who started the round, when, nor whose answer
#: it is.
_OUTCOME_COLUMNS = tuple(
    c.key
    for c in Round.__table__.columns
    if c.key not in ("id", "application_id", "vertex", "triggered_by", "started_at", "request_key")
)


def adopt_datasample_round(session: Session, round_id: str, uid: str) -> bool:
    """Bind round ``round_id`` to the DataSample of ``uid`` when the operator was first: it
    found no round bound to that uid and saved the result in a round of its own (id ``uid``).
    That round's outcome and records move into ``round_id`` (same application and vertex
    only), and it is deleted; one transaction. True when ``round_id`` is now bound to ``uid``
    (adopted, or bound the usual way); False when another DataSample holds the round, or the
    uid's round belongs to another application or vertex (nothing written)."""
    theirs = round_of_datasample(session, uid)
    if theirs is None or theirs.id == round_id:
        return bind_datasample(session, round_id, uid)
    mine = session.get(Round, round_id)
    if mine is None or mine.datasample_uid is not None:
        return False
    if (theirs.application_id, theirs.vertex) != (mine.application_id, mine.vertex):
        return False
    outcome = {key: getattr(theirs, key) for key in _OUTCOME_COLUMNS}
    session.execute(
        update(SampleRecord)
        .where(SampleRecord.round_id == theirs.id)
        .values(round_id=round_id)
        .execution_options(synchronize_session=False)
    )
    session.delete(theirs)
    session.flush()  # the unique uid is free before this round takes it
    for key, value in outcome.items():
        setattr(mine, key, value)
    session.flush()
    return True


class RoundOwnershipError(ValueError):
    """A save named a round id the store holds for another application (or vertex)."""

    def __init__(self, round_id: str, owner: str, requested: str) -> None:
        super().__init__(
            f"round {round_id!r} belongs to {owner}, not to {requested}: not overwritten"
        )
        self.round_id, self.owner, self.requested = round_id, owner, requested


def _kind_name(api_version: str | None) -> str:
    return f"SparkApplication {api_version or SPARKGLASS_API_VERSION}"


class ApplicationKindError(RoundOwnershipError):
    """A save named an application whose row in the store is another kind's (sparkglass's
    own SparkApplication, or another operator's) under the same name."""

    def __init__(
        self, namespace: str, application: str, stored: str | None, requested: str | None
    ) -> None:
        where = f"{namespace}/{application}"
        ValueError.__init__(
            self,
            f"application {where} is a {_kind_name(stored)}, not a {_kind_name(requested)}: "
            "nothing saved",
        )
        self.round_id = ""
        self.owner = f"{where} ({_kind_name(stored)})"
        self.requested = f"{where} ({_kind_name(requested)})"


def stored_api_version(api_version: str | None) -> str | None:
    """``applications.api_version`` of an application of ``api_version`` (a DataSample's
    ``applicationRef.apiVersion``): ``None`` for sparkglass's own."""
    return None if api_version in (None, "", SPARKGLASS_API_VERSION) else api_version


def save_round(
    session: Session,
    *,
    namespace: str,
    application: str,
    vertex: str,
    result: DataSampleResult,
    round_id: str | None = None,
    external_ref: str | None = None,
    triggered_by: str | None = None,
    started_at: int | None = None,
    samples: Iterable[SubtaskSamples] | None = None,
    request_key: str | None = None,
    api_version: str | None = None,
) -> str:
    """Save a round's full result (all records) and return the store's round id.

    ``round_id``: the round to write (:func:`save_datasample_result` names the one bound to
    a DataSample's uid); without one, ``result.round_id`` or a new id is used. An existing
    round row with that id is updated (its records replaced) only when it belongs to the
    same (``namespace``, ``application``) and ``vertex``; the application row is created
    when the store does not know it yet. ``result.end_timestamp`` defaults to now for a
    finished status.
    ``samples``, when given, are the records instead of ``result.samples``; they are consumed
    and written one subtask at a time, so a caller can fetch them piecewise (whatever the
    iterable raises propagates, and the caller's transaction then writes nothing).
    ``request_key``: whose answer the round is (``Round.request_key``); ``None`` keeps the
    row's (a round the service started stays plain).

    ``api_version``: the application's kind (a DataSample's ``applicationRef.apiVersion``;
    ``None`` or sparkglass's own ``apiVersion``: a sparkglass SparkApplication, or a local
    application). The round is saved only in, or with, the row of that kind.

    Raises :class:`RoundOwnershipError` (nothing written) when the row ``round_id`` belongs to
    another application or vertex: round ids are not secret (REST bodies, ``resultsURL``), so
    whoever may save a round of one application must never overwrite another's; and
    :class:`ApplicationKindError` when the store's application of that name is of another
    kind: its records would be served as that application's, to whoever may read it (who
    need not be allowed to read the kind they came from).
    """
    kind = stored_api_version(api_version)
    app = get_application(session, namespace, application)
    if app is None:
        app = upsert_application(session, namespace, application, api_version=kind)
    elif app.api_version != kind:
        raise ApplicationKindError(namespace, application, app.api_version, kind)
    rid = round_id or result.round_id or secrets.token_hex(8)
    row = session.get(Round, rid)
    if row is not None and (row.application_id != app.id or row.vertex != vertex):
        owner = session.get(Application, row.application_id)
        raise RoundOwnershipError(
            rid,
            f"{owner.namespace}/{owner.name} vertex {row.vertex!r}" if owner else "another one",
            f"{namespace}/{application} vertex {vertex!r}",
        )
    t = now_ms()
    if row is None:
        row = create_round(
            session, rid, app.id, vertex, triggered_by=triggered_by, at=started_at or t
        )
    row.status = result.status.value
    row.error_code = result.error_code.value if result.error_code else None
    row.end_timestamp = result.end_timestamp or (
        None if result.status is SampleStatus.PENDING else t
    )
    row.total_truncated = result.total_truncated
    row.dropped_by_contention = result.dropped_by_contention
    row.dropped_by_rate_limit = result.dropped_by_rate_limit
    row.failed_subtasks = list(result.failed_subtasks)
    row.filter_stopped_subtasks = list(result.filter_stopped_subtasks) or None
    row.no_data_reason = result.no_data_reason.value if result.no_data_reason else None
    row.last_micro_batch_timestamp = result.last_micro_batch_timestamp
    row.materialized_at = result.materialized_at
    if request_key is not None:
        row.request_key = request_key
    if external_ref is not None:
        row.external_ref = external_ref
    session.execute(delete(SampleRecord).where(SampleRecord.round_id == rid))
    stored = 0
    for sub in result.samples if samples is None else samples:
        rows = [
            {
                "round_id": rid,
                "subtask_index": sub.subtask_index,
                "seq": seq,
                "sample_timestamp": rec.sample_timestamp,
                "data": rec.data,
                "data_type": rec.data_type,
                "truncated": rec.truncated,
                "expectations": rec.expectations,
                "error": rec.error,
            }
            for seq, rec in enumerate(sub.records)
        ]
        if rows:
            session.execute(insert(SampleRecord), rows)
        stored += len(rows)
        del rows
    row.total_record_count = stored
    session.flush()
    return rid


def save_datasample_result(
    session: Session,
    *,
    namespace: str,
    application: str,
    vertex: str,
    result: DataSampleResult,
    uid: str,
    name: str,
    started_at_ms: int | None,
    request_key: str,
    api_version: str | None = None,
) -> str:
    """Save (or replace) the full result of the DataSample ``name`` of ``metadata.uid``
    ``uid`` and return the store's round id: **the one way a DataSample's result enters the
    store**. The round is the one bound to ``uid`` (the service binds each DataSample it
    creates as soon as the API server answers), else a round of its own whose id is the uid
    (a DataSample made with ``kubectl``), marked as that DataSample's answer
    (:func:`datasample_round_key` of ``request_key``), never a plain poll's. The API server
    gives every object its uid and a DataSample's spec cannot change, so a result lands only
    in its own DataSample's round, and saving twice replaces it.

    ``api_version``: the kind its ``applicationRef`` names (:func:`save_round`).

    Raises :class:`RoundOwnershipError` (nothing written) when that round belongs to another
    application or vertex, or the application of that name is of another kind
    (:class:`ApplicationKindError`), ``ValueError`` for an empty or over-long uid, and
    ``IntegrityError`` when a concurrent save created the application's row first (retry in
    a fresh transaction)."""
    if not uid or len(uid) > MAX_DATASAMPLE_UID_LENGTH:
        raise ValueError(
            f"datasample_uid: expected 1-{MAX_DATASAMPLE_UID_LENGTH} characters, got {len(uid)}"
        )
    bound = round_of_datasample(session, uid)
    if bound is None and session.get(Round, uid) is not None:
        # A round under the uid's id that is not bound to it is someone else's (round ids are
        # not secret): never written over, nor bound.
        raise RoundOwnershipError(uid, "another request", f"DataSample {name} (uid {uid})")
    saved = save_round(
        session,
        namespace=namespace,
        application=application,
        vertex=vertex,
        result=result,
        round_id=bound.id if bound is not None else uid,
        external_ref=name,
        triggered_by="sparkglass-operator",
        started_at=started_at_ms,
        # The service's round stays the plain round it started.
        request_key=None if bound is not None else datasample_round_key(request_key),
        api_version=api_version,
    )
    if bound is None:
        bind_datasample(session, saved, uid)
    return saved


def save_datasample_result_retrying(sessions: sessionmaker[Session], **fields: Any) -> str:
    """:func:`save_datasample_result` in its own transaction, run again (up to 3 times) when
    it lost a race on a unique key: the first rounds of an application saved at once both
    create its row, or the service binds its round to the uid while the result is saved
    under it; a fresh transaction then finds the winner's row."""
    for attempt in Retrying(
        retry=retry_if_exception_type(IntegrityError), stop=stop_after_attempt(3), reraise=True
    ):
        with attempt, sessions.begin() as session:
            return save_datasample_result(session, **fields)
    raise AssertionError("unreachable: Retrying re-raises the last error")


def get_round(session: Session, round_id: str) -> Round | None:
    """The round row ``round_id`` or ``None``."""
    return session.get(Round, round_id)


def latest_finished_round(
    session: Session,
    application_id: int,
    vertex: str,
    *,
    run: int | None = None,
    request_key: str = PLAIN_ROUND,
) -> Round | None:
    """The most recently ended round of ``vertex`` the service started for ``request_key``
    (any status but ``PENDING``; a round of another request, or a ``kubectl`` DataSample's,
    is not an answer to this poll), of ``run`` when given (a round of an earlier run came
    from a driver that is gone: never the current answer)."""
    q = select(Round).where(
        Round.application_id == application_id,
        Round.vertex == vertex,
        Round.status != SampleStatus.PENDING.value,
        Round.request_key == request_key,
    )
    if run is not None:
        q = q.where(Round.run == run)
    q = q.order_by(Round.end_timestamp.desc(), Round.started_at.desc()).limit(1)
    # The session may hold this row from an earlier read, still PENDING: the ended row as
    # read now, not the one in the session's identity map.
    return session.scalar(q.execution_options(populate_existing=True))


def running_round(
    session: Session,
    application_id: int,
    vertex: str,
    *,
    started_after: int,
    run: int | None = None,
    request_key: str = PLAIN_ROUND,
) -> Round | None:
    """The newest ``PENDING`` round of ``vertex`` for ``request_key`` started after
    ``started_after`` (older pending rows belong to a replica that died mid-round and are
    ignored), of ``run`` when given (an earlier run's round waits on a driver that is
    gone)."""
    q = select(Round).where(
        Round.application_id == application_id,
        Round.vertex == vertex,
        Round.status == SampleStatus.PENDING.value,
        Round.started_at > started_after,
        Round.request_key == request_key,
    )
    if run is not None:
        q = q.where(Round.run == run)
    return session.scalar(q.order_by(Round.started_at.desc()).limit(1))


def finished_result(session: Session, round_id: str) -> DataSampleResult | None:
    """The full result of round ``round_id`` once it ended (not ``PENDING``), else ``None``."""
    row = session.get(Round, round_id)
    if row is None or row.status == SampleStatus.PENDING.value:
        return None
    return load_result(session, row)


def list_rounds(
    session: Session, application_id: int, vertex: str, *, limit: int = 50
) -> Sequence[Round]:
    """Round history of ``vertex``, newest first."""
    return session.scalars(
        select(Round)
        .where(Round.application_id == application_id, Round.vertex == vertex)
        .order_by(Round.started_at.desc())
        .limit(limit)
    ).all()


def count_rounds(session: Session, application_id: int | None = None) -> int:
    """How many rounds the store holds (of one application when given)."""
    q = select(func.count()).select_from(Round)
    if application_id is not None:
        q = q.where(Round.application_id == application_id)
    return int(session.scalar(q) or 0)


def round_head(row: Round) -> DataSampleResult:
    """The result of a round row without its records (``samples`` empty): what every body
    of the round starts from. ``total_record_count`` is the number of stored records."""
    return DataSampleResult(
        status=SampleStatus(row.status),
        end_timestamp=row.end_timestamp,
        round_id=row.id,
        total_record_count=row.total_record_count,
        total_truncated=row.total_truncated,
        dropped_by_contention=row.dropped_by_contention,
        dropped_by_rate_limit=row.dropped_by_rate_limit,
        error_code=row.error_code,  # type: ignore[arg-type]  # validated to ErrorCode
        failed_subtasks=list(row.failed_subtasks or []),
        filter_stopped_subtasks=list(row.filter_stopped_subtasks or []),
        no_data_reason=row.no_data_reason,  # type: ignore[arg-type]  # validated to the enum
        last_micro_batch_timestamp=row.last_micro_batch_timestamp,
        materialized_at=row.materialized_at,
    )


def subtask_counts(session: Session, round_id: str) -> list[tuple[int, int]]:
    """``(subtask index, stored records)`` of round ``round_id``, by subtask index; only
    subtasks with records. Reads no record data."""
    rows = session.execute(
        select(SampleRecord.subtask_index, func.count())
        .where(SampleRecord.round_id == round_id)
        .group_by(SampleRecord.subtask_index)
        .order_by(SampleRecord.subtask_index)
    ).all()
    return [(int(sub), int(n)) for sub, n in rows]


#: The columns of a stored record, in the order :func:`stored_record` takes them.
RECORD_COLUMNS = (
    SampleRecord.sample_timestamp,
    SampleRecord.data,
    SampleRecord.data_type,
    SampleRecord.truncated,
    SampleRecord.expectations,
    SampleRecord.error,
)


def stored_record(columns: Sequence[Any]) -> SampledRecord:
    """The :class:`SampledRecord` of one row of :data:`RECORD_COLUMNS`."""
    ts, data, data_type, truncated, expectations, error = columns
    return SampledRecord(
        sample_timestamp=ts,
        data=data,
        data_type=data_type,
        truncated=bool(truncated),
        expectations=expectations,
        error=error,
    )


def load_result(session: Session, row: Round) -> DataSampleResult:
    """The full :class:`DataSampleResult` of a round row, records grouped by subtask.

    Holds every record in memory (up to ~50 MB): the service's routes send bodies a page at
    a time instead (:mod:`sparkglass.service.result_body`); this is for the operator, tests
    and small results.
    """
    records = session.execute(
        select(SampleRecord.subtask_index, *RECORD_COLUMNS)
        .where(SampleRecord.round_id == row.id)
        .order_by(SampleRecord.subtask_index, SampleRecord.seq)
    ).all()
    groups: dict[int, list[SampledRecord]] = {}
    for sub, *columns in records:
        groups.setdefault(sub, []).append(stored_record(columns))
    return round_head(row).model_copy(
        update={
            "samples": [
                SubtaskSamples(subtask_index=k, records=v) for k, v in sorted(groups.items())
            ]
        }
    )


# --------------------------------------------------------------------------- audit


@dataclass(frozen=True)
class AuditRecord:
    """One audit event before it is written (see :class:`~.orm.AuditEvent`)."""

    actor: str
    #: ``read``, ``trigger``, ``list``, ``register``, ``delete``, ``token-create``,
    #: ``token-revoke`` or ``denied`` (with ``status`` ``401``/``403``).
    action: str
    namespace: str
    application: str
    vertex: str
    round_id: str | None
    record_count: int
    status: str | None
    at: int
    client: str | None = None
    detail: str | None = None
    #: Identical requests this event stands for (coalesced reads: more than 1).
    request_count: int = 1
    #: The last of them (coalesced reads only).
    last_at: int | None = None


def add_audit_events(session: Session, events: Iterable[AuditRecord]) -> int:
    """Write audit events in one batch; returns how many."""
    rows = [e.__dict__ for e in events]
    if rows:
        session.execute(insert(AuditEvent), rows)
    return len(rows)


def list_audit_events(
    session: Session,
    *,
    namespace: str | None = None,
    application: str | None = None,
    limit: int = 100,
) -> Sequence[AuditEvent]:
    """Audit events, newest first, optionally of one namespace/application."""
    q = select(AuditEvent).order_by(AuditEvent.at.desc(), AuditEvent.id.desc()).limit(limit)
    if namespace is not None:
        q = q.where(AuditEvent.namespace == namespace)
    if application is not None:
        q = q.where(AuditEvent.application == application)
    return session.scalars(q).all()


# --------------------------------------------------------------------------- retention


@dataclass(frozen=True)
class PurgeCounts:
    """What one retention sweep deleted."""

    rounds: int
    records: int
    audit_events: int
    leases: int = 0


def purge_older_than(session: Session, cutoff_ms: int) -> PurgeCounts:
    """Delete rounds (with their records) started before ``cutoff_ms``, audit events older
    than it, and the leases free since before it. Records are deleted explicitly rather than
    by ``ON DELETE CASCADE`` so the sweep behaves the same on SQLite connections without
    foreign keys.

    A lease is one row per (application, vertex, request), and every distinct filter is a
    request: without the sweep they would grow with each filter ever asked. A lease whose
    ``next_start_at`` is past is claimable, as a missing one is (:func:`claim_round` inserts
    it), so deleting it changes no answer."""
    old = select(Round.id).where(Round.started_at < cutoff_ms)
    records = session.execute(delete(SampleRecord).where(SampleRecord.round_id.in_(old)))
    rounds = session.execute(delete(Round).where(Round.started_at < cutoff_ms))
    audit = session.execute(delete(AuditEvent).where(AuditEvent.at < cutoff_ms))
    leases = session.execute(delete(VertexLease).where(VertexLease.next_start_at < cutoff_ms))
    return PurgeCounts(
        rounds=int(getattr(rounds, "rowcount", 0)),
        records=int(getattr(records, "rowcount", 0)),
        audit_events=int(getattr(audit, "rowcount", 0)),
        leases=int(getattr(leases, "rowcount", 0)),
    )


# --------------------------------------------------------------------------- tokens

#: Prefix of generated tokens, so secret scanners and people recognize a leaked one.
TOKEN_PREFIX = "sgt_"


def hash_token(token: str) -> str:
    """SHA-256 hex of a bearer token (only hashes are stored).

    A plain hash suffices (no salt, no slow KDF): generated tokens carry 256 random bits,
    so there is nothing to brute-force, and a fast hash keeps a lookup per request cheap.
    """
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh bearer token: ``sgt_`` + 43 URL-safe characters (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class TokenInfo:
    """What the store knows of one token (never the token itself)."""

    id: int
    user: str
    role: str
    created_at: int
    #: ms since the epoch; ``None``: never expires.
    expires_at: int | None
    #: ms since the epoch; ``None``: not revoked.
    revoked_at: int | None

    def valid_at(self, at: int) -> bool:
        """Neither revoked nor expired at ``at`` (ms since the epoch)."""
        return self.revoked_at is None and (self.expires_at is None or at < self.expires_at)


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        user=row.user,
        role=row.role,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


def issue_token(
    session: Session,
    user: str,
    role: str,
    *,
    expires_at: int | None,
    token: str | None = None,
) -> tuple[TokenInfo, str]:
    """Store a local-mode token for ``user`` with ``role``; returns its info and the token
    (generated by :func:`new_token` unless given), which is shown once and never stored.

    ``expires_at`` is ms since the epoch (``None``: never). Raises ``ValueError`` naming the
    field for an unknown role, an empty ``user`` (or one over 253 characters) or an
    ``expires_at`` not in the future.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not user or len(user) > 253:
        raise ValueError(f"user must be 1-253 characters, got {len(user)}")
    t = now_ms()
    if expires_at is not None and expires_at <= t:
        raise ValueError(f"expires_at must be in the future (after {t} ms), got {expires_at}")
    token = token or new_token()
    row = ApiToken(
        token_sha256=hash_token(token), user=user, role=role, created_at=t, expires_at=expires_at
    )
    session.add(row)
    session.flush()
    return _info(row), token


def add_token(
    session: Session,
    user: str,
    role: str,
    token: str | None = None,
    *,
    expires_at: int | None = None,
) -> str:
    """Store a local-mode token for ``user`` with ``role`` and return the token (generated
    when not given). Raises ``ValueError`` like :func:`issue_token`."""
    return issue_token(session, user, role, expires_at=expires_at, token=token)[1]


def lookup_token(session: Session, token: str, *, at: int | None = None) -> TokenInfo | None:
    """The stored token ``token`` if it is valid at ``at`` (default now), else ``None``
    (unknown, revoked or expired)."""
    digest = hash_token(token)
    row = session.scalar(select(ApiToken).where(ApiToken.token_sha256 == digest))
    # The lookup compares digests, not tokens; compare_digest keeps the final check
    # constant-time anyway.
    if row is None or not hmac.compare_digest(row.token_sha256, digest):
        return None
    info = _info(row)
    return info if info.valid_at(now_ms() if at is None else at) else None


def find_token(session: Session, token: str) -> tuple[str, str] | None:
    """``(user, role)`` of a stored token that is valid now, or ``None``."""
    info = lookup_token(session, token)
    return None if info is None else (info.user, info.role)


def list_tokens(session: Session) -> Sequence[TokenInfo]:
    """Every stored token (valid, expired or revoked), oldest first; no secrets."""
    return [_info(r) for r in session.scalars(select(ApiToken).order_by(ApiToken.id)).all()]


def revoke_token(session: Session, token_id: int, *, at: int | None = None) -> TokenInfo | None:
    """Revoke token ``token_id`` from ``at`` (default now) on; returns its info, or ``None``
    when there is no such token. Revoking twice keeps the first time."""
    row = session.get(ApiToken, token_id)
    if row is None:
        return None
    if row.revoked_at is None:
        row.revoked_at = now_ms() if at is None else at
        session.flush()
    return _info(row)

"""The JSON body of a stored round: written from the store a page of records at a time, and
a cache of finished bodies bounded in bytes.

A result may be ~50 MB of JSON (5000 records of 10000 characters). Decoded into pydantic
objects and serialized whole, it cost twice that per request, and a few concurrent polls of
large results took the service past 1 GB. Here nothing holds a whole large result: a body is
planned from the store's counts (:func:`plan_body`), written a page and a chunk at a time
(:func:`render_body`, :func:`plan_pages`), bounded in how many are written at once
(:class:`StreamGate`), and kept when finished in a byte-bounded cache, gzip-compressed once
and validated by a weak ``ETag`` (:class:`ResultBodies`, :func:`entity_tag`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gzip
import hashlib
import io
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

from fastapi import HTTPException, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter
from sqlalchemy import ColumnElement, LargeBinary, cast, func, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool

from sparkglass.runtime.contract.sample_result import (
    DataSampleResult,
    SampledRecord,
    SampleStatus,
    SubtaskSamples,
    fair_truncate,
)

from .byte_cache import ByteLRU
from .content_coding import VARY
from .store import repository
from .store.orm import SampleRecord
from .store.repository import RECORD_COLUMNS, stored_record

#: Record data (``data`` and ``dataType``, UTF-8 bytes) read per store query while a body is
#: written; a page holds at least one record, so one larger than this is a page of its own.
PAGE_BYTES = 1024 * 1024
#: Most records per store query, whatever their size (a page of tiny records stays a
#: reasonable query).
PAGE_MAX_RECORDS = 1000
#: Bodies are handed to the server in pieces of about this size, bytes.
CHUNK_BYTES = 256 * 1024
#: A body is cached only when it takes at most this share of the cache's budget, so the
#: cache holds several bodies rather than thrashing on one.
ENTRY_SHARE = 4
#: Budget of the memo of body sizes (entries of ``_SIZE_ENTRY_BYTES``), bytes.
SIZE_MEMO_BYTES = 1024 * 1024
_SIZE_ENTRY_BYTES = 128

#: Sampled records may hold personal data, so no browser or proxy stores them; a client
#: that keeps the body itself (the page, ``ServiceClient``) revalidates it with
#: ``If-None-Match`` and gets a 304 while the result is unchanged.
CACHE_CONTROL = "no-store"

_RECORD = TypeAdapter(SampledRecord)

_SAMPLES = b'"samples":['
#: Seconds a client refused for want of a stream slot is told to wait.
_RETRY_AFTER_S = 2
_MEDIA_TYPE = "application/json"


@dataclass(frozen=True)
class BodyPlan:
    """What one body holds: ``head`` (the post-filtered result without records) and
    ``quotas``, ``(subtask index, records to send)`` in body order (a quota may be 0: the
    ``maxRecords`` cut keeps a subtask's entry with no records)."""

    head: DataSampleResult
    quotas: tuple[tuple[int, int], ...]

    @property
    def record_count(self) -> int:
        """Records the body carries."""
        return sum(q for _, q in self.quotas)


def entity_tag(
    head: DataSampleResult, subtask_index: int | None = None, max_records: int | None = None
) -> str:
    """The weak entity tag (``W/"<24 hex digits>"``) of the body of ``head`` after the
    post-filters. Records of a stored round never change, so the head (round id, status,
    counts, ``stale``) and the filters determine the body's bytes. A request whose
    ``If-None-Match`` names it gets ``304 Not Modified`` with no body: 200 open pages polling
    an unchanged result cost the service a hash of the round's head each, not 200 bodies."""
    digest = hashlib.blake2b(head.model_dump_json(by_alias=True).encode(), digest_size=12)
    digest.update(b"|%s|%s" % (str(subtask_index).encode(), str(max_records).encode()))
    return f'W/"{digest.hexdigest()}"'


def not_modified(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header value (``*`` or a comma-separated list of entity
    tags, RFC 9110 section 13.1.2) matches ``etag`` by weak comparison."""
    if not if_none_match:
        return False
    wanted = etag.removeprefix("W/")
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == wanted:
            return True
    return False


def validator_headers(etag: str) -> dict[str, str]:
    """The ``ETag``, ``Cache-Control`` and ``Vary: Accept-Encoding`` headers every
    data-sample answer carries, its 304 included (RFC 9110 section 15.4.5: a 304 sends the
    ``Vary`` the 200 would have)."""
    return {"etag": etag, "cache-control": CACHE_CONTROL, **VARY}


def not_modified_response(etag: str) -> Response:
    """``304 Not Modified`` for ``etag``: no body, the validator headers."""
    return Response(status_code=304, headers=validator_headers(etag))


def conditional_answer(
    head: DataSampleResult,
    subtask_index: int | None,
    max_records: int | None,
    if_none_match: str | None,
) -> tuple[str, Response | None]:
    """The :func:`entity_tag` of ``head``'s body after the post-filters, and the ``304``
    answering ``if_none_match`` when it names it (``None``: the body must be sent)."""
    etag = entity_tag(head, subtask_index, max_records)
    return etag, not_modified_response(etag) if not_modified(if_none_match, etag) else None


def has_records(head: DataSampleResult) -> bool:
    """Whether the body of ``head`` needs records from the store."""
    return (
        head.status is not SampleStatus.PENDING
        and head.round_id is not None
        and head.total_record_count > 0
    )


def _fair_quotas(counts: list[tuple[int, int]], cap: int) -> tuple[list[tuple[int, int]], bool]:
    # The contract's fair_truncate is the one implementation of the cut the driver applies
    # too; it reads only how many records each subtask has, so it gets stand-ins.
    stand_in = SampledRecord(sample_timestamp=0, data="", data_type="")
    cut, truncated = fair_truncate(
        [SubtaskSamples(subtask_index=s, records=[stand_in] * n) for s, n in counts], cap
    )
    return [(s.subtask_index, len(s.records)) for s in cut], truncated


def plan_body(
    session: Session,
    head: DataSampleResult,
    subtask_index: int | None = None,
    max_records: int | None = None,
) -> BodyPlan:
    """The plan of ``head``'s body after the post-filters (``subtask_index`` 0 or more,
    ``max_records`` 1-5000; ``None``: no filter), with the semantics of the contract's
    :func:`post_filter`. Reads the per-subtask counts from the store, no record."""
    counts = repository.subtask_counts(session, head.round_id or "") if has_records(head) else []
    if subtask_index is None and max_records is None:
        return BodyPlan(head, tuple(counts))
    failed = head.failed_subtasks
    if subtask_index is not None:
        counts = [(s, n) for s, n in counts if s == subtask_index]
        failed = [f for f in failed if f == subtask_index]
    truncated = head.total_truncated
    if max_records is not None:
        counts, cut = _fair_quotas(counts, max_records)
        truncated = truncated or cut
    filtered = head.model_copy(
        update={
            "failed_subtasks": list(failed),
            "total_record_count": sum(n for _, n in counts),
            "total_truncated": truncated,
        }
    )
    return BodyPlan(filtered, tuple(counts))


@dataclass(frozen=True)
class Page:
    """One store query of a body: the ``count`` records of a subtask after record
    ``after_id`` (``None``: from its first) up to record ``last_id``, ``size`` bytes of
    record data in all."""

    after_id: int | None
    last_id: int
    count: int
    size: int


def plan_pages(sizes: Iterable[tuple[int, int]], budget: int | None = None) -> list[Page]:
    """Split records ``(id, bytes of data and dataType)``, in body order, into pages of at
    most ``budget`` bytes (``PAGE_BYTES`` when ``None``) and ``PAGE_MAX_RECORDS`` records; a
    record larger than ``budget`` is a page of its own (never split, never skipped)."""
    budget = PAGE_BYTES if budget is None else budget
    pages: list[Page] = []
    after: int | None = None
    first_after: int | None = None
    last, count, size = 0, 0, 0
    for record_id, record_size in sizes:
        if count and (size + record_size > budget or count >= PAGE_MAX_RECORDS):
            pages.append(Page(first_after, last, count, size))
            count, size = 0, 0
        if not count:
            first_after = after
        last, count, size = record_id, count + 1, size + record_size
        after = record_id
    if count:
        pages.append(Page(first_after, last, count, size))
    return pages


def _size(session: Session) -> ColumnElement[int]:
    """The UTF-8 size of a record's ``data``, ``dataType`` and ``error``, computed by the
    database (a violation's expectation names are a few short labels)."""
    error = func.coalesce(SampleRecord.error, "")
    if session.get_bind().dialect.name == "postgresql":
        return (
            func.octet_length(SampleRecord.data)
            + func.octet_length(SampleRecord.data_type)
            + func.octet_length(error)
        )
    # SQLite before 3.43 has no octet_length; the length of a text cast to a blob is its
    # size in bytes.
    return (
        func.length(cast(SampleRecord.data, LargeBinary))
        + func.length(cast(SampleRecord.data_type, LargeBinary))
        + func.length(cast(error, LargeBinary))
    )


def record_sizes(
    session: Session, round_id: str, subtask_index: int, limit: int
) -> list[tuple[int, int]]:
    """``(id, bytes)`` of the first ``limit`` records of a subtask of round ``round_id``, in
    stored order (sizes as :func:`_size`; no record reaches the service)."""
    rows = session.execute(
        select(SampleRecord.id, _size(session))
        .where(SampleRecord.round_id == round_id, SampleRecord.subtask_index == subtask_index)
        .order_by(SampleRecord.id)
        .limit(limit)
    ).all()
    return [(int(i), int(n or 0)) for i, n in rows]


def read_page(
    session: Session, round_id: str, subtask_index: int, page: Page
) -> list[tuple[int, SampledRecord]]:
    """The records of ``page`` as ``(id, SampledRecord)``.

    What was planned may have changed since (the round saved again: SQLite may even give
    new records the old ids), so the page is bounded where it is read, in one statement:
    records within the planned ids whose running size stays within the planned size (or
    ``PAGE_BYTES``, when larger). A page never holds more than that; when it comes back
    short, the caller ends the subtask there, as for a round deleted meanwhile."""
    in_range = [
        SampleRecord.round_id == round_id,
        SampleRecord.subtask_index == subtask_index,
        SampleRecord.id <= page.last_id,
    ]
    if page.after_id is not None:
        in_range.append(SampleRecord.id > page.after_id)
    # Ids and running sizes only: the window never holds record data.
    sized = (
        select(
            SampleRecord.id.label("id"),
            func.sum(_size(session)).over(order_by=SampleRecord.id).label("running"),
        )
        .where(*in_range)
        .order_by(SampleRecord.id)
        .limit(page.count)
        .subquery()
    )
    q = (
        select(SampleRecord.id, *RECORD_COLUMNS)
        .join(sized, sized.c.id == SampleRecord.id)
        .where(sized.c.running <= max(page.size, PAGE_BYTES))
        .order_by(SampleRecord.id)
    )
    return [(int(i), stored_record(columns)) for i, *columns in session.execute(q).all()]


def render_body(sessions: sessionmaker[Session], plan: BodyPlan) -> Iterator[bytes]:
    """The JSON body of ``plan`` in chunks of about ``CHUNK_BYTES`` (a chunk exceeds it by at
    most one record). Each subtask's sizes, and each page of its records, is one short
    session of ``sessions``; a page holds at most ``PAGE_BYTES`` of record data, or one
    record (:func:`plan_pages`).

    A response being sent holds one page and one chunk whatever the result's size, and no
    database transaction stays open between pages. A page is planned from the records' sizes
    in the store (a record may be ``max-record-length``, 1,000,000 characters: a page of 100
    such records was ~100 MB). The bytes are exactly ``model_dump_json(by_alias=True)`` of
    the post-filtered :class:`DataSampleResult`.

    A round deleted meanwhile (retention, its application removed) ends its records early:
    the body stays valid JSON with fewer records than ``totalRecordCount`` says.
    """
    head = plan.head.model_dump_json(by_alias=True).encode()
    split = head.index(_SAMPLES + b"]") + len(_SAMPLES)
    buf = bytearray(head[:split])
    round_id = plan.head.round_id or ""
    for n, (subtask, quota) in enumerate(plan.quotas):
        buf += b'%s{"subtaskIndex":%d,"records":[' % (b"," if n else b"", subtask)
        if quota:
            with sessions() as session:
                pages = plan_pages(record_sizes(session, round_id, subtask, quota))
        else:
            pages = []
        sent = 0
        for planned in pages:
            with sessions() as session:
                page = read_page(session, round_id, subtask, planned)
            for _, record in page:
                if sent:
                    buf += b","
                buf += _RECORD.dump_json(record, by_alias=True)
                sent += 1
                if len(buf) >= CHUNK_BYTES:
                    yield bytes(buf)
                    buf.clear()
            short = len(page) < planned.count
            del page
            if short:  # saved again or deleted meanwhile: end the subtask here
                break
        buf += b"]}"
    buf += head[split:]
    yield bytes(buf)


class StreamGate:
    """At most ``slots`` bodies written from the store at once, across threads and event
    loops; waiters are served first come, first served, and wait on their event loop (no
    thread is held while waiting)."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self._free = slots
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def in_use(self) -> int:
        """Slots held now."""
        with self._lock:
            return self.slots - self._free

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        with self._lock:
            return sum(not granted.done() for _, granted in self._waiters)

    async def acquire(self, timeout_s: float | None) -> bool:
        """Take a slot, waiting at most ``timeout_s`` seconds (``None``: as long as it
        takes); whether one was taken. Cancelled while waiting, it takes none."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            if timeout_s is not None and timeout_s <= 0:
                return False
            granted: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, granted))
        try:
            await asyncio.wait_for(asyncio.shield(granted), timeout_s)
        except BaseException as exc:  # the wait timed out or was cancelled
            with self._lock:
                # _grant runs on this loop, so it cannot run in between: either the slot was
                # handed over already, or this waiter leaves the queue now.
                owned = granted.done() and not granted.cancelled()
                if not owned:
                    granted.cancel()
                    with contextlib.suppress(ValueError):  # popped by release(): _grant passes on
                        self._waiters.remove((loop, granted))
            if isinstance(exc, TimeoutError):
                return owned
            if owned:
                self.release()
            raise
        return True

    def release(self) -> None:
        """Give a slot back: to the first waiter still waiting, else to the pool."""
        with self._lock:
            while self._waiters:
                loop, granted = self._waiters.popleft()
                if granted.done():
                    continue
                loop.call_soon_threadsafe(self._grant, granted)
                return
            self._free += 1

    def _grant(self, granted: asyncio.Future[None]) -> None:
        if granted.done():  # gave up meanwhile: the slot goes on
            self.release()
        else:
            granted.set_result(None)


class _Held:
    """One slot of a :class:`StreamGate`, given back exactly once."""

    def __init__(self, gate: StreamGate) -> None:
        self._gate: StreamGate | None = gate

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.release()

    def __del__(self) -> None:
        # A response built but never sent (its route failed after) still gives its slot back.
        self.release()


async def _gated(chunks: Iterator[bytes], held: _Held) -> AsyncIterator[bytes]:
    """``chunks`` (a blocking iterator) from the thread pool; the slot ``held`` is given back
    when they end, fail or the client goes away."""
    try:
        async for chunk in iterate_in_threadpool(chunks):
            yield chunk
    finally:
        held.release()


def _skip(chunks: Iterator[bytes], offset: int) -> Iterator[bytes]:
    """``chunks`` without their first ``offset`` bytes."""
    for chunk in chunks:
        if offset >= len(chunk):
            offset -= len(chunk)
            continue
        yield chunk[offset:] if offset else chunk
        offset = 0


#: A rendered body's cache key: (application scope, entity tag, subtaskIndex, maxRecords).
#: The scope (namespace/application) keeps applications apart even when two stored rounds
#: share a round id over time (a driver's round ids are not secret, and one application's
#: row may be deleted while its body is cached); the entity tag covers the round id, stale,
#: status, counts and both filters, so a round saved again gets a body of its own.
_BodyKey = tuple[str, str, int | None, int | None]


def body_scope(namespace: str, name: str, api_version: str | None) -> str:
    """The scope an application's bodies are cached under: ``namespace/name``, and for
    another operator's application ``@`` its ``apiVersion`` (namespaces and names hold no
    ``@``), so that an application of another kind under the same name never gets its
    bodies."""
    return f"{namespace}/{name}" if api_version is None else f"{namespace}/{name}@{api_version}"


#: gzip level of the service's responses (its GZipMiddleware uses the same).
GZIP_LEVEL = 5


@dataclass(frozen=True)
class CachedBody:
    """A rendered body, and its gzip compression when it is large enough to be sent
    compressed (``None`` otherwise)."""

    raw: bytes
    gzipped: bytes | None
    #: Records the body carries (a filtered body carries fewer than its head says).
    record_count: int

    @property
    def size(self) -> int:
        """Bytes held: both forms."""
        return len(self.raw) + len(self.gzipped or b"")


class ResultBodies:
    """Sends bodies of stored rounds, keeping finished unfiltered ones in a byte budget.

    ``max_bytes`` is ``result_cache_bytes`` (0: nothing is cached); ``gate`` the service's
    memory gate (``result_concurrency``): a body is built for the cache only while a pass
    is free, otherwise it is sent from the store. ``streams`` bounds the bodies sent from
    the store at once (``stream_concurrency``): a request beyond waits ``stream_wait_s``
    for a slot, holding no record, then gets 503 with ``Retry-After``. Bodies sent from the
    cache need no slot (they copy a chunk of a body the cache already holds).

    Finished bodies are kept per (round, post-filters), each of at most a quarter of
    ``result_cache_bytes`` (:data:`ENTRY_SHARE`), in a
    :class:`~sparkglass.service.byte_cache.ByteLRU` of ``result_cache_bytes``. A cached body
    is sent by copying one chunk at a time out of the cache, never by holding the body: an
    evicted body is freed at once, and the rest of the response is written from the store
    again. A cached body of at least ``gzip_min_bytes`` is also kept gzip-compressed
    (compressed once, when it is built), and clients that accept gzip get those bytes: when a
    round turns over and 200 open pages fetch its new body, the compression is not done 200
    times (the service's gzip middleware passes a body that already has a
    ``Content-Encoding``).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        max_bytes: int,
        gate: threading.Semaphore,
        streams: StreamGate | None = None,
        stream_wait_s: float = 30.0,
        gzip_min_bytes: int | None = None,
    ) -> None:
        self._sessions = sessions
        #: Cached bodies of at least this size are kept gzip-compressed too (None: never).
        self._gzip_min_bytes = gzip_min_bytes
        self._gate = gate
        self._streams = streams or StreamGate(8)
        self._stream_wait_s = stream_wait_s
        self._cache: ByteLRU[_BodyKey, CachedBody] = ByteLRU(max_bytes)
        self._entry_max = max_bytes // ENTRY_SHARE
        #: key -> body size, for bodies found too large for the cache, so the next request
        #: streams at once instead of building it again.
        self._too_large: ByteLRU[_BodyKey, int] = ByteLRU(SIZE_MEMO_BYTES)
        #: key -> the body being built for the cache now (its size, or None: not cached).
        #: When a round turns over, every open page asks for its new body within a second;
        #: they wait for the one being built instead of each writing it from the store.
        self._building: dict[_BodyKey, concurrent.futures.Future[int | None]] = {}
        self._building_lock = threading.Lock()

    @property
    def cache(self) -> ByteLRU[_BodyKey, CachedBody]:
        """The cache of rendered bodies (its ``bytes`` never exceed ``max_bytes``)."""
        return self._cache

    @property
    def streams(self) -> StreamGate:
        """The gate of bodies sent from the store."""
        return self._streams

    async def stream(self, plan: BodyPlan, headers: dict[str, str]) -> Response:
        """The body of ``plan`` written from the store a page at a time, once a slot of the
        stream gate is free: waits up to ``stream_wait_s`` on the event loop (no thread, no
        record held), else raises 503 with ``Retry-After``. The slot is given back when the
        body ends, fails or its client goes away."""
        if not await self._streams.acquire(self._stream_wait_s):
            raise HTTPException(
                503,
                detail=f"{self._streams.slots} result bodies are being sent from the store "
                "(stream_concurrency); retry shortly",
                headers={"Retry-After": str(_RETRY_AFTER_S)},
            )
        held = _Held(self._streams)
        return StreamingResponse(
            _gated(render_body(self._sessions, plan), held),
            media_type=_MEDIA_TYPE,
            headers=headers,
        )

    def plan(
        self, head: DataSampleResult, subtask_index: int | None, max_records: int | None
    ) -> BodyPlan:
        """:func:`plan_body` in a session of its own (blocking)."""
        if not has_records(head) and subtask_index is None and max_records is None:
            return BodyPlan(head, ())
        with self._sessions() as session:
            return plan_body(session, head, subtask_index, max_records)

    async def response(
        self,
        head: DataSampleResult,
        subtask_index: int | None,
        max_records: int | None,
        if_none_match: str | None = None,
        accept_gzip: bool = False,
        scope: str = "",
    ) -> tuple[Response, int]:
        """The response carrying ``head``'s body after the post-filters, and how many records
        it carries. A request whose ``if_none_match`` matches the body's :func:`entity_tag`
        gets ``304`` and nothing is read from the store. Runs store reads in the thread
        pool; a cached body is sent from the event loop, compressed when the client
        ``accept_gzip`` and the body was large enough to be compressed. ``scope`` names the
        application (``namespace/name``) the body is cached for."""
        etag, unchanged = conditional_answer(head, subtask_index, max_records, if_none_match)
        if unchanged is not None:
            return unchanged, 0
        headers = validator_headers(etag)
        cacheable = head.status is not SampleStatus.PENDING and head.round_id is not None
        key: _BodyKey = (scope, etag, subtask_index, max_records)
        plan: BodyPlan | None = None
        if cacheable:
            cached = self._cache.get(key)
            if cached is None and self._too_large.get(key) is None and has_records(head):
                size, plan = await self._build_once(key, head)
                # None when it was evicted meanwhile: then it comes from the store below.
                cached = None if size is None else self._cache.get(key)
            if cached is not None:
                return self._from_cache(key, cached, head, headers, accept_gzip)
        if plan is None:
            plan = await run_in_threadpool(self.plan, head, subtask_index, max_records)
        if not plan.quotas:  # the head alone: a few hundred bytes
            body = b"".join(render_body(self._sessions, plan))
            return Response(body, media_type=_MEDIA_TYPE, headers=headers), 0
        return await self.stream(plan, headers), plan.record_count

    async def _build_once(
        self, key: _BodyKey, head: DataSampleResult
    ) -> tuple[int | None, BodyPlan | None]:
        """Build the body of ``key`` into the cache, once however many requests ask at the
        same time: the first plans and renders it, the others wait for it (on the event
        loop, holding nothing). Returns its size (``None``: not cached: too large, no memory
        pass free, no records, or the build failed) and the plan when this request made it
        (``None`` for the waiters)."""
        _, _, subtask_index, max_records = key
        with self._building_lock:
            building = self._building.get(key)
            if building is None:
                building = concurrent.futures.Future()
                # Running: it can no longer be cancelled, so set_result() below always holds.
                building.set_running_or_notify_cancel()
                self._building[key] = building
                leader = True
            else:
                leader = False
        if not leader:
            # Shielded: a waiter that goes away must not cancel the build the others wait on.
            return await asyncio.shield(asyncio.wrap_future(building)), None
        size: int | None = None
        try:
            plan = await run_in_threadpool(self.plan, head, subtask_index, max_records)
            if plan.quotas:
                size = await run_in_threadpool(self._fill, key, plan)
            return size, plan
        finally:
            try:
                with self._building_lock:
                    self._building.pop(key, None)
            finally:
                building.set_result(size)

    def forget(self, scope: str) -> None:
        """Drop the cached bodies of an application (``namespace/name``), of every kind
        (:func:`body_scope`): it was deleted, replaced or registered again."""

        def of_it(key: _BodyKey) -> bool:
            return key[0] == scope or key[0].startswith(scope + "@")

        self._cache.discard_where(of_it)
        self._too_large.discard_where(of_it)

    def _fill(self, key: _BodyKey, plan: BodyPlan) -> int | None:
        """Render ``plan`` into the cache if a memory pass is free and the body fits an
        entry; its size, or ``None`` when it was not cached."""
        if not self._gate.acquire(blocking=False):
            return None
        try:
            out = io.BytesIO()
            for chunk in render_body(self._sessions, plan):
                out.write(chunk)
                if out.tell() > self._entry_max:
                    self._too_large.put(key, out.tell(), _SIZE_ENTRY_BYTES)
                    return None
            body = out.getvalue()
            del out
        finally:
            # Compression below needs no pass: a round saving meanwhile must not wait for it.
            self._gate.release()
        gzipped = None
        if self._gzip_min_bytes is not None and len(body) >= self._gzip_min_bytes:
            gzipped = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
            # Kept only when it is sent: in one chunk, and smaller than the body.
            if len(gzipped) > CHUNK_BYTES or len(gzipped) >= len(body):
                gzipped = None
        entry = CachedBody(body, gzipped, plan.record_count)
        return len(body) if self._cache.put(key, entry, entry.size) else None

    def _from_cache(
        self,
        key: _BodyKey,
        cached: CachedBody,
        head: DataSampleResult,
        headers: dict[str, str],
        accept_gzip: bool = False,
    ) -> tuple[Response, int]:
        """A response sending ``cached``, the cached body of ``key``, and the records it
        carries: its gzip form when the client accepts it and it fits one chunk, else the
        body (in chunks read from the cache one at a time when it is larger than one)."""
        _, _, subtask_index, max_records = key
        records = cached.record_count
        if accept_gzip and cached.gzipped is not None and len(cached.gzipped) <= CHUNK_BYTES:
            response = Response(
                cached.gzipped,
                media_type=_MEDIA_TYPE,
                headers={**headers, "content-encoding": "gzip"},
            )
            return response, records
        size = len(cached.raw)
        if size <= CHUNK_BYTES:
            return Response(cached.raw, media_type=_MEDIA_TYPE, headers=headers), records
        # The body itself is not held across the send: each chunk is looked up again.
        del cached

        async def pieces() -> AsyncIterator[bytes]:
            offset = 0
            while offset < size:
                entry = self._cache.get(key)
                if entry is None:  # evicted meanwhile: the rest comes from the store
                    # Under the stream gate like any body from the store; the answer has
                    # started, so it waits as long as it takes (holding nothing meanwhile).
                    await self._streams.acquire(None)
                    held = _Held(self._streams)
                    plan = await run_in_threadpool(self.plan, head, subtask_index, max_records)
                    rest = _skip(render_body(self._sessions, plan), offset)
                    async for chunk in _gated(rest, held):
                        yield chunk
                    return
                # A copy of one chunk: the body itself is not kept across the send.
                chunk = entry.raw[offset : offset + CHUNK_BYTES]
                del entry
                offset += len(chunk)
                yield chunk

        response = StreamingResponse(
            pieces(), media_type=_MEDIA_TYPE, headers={**headers, "content-length": str(size)}
        )
        return response, records

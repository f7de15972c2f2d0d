"""The JSON body of a stored round: written from the store a page of records at a time, and
a cache of finished bodies bounded in bytes.

A result may be ~50 MB of JSON (5000 records of 10000 characters). Decoded into pydantic
objects and serialized whole, it cost twice that per request, and a few concurrent polls
of large results took the service past 1 GB (issue 12, item 5). Here nothing holds a whole
large result:

* :func:`plan_body` reads only the head of the round (the round row) and how many records
  each subtask stored, and applies the ``subtaskIndex``/``maxRecords`` post-filters to
  those counts with the contract's own :func:`fair_truncate`;
* :func:`render_body` writes the body from the plan, reading ``PAGE_RECORDS`` records per
  store query and yielding chunks of about ``CHUNK_BYTES``: a response being sent holds one
  page and one chunk whatever the result's size, and no database transaction stays open
  between pages. The bytes are exactly ``model_dump_json(by_alias=True)`` of the
  post-filtered :class:`DataSampleResult`;
* :class:`ResultBodies` keeps finished bodies, per (round, post-filters), of at most a
  quarter of ``result_cache_bytes`` each in a :class:`~sparkglass.service.byte_cache.ByteLRU`
  of ``result_cache_bytes``. A cached body is sent by copying one chunk at a time out of the
  cache, never by holding the body: an evicted body is freed at once, and the rest of the
  response is written from the store again;
* every body carries a weak ``ETag`` (:func:`entity_tag`), and a request whose
  ``If-None-Match`` names it gets ``304 Not Modified`` with no body: 200 open pages polling an
  unchanged result cost the service a hash of the round's head each, not 200 bodies.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from fastapi import Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter
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
from .store import repository

#: Records read per store query while a body is written.
PAGE_RECORDS = 100
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
    counts, ``stale``) and the filters determine the body's bytes."""
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
    """The ``ETag`` and ``Cache-Control`` headers every data-sample body carries."""
    return {"etag": etag, "cache-control": CACHE_CONTROL}


def not_modified_response(etag: str) -> Response:
    """``304 Not Modified`` for ``etag``: no body, the validator headers."""
    return Response(status_code=304, headers=validator_headers(etag))


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


def render_body(sessions: sessionmaker[Session], plan: BodyPlan) -> Iterator[bytes]:
    """The JSON body of ``plan`` in chunks of about ``CHUNK_BYTES`` (a chunk exceeds it by at
    most one record). Each page of records is one short session of ``sessions``.

    A round deleted meanwhile (retention, its application removed) ends its records early:
    the body stays valid JSON with fewer records than ``totalRecordCount`` says.
    """
    head = plan.head.model_dump_json(by_alias=True).encode()
    split = head.index(_SAMPLES + b"]") + len(_SAMPLES)
    buf = bytearray(head[:split])
    round_id = plan.head.round_id or ""
    for n, (subtask, quota) in enumerate(plan.quotas):
        buf += b'%s{"subtaskIndex":%d,"records":[' % (b"," if n else b"", subtask)
        sent = 0
        after: int | None = None
        while sent < quota:
            with sessions() as session:
                page = repository.record_page(
                    session,
                    round_id,
                    subtask,
                    after_id=after,
                    limit=min(PAGE_RECORDS, quota - sent),
                )
            if not page:
                break
            for record_id, ts, data, data_type, truncated in page:
                if sent:
                    buf += b","
                buf += _RECORD.dump_json(
                    SampledRecord(
                        sample_timestamp=ts, data=data, data_type=data_type, truncated=truncated
                    ),
                    by_alias=True,
                )
                sent += 1
                after = record_id
                if len(buf) >= CHUNK_BYTES:
                    yield bytes(buf)
                    buf.clear()
            del page
        buf += b"]}"
    buf += head[split:]
    yield bytes(buf)


def _skip(chunks: Iterator[bytes], offset: int) -> Iterator[bytes]:
    """``chunks`` without their first ``offset`` bytes."""
    for chunk in chunks:
        if offset >= len(chunk):
            offset -= len(chunk)
            continue
        yield chunk[offset:] if offset else chunk
        offset = 0


#: A rendered body's cache key: (round id, stale, subtaskIndex, maxRecords).
_BodyKey = tuple[str, bool, int | None, int | None]


class ResultBodies:
    """Sends bodies of stored rounds, keeping finished unfiltered ones in a byte budget.

    ``max_bytes`` is ``result_cache_bytes`` (0: nothing is cached); ``gate`` the service's
    memory gate (``result_concurrency``): a body is built for the cache only while a pass
    is free, otherwise it is sent from the store (nobody waits for memory).
    """

    def __init__(
        self, sessions: sessionmaker[Session], max_bytes: int, gate: threading.Semaphore
    ) -> None:
        self._sessions = sessions
        self._gate = gate
        self._cache: ByteLRU[_BodyKey, bytes] = ByteLRU(max_bytes)
        self._entry_max = max_bytes // ENTRY_SHARE
        #: key -> body size, for bodies found too large for the cache, so the next request
        #: streams at once instead of building it again.
        self._too_large: ByteLRU[_BodyKey, int] = ByteLRU(SIZE_MEMO_BYTES)
        #: key -> records in the cached body (a filtered body carries fewer than the head).
        self._record_counts: ByteLRU[_BodyKey, int] = ByteLRU(SIZE_MEMO_BYTES)

    @property
    def cache(self) -> ByteLRU[_BodyKey, bytes]:
        """The cache of rendered bodies (its ``bytes`` never exceed ``max_bytes``)."""
        return self._cache

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
    ) -> tuple[Response, int]:
        """The response carrying ``head``'s body after the post-filters, and how many records
        it carries. A request whose ``if_none_match`` matches the body's :func:`entity_tag`
        gets ``304`` and nothing is read from the store. Runs store reads in the thread
        pool; a cached body is sent from the event loop."""
        etag = entity_tag(head, subtask_index, max_records)
        if not_modified(if_none_match, etag):
            return not_modified_response(etag), 0
        headers = validator_headers(etag)
        cacheable = head.status is not SampleStatus.PENDING and head.round_id is not None
        key: _BodyKey = (head.round_id or "", head.stale, subtask_index, max_records)
        if cacheable:
            size = self._cached_size(key)
            if size is not None:
                return self._from_cache(key, size, head, headers), self._records_of(key, head)
        plan = await run_in_threadpool(self.plan, head, subtask_index, max_records)
        if not plan.quotas:  # the head alone: a few hundred bytes
            body = b"".join(render_body(self._sessions, plan))
            return Response(body, media_type=_MEDIA_TYPE, headers=headers), 0
        if cacheable and self._too_large.get(key) is None:
            size = await run_in_threadpool(self._fill, key, plan)
            if size is not None:
                self._record_counts.put(key, plan.record_count, _SIZE_ENTRY_BYTES)
                return self._from_cache(key, size, head, headers), plan.record_count
        return (
            StreamingResponse(
                render_body(self._sessions, plan), media_type=_MEDIA_TYPE, headers=headers
            ),
            plan.record_count,
        )

    def _records_of(self, key: _BodyKey, head: DataSampleResult) -> int:
        """Records in the cached body of ``key`` (for the audit log)."""
        count = self._record_counts.get(key)
        return head.total_record_count if count is None else count

    def _cached_size(self, key: _BodyKey) -> int | None:
        body = self._cache.get(key)
        return None if body is None else len(body)

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
            return len(body) if self._cache.put(key, body, len(body)) else None
        finally:
            self._gate.release()

    def _from_cache(
        self, key: _BodyKey, size: int, head: DataSampleResult, headers: dict[str, str]
    ) -> Response:
        """A response sending the cached body of ``key`` (``size`` bytes)."""
        _, _, subtask_index, max_records = key
        if size <= CHUNK_BYTES:
            body = self._cache.get(key)
            if body is not None:
                return Response(body, media_type=_MEDIA_TYPE, headers=headers)

        async def pieces() -> AsyncIterator[bytes]:
            offset = 0
            while offset < size:
                body = self._cache.get(key)
                if body is None:  # evicted meanwhile: the rest comes from the store
                    plan = await run_in_threadpool(self.plan, head, subtask_index, max_records)
                    rest = _skip(render_body(self._sessions, plan), offset)
                    async for chunk in iterate_in_threadpool(rest):
                        yield chunk
                    return
                # A copy of one chunk: the body itself is not kept across the send.
                chunk = body[offset : offset + CHUNK_BYTES]
                del body
                offset += len(chunk)
                yield chunk

        return StreamingResponse(
            pieces(), media_type=_MEDIA_TYPE, headers={**headers, "content-length": str(size)}
        )

"""Conditional and compressed data-sample bodies: a weak ``ETag`` per (round, post-filters),
``If-None-Match`` answered ``304`` with no body and nothing read from the store, gzip for
large bodies; on SQLite and PostgreSQL, through the real service."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.middleware import gzip as gzip_middleware

from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service import result_body
from sparkglass.service.content_coding import accept_encoding, accepts_gzip
from sparkglass.service.result_body import entity_tag, not_modified
from tests.support.data_sample_api import BASE, poll_until_done, sample_url
from tests.support.scripted_driver import FakeDriver

from .conftest import ServiceFactory, auth


def test_unchanged_result_answers_304_and_reads_no_store(
    make_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_service()
    done = poll_until_done(client, "parse")
    first = client.get(sample_url("parse"), headers=auth("viewer"))
    etag = first.headers["etag"]
    assert etag.startswith('W/"') and first.headers["cache-control"] == "no-store"
    assert first.json()["roundId"] == done["roundId"]

    # A 304 neither plans nor renders a body: fail loudly if the store is asked.
    def no_store(*_: object, **__: object) -> None:
        raise AssertionError("a 304 read the store")

    monkeypatch.setattr(result_body, "plan_body", no_store)
    monkeypatch.setattr(result_body, "render_body", no_store)
    again = client.get(sample_url("parse"), headers={**auth("viewer"), "If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    # A list of tags, and the strong form of the same tag, match too (weak comparison).
    for header in (f'W/"other", {etag}', etag.removeprefix("W/"), "*"):
        r = client.get(sample_url("parse"), headers={**auth("viewer"), "If-None-Match": header})
        assert r.status_code == 304, header


def test_the_tag_changes_with_filters_and_with_the_round(
    make_service: ServiceFactory, settings_left_to_the_service: FakeDriver
) -> None:
    client = make_service(refresh_interval_seconds=0.5)
    done = poll_until_done(client, "parse")
    plain = client.get(sample_url("parse"), headers=auth("viewer")).headers["etag"]
    one = client.get(sample_url("parse"), headers=auth("viewer"), params={"subtaskIndex": 1})
    assert one.headers["etag"] != plain
    # A stale tag gets the new body, never a 304.
    r = client.get(
        sample_url("parse"),
        headers={**auth("viewer"), "If-None-Match": plain},
        params={"subtaskIndex": 1},
    )
    assert r.status_code == 200 and r.json()["totalRecordCount"] == 3
    # After the refresh interval a new round replaces the result: the old tag no longer matches.
    deadline_body = poll_until_done(client, "parse")
    while deadline_body["roundId"] == done["roundId"]:
        deadline_body = poll_until_done(client, "parse")
    r = client.get(sample_url("parse"), headers={**auth("viewer"), "If-None-Match": plain})
    assert r.status_code == 200 and r.json()["roundId"] != done["roundId"]


def test_stored_round_url_answers_304(make_service: ServiceFactory) -> None:
    client = make_service()
    done = poll_until_done(client, "parse")
    url = f"{BASE}/rounds/{done['roundId']}"
    first = client.get(url, headers=auth("viewer"))
    assert first.status_code == 200 and first.json()["totalRecordCount"] == 9
    r = client.get(url, headers={**auth("viewer"), "If-None-Match": first.headers["etag"]})
    assert r.status_code == 304 and r.content == b""
    # Unauthenticated: 401 before any validator is looked at.
    r = client.get(url, headers={"If-None-Match": first.headers["etag"]})
    assert r.status_code == 401


def test_large_bodies_are_gzipped_small_ones_are_not(make_service: ServiceFactory) -> None:
    client = make_service(gzip_min_bytes=200)
    poll_until_done(client, "parse")
    zipped = client.get(sample_url("parse"), headers={**auth("viewer"), "Accept-Encoding": "gzip"})
    assert zipped.headers.get("content-encoding") == "gzip"
    plain = client.get(
        sample_url("parse"), headers={**auth("viewer"), "Accept-Encoding": "identity"}
    )
    assert plain.headers.get("content-encoding") is None
    assert len(plain.content) > 200
    assert zipped.json() == plain.json()  # httpx decoded it: the same JSON
    # An answer under the threshold (a 401's few bytes) is sent as it is.
    small = client.get(sample_url("parse"), headers={"Accept-Encoding": "gzip"})
    assert small.status_code == 401 and len(small.content) < 200
    assert "content-encoding" not in small.headers
    # The 304 has nothing to compress.
    r = client.get(
        sample_url("parse"),
        headers={
            **auth("viewer"),
            "Accept-Encoding": "gzip",
            "If-None-Match": zipped.headers["etag"],
        },
    )
    assert r.status_code == 304 and "content-encoding" not in r.headers


def test_if_none_match_parsing() -> None:
    tag = 'W/"abc"'
    assert not_modified('W/"abc"', tag) and not_modified('"abc"', tag)
    assert not_modified(' W/"x" ,W/"abc"', tag) and not_modified("*", tag)
    assert not not_modified(None, tag) and not not_modified("", tag)
    assert not not_modified('W/"abcd"', tag) and not not_modified('"ab"', tag)


def test_the_tag_depends_on_the_head_and_the_filters() -> None:
    from sparkglass.runtime.contract.sample_result import DataSampleResult

    head = DataSampleResult.model_validate({"status": "COMPLETE", "roundId": "r1"})
    assert entity_tag(head) == entity_tag(head.model_copy())
    assert entity_tag(head) != entity_tag(head, subtask_index=0)
    assert entity_tag(head, max_records=5) != entity_tag(head, subtask_index=5)
    assert entity_tag(head) != entity_tag(head.model_copy(update={"stale": True}))
    assert entity_tag(head) != entity_tag(head.model_copy(update={"round_id": "r2"}))


def test_a_cached_body_is_compressed_once_for_every_page(
    make_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_service(gzip_min_bytes=200)
    compressed: list[int] = []
    real_compress = gzip.compress

    def counting(data: bytes, *args: object, **kwargs: object) -> bytes:
        compressed.append(len(data))
        return real_compress(data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(result_body.gzip, "compress", counting)
    done = poll_until_done(client, "many")  # 5,000 records: the body is cached on first read
    headers = {**auth("viewer"), "Accept-Encoding": "gzip"}
    # The middleware must not compress these: they leave compressed already.
    middleware_compressions: list[int] = []
    real_compressobj = gzip_middleware.zlib.compressobj

    def watched(*args: object, **kwargs: object) -> object:
        middleware_compressions.append(1)
        return real_compressobj(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gzip_middleware.zlib, "compressobj", watched)
    answers = [client.get(sample_url("many"), headers=headers) for _ in range(5)]
    assert compressed == [compressed[0]] and compressed[0] > 200  # once, the whole body
    assert middleware_compressions == []
    entries = [e for _, (e, _) in state_cache_items(client)]
    assert len(entries) == 1 and entries[0].gzipped is not None
    for r in answers:
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["vary"] == "Accept-Encoding"
        assert int(r.headers["content-length"]) == len(entries[0].gzipped)
        assert r.json()["totalRecordCount"] == done["totalRecordCount"] == 5000
    # The same JSON as the uncompressed answer once decoded (httpx decodes gzip).
    identity = {**auth("viewer"), "Accept-Encoding": "identity"}
    plain = client.get(sample_url("many"), headers=identity)
    assert "content-encoding" not in plain.headers
    assert answers[0].json() == plain.json()


def state_cache_items(client: TestClient) -> list[Any]:
    """The service's cached bodies as ``(key, (entry, size))``."""
    cache = client.app.state.sparkglass.coordinator.bodies.cache  # type: ignore[attr-defined]
    with cache._lock:
        return list(cache._data.items())


def test_bodies_are_cached_per_application_and_forgotten_with_it(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    bodies = client.app.state.sparkglass.coordinator.bodies  # type: ignore[attr-defined]
    poll_until_done(client, "parse")
    head = next(iter(state_cache_items(client)))  # the body the poll cached
    (scope, _, _, _), (entry, _) = head
    assert scope == "local/flights" and entry.record_count == 9

    done = client.get(sample_url("parse"), headers=auth("viewer")).json()
    result = DataSampleResult.model_validate({**done, "samples": []})
    # The same round id under another application is another body (built from the store).
    asyncio.run(bodies.response(result, None, None, scope="other/app"))
    assert {k[0] for k, _ in state_cache_items(client)} == {"local/flights", "other/app"}
    bodies.forget("local/flights")
    assert {k[0] for k, _ in state_cache_items(client)} == {"other/app"}


@pytest.mark.parametrize(
    ("header", "takes_gzip"),
    [
        (None, False),
        ("", False),
        ("gzip", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("br, gzip;q=0.5", True),
        ("deflate, gzip ; q=1.0", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("gzip;q=oops", False),
        ("gzip;q=2", False),
        ("gzip;q=inf", False),
        ("gzip;q=1_0", False),
        ("gzip;Q=0.001", True),
        ("gzip;q=1.000", True),
        ("identity", False),
        ("*", True),
        ("*;q=0", False),
        ("*, gzip;q=0", False),  # listed beats the wildcard
        ("gzip;q=0, *", False),
        ("notgzip", False),  # a coding whose name contains the letters is another coding
    ],
)
def test_accept_encoding_is_negotiated_by_weight(header: str | None, takes_gzip: bool) -> None:
    assert accepts_gzip(header) is takes_gzip


def test_gzip_refused_with_q0_gets_identity_and_every_answer_varies(
    make_service: ServiceFactory,
) -> None:
    client = make_service(gzip_min_bytes=200)
    poll_until_done(client, "many")  # a cached body with a gzip form
    poll_until_done(client, "parse")
    for vertex in ("many", "parse"):
        refused = client.get(
            sample_url(vertex), headers={**auth("viewer"), "Accept-Encoding": "gzip;q=0"}
        )
        assert refused.status_code == 200 and "content-encoding" not in refused.headers
        assert refused.headers["vary"] == "Accept-Encoding"
        taken = client.get(
            sample_url(vertex), headers={**auth("viewer"), "Accept-Encoding": "gzip"}
        )
        assert taken.headers["content-encoding"] == "gzip"
        assert taken.headers["vary"] == "Accept-Encoding"  # once, whoever compressed
        assert taken.json() == refused.json()
        # The 304 says what the 200 would have: the body depends on Accept-Encoding.
        r = client.get(
            sample_url(vertex),
            headers={**auth("viewer"), "If-None-Match": taken.headers["etag"]},
        )
        assert r.status_code == 304 and r.headers["vary"] == "Accept-Encoding"


def test_a_body_the_middleware_compresses_names_accept_encoding_once(
    make_service: ServiceFactory,
) -> None:
    # No body cache: every body streams from the store and the gzip middleware compresses it.
    client = make_service(gzip_min_bytes=200, result_cache_bytes=0)
    poll_until_done(client, "parse")
    taken = client.get(sample_url("parse"), headers={**auth("viewer"), "Accept-Encoding": "gzip"})
    assert taken.headers["content-encoding"] == "gzip"
    assert taken.headers["vary"] == "Accept-Encoding"
    refused = client.get(
        sample_url("parse"), headers={**auth("viewer"), "Accept-Encoding": "gzip;q=0, br"}
    )
    assert "content-encoding" not in refused.headers
    assert refused.headers["vary"] == "Accept-Encoding"
    assert refused.json() == taken.json()


def test_accept_encoding_sent_on_several_lines_is_one_list() -> None:
    from starlette.datastructures import Headers

    lines = Headers(raw=[(b"accept-encoding", b"br"), (b"accept-encoding", b"gzip;q=0")])
    assert accept_encoding(lines) == "br, gzip;q=0" and not accepts_gzip(accept_encoding(lines))
    assert accept_encoding(Headers(raw=[])) is None

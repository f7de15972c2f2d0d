"""The fresh poll's fast path (``service/fresh_poll.py``): a conditional poll of a fresh,
unchanged result is answered ``304`` from memory, with the headers, metric and audit event
of the route's own 304; every other poll is answered by the route, as before.

Which path answered is told by the route's authorization call
(``routers.samples.authorized_principal``), which the fast path never makes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sparkglass.service.routers import samples
from sparkglass.service.state import ServiceState
from sparkglass.service.store.repository import AuditRecord
from tests.support.data_sample_api import poll_until_done, sample_url
from tests.support.fresh_poll import long_decisions as long_decisions
from tests.support.fresh_poll import recorded_audit
from tests.support.fresh_poll import route_calls as route_calls
from tests.support.scripted_driver import FakeDriver

from .conftest import ServiceFactory, auth

pytestmark = pytest.mark.usefixtures("long_decisions")

TEMPLATE = "/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/data-sample"


@pytest.fixture
def audited(make_service: ServiceFactory) -> Iterator[tuple[TestClient, list[AuditRecord]]]:
    """A service with a finished round of ``parse``, and the audit events recorded after."""
    client = make_service()
    poll_until_done(client, "parse")
    yield client, recorded_audit(_state(client))


def _state(client: TestClient) -> ServiceState:
    state: ServiceState = client.app.state.sparkglass  # type: ignore[attr-defined]
    return state


def _forget_decisions(client: TestClient) -> None:
    """Empty the route layer's caches: the next poll is answered by the route."""
    _state(client).principal_cache.clear()
    _state(client).decision_cache.clear()


def _answered_304(client: TestClient) -> float:
    value = _state(client).metrics.registry.get_sample_value(
        "sparkglass_http_requests_total", {"method": "GET", "route": TEMPLATE, "code": "304"}
    )
    return value or 0.0


def _conditional(client: TestClient, etag: str, vertex: str = "parse", **kw: Any) -> Any:
    return client.get(sample_url(vertex), headers={**auth("viewer"), "If-None-Match": etag}, **kw)


def test_a_fresh_unchanged_poll_gets_the_routes_304_without_the_route(
    audited: tuple[TestClient, list[AuditRecord]], route_calls: list[str]
) -> None:
    client, records = audited
    etag = client.get(sample_url("parse"), headers=auth("viewer")).headers["etag"]
    _forget_decisions(client)
    route_calls.clear()
    before = _answered_304(client)
    slow = _conditional(client, etag)
    assert slow.status_code == 304 and route_calls == ["local"]
    fast = _conditional(client, etag)
    assert fast.status_code == 304 and route_calls == ["local"]  # the route was not asked
    assert fast.content == b""
    # Headers identical, in order: validators, Vary, and the security middlewares' headers.
    assert fast.headers.multi_items() == slow.headers.multi_items()
    assert fast.headers["etag"] == etag and fast.headers["cache-control"] == "no-store"
    assert fast.headers["vary"] == "Accept-Encoding"
    assert fast.headers["x-content-type-options"] == "nosniff"
    # Counted under the route's template, like the route's own 304.
    assert _answered_304(client) == before + 2
    # The same audit event (but for its time).
    slow_event, fast_event = records[-2:]
    assert dataclasses.replace(fast_event, at=0) == dataclasses.replace(slow_event, at=0)
    assert fast_event.action == "read" and fast_event.record_count == 0
    assert fast_event.actor == "viewer-user" and fast_event.vertex == "parse"


def test_many_fresh_polls_never_reach_the_route_nor_the_authenticator(
    audited: tuple[TestClient, list[AuditRecord]],
    route_calls: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, records = audited
    etag = client.get(sample_url("parse"), headers=auth("viewer")).headers["etag"]
    asked: list[str] = []
    authenticator = _state(client).authenticator

    def asking(*_: object) -> None:
        asked.append("asked")

    monkeypatch.setattr(authenticator, "authenticate", asking)
    monkeypatch.setattr(authenticator, "authorize", asking)
    route_calls.clear()
    seen = len(records)
    # Other headers, an accepted gzip and a parameter the route ignores change nothing.
    for extra, params in (({}, {}), ({"Accept-Encoding": "gzip"}, {}), ({}, {"_": "17"})):
        r = client.get(
            sample_url("parse"),
            headers={**auth("viewer"), "If-None-Match": etag, **extra},
            params=params,
        )
        assert r.status_code == 304
    # A list of tags, the strong form and ``*`` match as the route compares them.
    for header in (f'W/"other", {etag}', etag.removeprefix("W/"), "*"):
        assert _conditional(client, header).status_code == 304, header
    assert route_calls == [] and asked == []
    assert len(records) == seen + 6


def test_everything_else_is_answered_by_the_route_as_before(
    make_service: ServiceFactory, route_calls: list[str]
) -> None:
    client = make_service()
    poll_until_done(client, "parse")
    plain = client.get(sample_url("parse"), headers=auth("viewer"))
    etag = plain.headers["etag"]

    def by_the_route(response: Any) -> Any:
        assert route_calls, "the fast path answered"
        route_calls.clear()
        return response

    route_calls.clear()
    # A tag that does not match: the body, as without If-None-Match.
    r = by_the_route(_conditional(client, 'W/"0123456789abcdef01234567"'))
    assert r.status_code == 200 and r.content == plain.content
    assert r.headers["etag"] == etag
    # No If-None-Match at all.
    r = by_the_route(client.get(sample_url("parse"), headers=auth("viewer")))
    assert r.status_code == 200 and r.content == plain.content
    # HEAD is not the fast path's (the route takes GET only: 405 as before).
    r = client.head(sample_url("parse"), headers={**auth("viewer"), "If-None-Match": etag})
    assert r.status_code == 405
    # Every parameter the route reads: the route answers, whatever it answers (a body of
    # its own for a post-filter, a narrowed round, or its 304 for ``kind=output``, which is
    # the plain request).
    for params, status in (
        ({"subtaskIndex": "1"}, {200}),
        ({"maxRecords": "2"}, {200}),
        ({"kind": "output"}, {304}),
        ({"columns": "carrier"}, {200, 403, 422}),
        ({"filter": "dep_delay > 60"}, {200, 403, 422}),
        ({"expectation": "x"}, {200, 403, 422}),
    ):
        r = by_the_route(_conditional(client, etag, params=params))
        assert r.status_code in status, (params, r.status_code, r.text)
    # A parameter out of range: FastAPI's 422, before the route's body runs.
    r = _conditional(client, etag, params={"subtaskIndex": "x"})
    assert r.status_code == 422 and "subtaskIndex" in r.json()["detail"]
    one = client.get(sample_url("parse"), headers=auth("viewer"), params={"subtaskIndex": 1})
    route_calls.clear()
    r = by_the_route(_conditional(client, one.headers["etag"], params={"subtaskIndex": 1}))
    assert r.status_code == 304  # the route's own 304 of a narrowed body
    # An unknown vertex: the route's 404, listing the vertices, whatever the tag.
    bare = client.get(sample_url("nope"), headers=auth("viewer"))
    route_calls.clear()
    r = by_the_route(_conditional(client, etag, vertex="nope"))
    assert r.status_code == 404 and r.json() == bare.json()
    # Another vertex (with a fresh result of its own) with this vertex's tag: its body,
    # never a 304.
    other = poll_until_done(client, "airlines")
    route_calls.clear()
    r = by_the_route(_conditional(client, etag, vertex="airlines"))
    assert r.status_code == 200 and r.json()["roundId"] == other["roundId"]
    r = _conditional(client, r.headers["etag"], vertex="airlines")
    assert r.status_code == 304 and not route_calls  # its own tag: the fast path's 304
    # An unknown application.
    r = by_the_route(
        client.get(
            sample_url("parse").replace("/flights/", "/nope/"),
            headers={**auth("viewer"), "If-None-Match": etag},
        )
    )
    assert r.status_code == 404


def test_an_answer_no_longer_fresh_is_the_routes(
    make_service: ServiceFactory,
    settings_left_to_the_service: FakeDriver,
    route_calls: list[str],
) -> None:
    client = make_service(refresh_interval_seconds=0.5)
    poll_until_done(client, "parse")
    etag = client.get(sample_url("parse"), headers=auth("viewer")).headers["etag"]
    time.sleep(0.6)  # past the refresh interval: the fresh answer has expired
    route_calls.clear()
    r = _conditional(client, etag)
    assert route_calls == ["local"]
    # The viewer may not start a round: the route answers the older result, stale (a body
    # of its own), never the 304 of the fresh one.
    assert r.status_code == 200 and r.json()["stale"] is True
    assert r.headers["etag"] != etag


def test_a_route_that_decides_with_more_is_never_answered_here() -> None:
    """The fast path decides as the route's own dependencies do: a data-sample route that
    gained one (a rate limit, a required header, one added where the router is included)
    or reads a query parameter through one is left to FastAPI, whole."""
    from fastapi import APIRouter, Depends, Query

    from sparkglass.service.fresh_poll import FreshPollMiddleware

    def refuse_all() -> None:
        raise AssertionError("never called: the route is only looked up")

    def reads_a_page(page: int = Query(0)) -> int:
        return page

    for extra in (refuse_all, reads_a_page):
        router = APIRouter()
        router.add_api_route(
            "/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/"
            "data-sample",
            samples.data_sample,
            methods=["GET"],
            dependencies=[Depends(extra)],
        )
        middleware = FreshPollMiddleware(None, None, router.routes)  # type: ignore[arg-type]
        assert middleware._data_sample_route() is None, extra.__name__
    # The route as the service has it is answered here.
    real = FreshPollMiddleware(None, None, samples.router.routes)  # type: ignore[arg-type]
    assert real._data_sample_route() is not None

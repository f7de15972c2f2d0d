"""The benchmarks' load generator (``bench/load_generator.py``) against a real HTTP server on
loopback: pages revalidate with the ETag they hold, each page has connections of its own,
and a closed loop counts what it was answered."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import Response

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import load_generator  # noqa: E402

from tests.service.fake_driver import ServerThread  # noqa: E402

ETAG = 'W/"v1"'
BODY = b'{"roundId":"r1","samples":[]}'


def _server() -> tuple[FastAPI, set[tuple[str, int]], list[str | None], list[str | None]]:
    app = FastAPI()
    peers: set[tuple[str, int]] = set()
    seen: list[str | None] = []
    tags: list[str | None] = []
    lock = threading.Lock()

    @app.get("/p/{n}")
    def page(n: int, request: Request, if_none_match: str | None = Header(None)) -> Response:
        with lock:
            assert request.client is not None
            peers.add((request.client.host, request.client.port))
            seen.append(request.headers.get("authorization"))
            tags.append(if_none_match)
        if if_none_match == ETAG:
            return Response(status_code=304, headers={"etag": ETAG})
        return Response(BODY, media_type="application/json", headers={"etag": ETAG})

    return app, peers, seen, tags


def test_open_loop_pages_revalidate_on_their_own_connections() -> None:
    app, peers, seen, tags = _server()
    pages = 12
    with ServerThread(app) as server:
        result: dict[str, Any] = asyncio.run(
            load_generator.open_loop(
                server.url, "tok", [f"/p/{c % 3}" for c in range(pages)], 0.5, 2.0
            )
        )
    assert result["requests"] == pages * 4
    # A page sends the tag it holds: a request that carried it got a 304, one that did not
    # (the page's first, or one sent on schedule before the first answer came back, as an
    # open loop does on a loaded machine) the body. On an idle machine: 12 bodies, 36 304s.
    assert tags.count(ETAG) + tags.count(None) == len(tags) == pages * 4
    assert result["codes"] == {"200": tags.count(None), "304": tags.count(ETAG)}
    assert result["codes"]["200"] >= pages and result["codes"]["304"] > 0
    assert result["rounds_seen"] == 1
    assert set(seen) == {"Bearer tok"}
    # One HTTP client per page: no two pages share a connection.
    assert pages <= len(peers) <= pages * load_generator.PAGE_CONNECTIONS
    assert [t["second"] for t in result["timeline"]] == [0, 1]
    assert sum(t["full_bodies"] for t in result["timeline"]) == result["codes"]["200"]


def test_closed_loop_counts_answers_and_revalidates_when_asked() -> None:
    app, _, _, _ = _server()
    with ServerThread(app) as server:
        full = asyncio.run(load_generator.closed_loop(server.url, "/p/1", "tok", 4, 0.5, False))
        cond = asyncio.run(load_generator.closed_loop(server.url, "/p/1", "tok", 4, 0.5, True))
    assert full["requests"] > 4 and full["errors"] == 0
    assert full["mean_body_bytes"] == len(BODY)
    # Revalidating clients get the body once each, then empty 304s.
    assert cond["mean_body_bytes"] < len(BODY)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert load_generator.percentile(values, 0.5) == 51.0
    assert load_generator.percentile(values, 0.99) == 99.0
    assert load_generator.percentile([], 0.5) != load_generator.percentile([], 0.5)  # NaN

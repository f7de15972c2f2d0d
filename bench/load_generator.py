"""The load generator of the service benchmarks: open pages polling, and clients asking
again as soon as answered, in a process of its own (it shares no interpreter with Spark or
the service under test).

- :func:`open_loop`: one client per page, each polling once per interval with the
  ``ETag`` it holds, on schedule whether or not its last answer came back;
- :func:`closed_loop`: clients each sending the next request as soon as the last answer
  arrived (throughput);
- :class:`LoadGenerator`: runs either in a spawned child process on request.

Every simulated page or client has its own HTTP client with its own few connections, as
separate browsers do (see :func:`page_clients` for why)."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx

#: How long the open loop waits for answers after its last send, s (then: "unfinished").
OPEN_LOOP_GRACE_S = 30.0
_ROUND_ID = re.compile(rb'"roundId":"([^"]+)"')


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``sorted_values`` by nearest rank; NaN when empty."""
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


#: Connections each open-loop client may hold: a page's poll that is still out when the next
#: is due takes another connection, as a browser's would.
PAGE_CONNECTIONS = 4


@asynccontextmanager
async def page_clients(
    url: str, token: str, clients: int, connections: int
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One HTTP client per simulated page, each with its own few connections, as separate
    browsers have. One client shared by all pages was the bottleneck: httpcore's pool
    checks every pooled connection on each request it finishes (``has_expired``, a socket
    poll each), so with 400 connections the load generator itself fell behind and its
    queue, not the service, made a 200-page open loop's latency (all service threads were
    idle in py-spy dumps of the run)."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    # One TLS context for all: each client would otherwise load the CA bundle (~20 ms), which
    # at 600 pages is seconds of start-up (the URLs are plain HTTP on loopback anyway).
    tls = ssl.create_default_context()
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=url,
                    headers={"Authorization": f"Bearer {token}"},
                    limits=limits,
                    timeout=30,
                    verify=tls,
                )
            )
            for _ in range(clients)
        ]


async def open_loop(
    url: str, token: str, paths: list[str], interval: float, duration: float
) -> dict[str, Any]:
    """One client per entry of ``paths``, each polling its path once per ``interval`` s with
    the ``ETag`` it holds (``If-None-Match``), as an open page does, for ``duration`` s.
    Requests leave on schedule whether or not earlier answers came back; latency runs from
    the scheduled send (no coordinated omission). Returns p50/p99/max latency (ms), the
    answers by code, the share of 304s, the generator's own lag, the rounds seen and a
    per-second ``timeline``."""
    clients = len(paths)
    latencies: list[float] = []
    lags: list[float] = []
    codes: dict[str, int] = {}
    round_ids: set[bytes] = set()
    #: Per second of scheduled sends: (latency ms, code) of each request.
    seconds: dict[int, list[tuple[float, str]]] = {}
    async with page_clients(url, token, clients, PAGE_CONNECTIONS) as pages:
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.5
        held: list[str | None] = [None] * clients

        async def one(client: int, scheduled: float) -> None:
            lags.append((loop.time() - scheduled) * 1000)
            headers = {"If-None-Match": held[client]} if held[client] else {}
            try:
                r = await pages[client].get(paths[client], headers=headers)
                code = str(r.status_code)
                if r.status_code == 200:
                    held[client] = r.headers.get("etag")
                    m = _ROUND_ID.search(r.content[:2000])
                    if m:
                        round_ids.add(m.group(1))
            except httpx.HTTPError as exc:
                code = type(exc).__name__
            latency = (loop.time() - scheduled) * 1000
            latencies.append(latency)
            codes[code] = codes.get(code, 0) + 1
            seconds.setdefault(int(scheduled - start), []).append((latency, code))

        tasks: list[asyncio.Task[None]] = []
        scheduled_of: dict[asyncio.Task[None], float] = {}
        ticks = int(duration / interval)
        for k in range(ticks):
            for c in range(clients):
                # Arrivals spread evenly over the interval, as independent pages are.
                scheduled = start + k * interval + c * interval / clients
                delay = scheduled - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(c, scheduled))
                tasks.append(task)
                scheduled_of[task] = scheduled
        # A saturated service must still yield a figure, not a hung bench: requests still
        # open OPEN_LOOP_GRACE_S after the last send are cancelled and counted as
        # "unfinished", with their latency so far (a lower bound, so p99 is one too).
        _, pending = await asyncio.wait(tasks, timeout=OPEN_LOOP_GRACE_S)
        cut = loop.time()
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if pending:
            codes["unfinished"] = len(pending)
            latencies.extend((cut - scheduled_of[t]) * 1000 for t in pending)
    lat = sorted(latencies)
    return {
        "p50_ms": round(percentile(lat, 0.50), 2),
        "p99_ms": round(percentile(lat, 0.99), 2),
        "max_ms": round(lat[-1], 2) if lat else None,
        "requests": len(lat),
        "codes": codes,
        "not_modified_share": round(codes.get("304", 0) / max(1, len(lat)), 3),
        "load_generator_lag_p99_ms": round(percentile(sorted(lags), 0.99), 2),
        "rounds_seen": len(round_ids),
        # Where the tail is: each second of sends, its p99 and its full bodies (a round
        # turning over sends every page a body once).
        "timeline": [
            {
                "second": k,
                "p99_ms": round(percentile(sorted(x for x, _ in v), 0.99), 1),
                "full_bodies": sum(1 for _, c in v if c == "200"),
            }
            for k, v in sorted(seconds.items())
        ],
    }


async def closed_loop(
    url: str, path: str, token: str, clients: int, duration: float, conditional: bool
) -> dict[str, Any]:
    count = 0
    bytes_in = 0
    errors = 0
    async with page_clients(url, token, clients, 1) as pages:
        stop = time.monotonic() + duration

        async def client(http: httpx.AsyncClient) -> None:
            nonlocal count, bytes_in, errors
            etag: str | None = None  # the tag of the body this client holds, as a page's
            while time.monotonic() < stop:
                headers = {"If-None-Match": etag} if conditional and etag else {}
                try:
                    r = await http.get(path, headers=headers)
                    if r.status_code in (200, 304):
                        count += 1
                        bytes_in += len(r.content)
                        if r.status_code == 200:
                            etag = r.headers.get("etag")
                    else:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1

        started = time.monotonic()
        await asyncio.gather(*(client(page) for page in pages))
        elapsed = time.monotonic() - started
    return {
        "requests_per_s": count / elapsed,
        "requests": count,
        "errors": errors,
        "mean_body_bytes": bytes_in // max(1, count),
    }


def _serve_jobs(conn: Any) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        kind, kwargs = job
        fn = open_loop if kind == "open" else closed_loop
        conn.send(asyncio.run(fn(**kwargs)))


class LoadGenerator:
    """A child process that runs loads on request (so it shares no interpreter with Spark
    or the service)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_jobs, args=(child,), daemon=True)
        self._proc.start()

    def run(self, kind: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
        self._conn.send((kind, kwargs))
        if not self._conn.poll(timeout):
            raise TimeoutError(f"the {kind} load did not finish within {timeout} s")
        result: dict[str, Any] = self._conn.recv()
        return result

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()

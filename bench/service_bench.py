"""Service benchmark: N clients polling one vertex's data sample for a while.

Default run (``make bench-service``): starts the flights demo pipeline on a local Spark with
sampling on, the service in local mode in front of its driver (SQLite store), then 200
clients poll ``parse`` for 60 s from a separate process (so the load generator does not share
the service's interpreter). Writes ``bench/results/service.json``::

    {"p50_ms": ..., "p99_ms": ..., "requests_per_s": ..., "rounds_started": ...,
     "clients": 200, "duration_s": 60, "errors": 0, ...}

``rounds_started`` is the service's ``sparkglass_rounds_started_total`` over the run: with
the default 60 s refresh interval, all clients share one or two rounds. ``app_cpu_ms_per_poll``
is the service's own CPU cost per poll (see :func:`app_cpu_ms_per_poll`): on a loaded machine
the HTTP stack and the load generator, not the service, bound ``requests_per_s``.

Against a running service instead (e.g. the one ``sparkglass demo`` starts)::

    python bench/service_bench.py --url http://127.0.0.1:8080 --token ... --vertex parse
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

RESULTS = Path(__file__).parent / "results" / "service.json"
_STATUS = re.compile(r'"status":"([A-Z_]+)"')


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k]


def _rounds_started(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    m = re.search(r"^sparkglass_rounds_started_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


async def _load(
    url: str, token: str, app: str, vertex: str, clients: int, duration: float, interval: float
) -> dict[str, Any]:
    """``clients`` concurrent pollers for ``duration`` s; each waits ``interval`` s between
    polls (0: closed loop). Returns latencies (ms), status counts and errors."""
    path = f"/api/v1/namespaces/local/applications/{app}/vertices/{vertex}/data-sample"
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    sizes: list[int] = []
    error_kinds: dict[str, int] = {}
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=60
    ) as http:
        stop = time.monotonic() + duration

        async def client() -> None:
            nonlocal errors
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                status, head, size = 0, "", 0
                try:
                    r = await http.get(path)
                    status, size = r.status_code, len(r.content)
                    head = r.content[:400].decode(errors="replace")
                except httpx.HTTPError as exc:
                    kind = type(exc).__name__
                    error_kinds[kind] = error_kinds.get(kind, 0) + 1
                latencies.append((time.perf_counter() - t0) * 1000)
                if status == 200:
                    # The status fields lead the body; parsing up to 5000 records per answer
                    # would make this load generator, not the service, the bottleneck.
                    m = _STATUS.search(head)
                    key = (m.group(1) if m else "?") + (" stale" if '"stale":true' in head else "")
                    statuses[key] = statuses.get(key, 0) + 1
                    sizes.append(size)
                else:
                    errors += 1
                    if status:
                        error_kinds[f"HTTP {status}"] = error_kinds.get(f"HTTP {status}", 0) + 1
                if interval:
                    await asyncio.sleep(interval)

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(clients)))
        elapsed = time.monotonic() - started
    return {
        "latencies": latencies,
        "statuses": statuses,
        "errors": errors,
        "elapsed": elapsed,
        "max_body_bytes": max(sizes, default=0),
        "error_kinds": error_kinds,
    }


def _load_in_process(args: tuple[Any, ...], queue: Any) -> None:
    queue.put(asyncio.run(_load(*args)))


def run_load(
    url: str,
    token: str,
    *,
    app: str = "flights",
    vertex: str = "parse",
    clients: int = 200,
    duration: float = 60.0,
    interval: float = 0.0,
) -> dict[str, Any]:
    """Poll from a child process and summarize: p50/p99 (ms), requests/s, rounds started."""
    before = _rounds_started(url)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(
        target=_load_in_process,
        args=((url, token, app, vertex, clients, duration, interval), queue),
    )
    proc.start()
    raw = queue.get(timeout=duration + 300)
    proc.join(timeout=30)
    after = _rounds_started(url)
    lat = sorted(raw["latencies"])
    return {
        "p50_ms": round(_percentile(lat, 0.50), 2),
        "p99_ms": round(_percentile(lat, 0.99), 2),
        "mean_ms": round(statistics.fmean(lat), 2) if lat else None,
        "requests_per_s": round(len(lat) / raw["elapsed"], 1),
        "rounds_started": int(after - before),
        "requests": len(lat),
        "errors": raw["errors"],
        "error_kinds": raw["error_kinds"],
        "statuses": raw["statuses"],
        "max_body_bytes": raw["max_body_bytes"],
        "clients": clients,
        "duration_s": duration,
        "poll_interval_s": interval,
        "vertex": vertex,
    }


def app_cpu_ms_per_poll(app: Any, token: str, vertex: str, n: int = 300) -> float:
    """CPU ms of one poll served from memory inside the ASGI app (in-process through
    ``httpx.ASGITransport``, measured on the event-loop thread): the service's own cost,
    separate from the HTTP server, the load generator and whatever else shares the CPUs."""

    async def run() -> float:
        transport = httpx.ASGITransport(app=app)
        path = f"/api/v1/namespaces/local/applications/flights/vertices/{vertex}/data-sample"
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://bench",
            headers={"Authorization": f"Bearer {token}"},
        ) as c:
            await c.get(path)
            t0 = time.thread_time()
            for _ in range(n):
                await c.get(path)
            return (time.thread_time() - t0) / n * 1000

    return round(asyncio.run(run()), 3)


def _with_demo(args: argparse.Namespace) -> dict[str, Any]:
    """Start the demo pipeline and a local service, then run the load against them."""
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.sampling import registry
    from sparkglass.runtime.session import spark_session
    from sparkglass.service.local import start_local_service

    work = Path(tempfile.mkdtemp(prefix="sparkglass-bench-"))
    spark = spark_session(
        "sparkglass-service-bench",
        master="local[2]",
        conf={"spark.sparkglass.sampling.enabled": "true"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    pipeline = build_pipeline(spark, work, max_files_per_trigger=1, trigger_seconds=1.0)
    replay = FlightReplay(work / "stream", days=365, files_per_tick=1, interval=0.5)
    pipeline.start()
    replay.start()
    service = None
    try:
        deadline = time.monotonic() + 120
        while pipeline.progress().micro_batches < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the demo stream made no progress in 120 s")
            time.sleep(0.2)
        endpoint = registry.endpoint_for(spark)
        if endpoint is None:
            raise RuntimeError("sampling is on but the driver control endpoint did not start")
        service = start_local_service(
            {"flights": (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{work / 'service.db'}",
            refresh_interval_seconds=args.refresh_interval,
        )
        print(f"service at {service.url}; {args.clients} clients polling for {args.duration} s")
        result = run_load(
            service.url,
            service.token,
            vertex=args.vertex,
            clients=args.clients,
            duration=args.duration,
            interval=args.interval,
        )
        result["app_cpu_ms_per_poll"] = app_cpu_ms_per_poll(service.app, service.token, args.vertex)
        result["store"] = "sqlite"
        result["refresh_interval_s"] = args.refresh_interval
        return result
    finally:
        if service is not None:
            service.stop()
        replay.stop()
        pipeline.stop()
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="A running service (default: start the demo and one).")
    parser.add_argument("--token", help="Bearer token for --url.")
    parser.add_argument("--vertex", default="parse")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--duration", type=float, default=60.0, help="Seconds of polling.")
    parser.add_argument(
        "--interval", type=float, default=0.0, help="Seconds between a client's polls (0: none)."
    )
    parser.add_argument("--refresh-interval", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.url:
        if not args.token:
            parser.error("--url needs --token")
        result = run_load(
            args.url.rstrip("/"),
            args.token,
            vertex=args.vertex,
            clients=args.clients,
            duration=args.duration,
            interval=args.interval,
        )
    else:
        result = _with_demo(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

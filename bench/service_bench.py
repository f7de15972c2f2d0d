"""Service benchmark: open pages polling a vertex, against the service as deployed.

``make bench-service`` starts the flights demo pipeline on a local Spark with sampling on
(its driver control endpoint is what the service talks to), then for each store (SQLite file,
PostgreSQL) a real ``sparkglass serve`` process in local mode in front of that driver, and next
to it the **anchor**: a bare FastAPI endpoint in its own uvicorn process that returns the same
bytes (the service's last data-sample body, with the same gzip middleware and the same ETag
answer) and does nothing else. The load generator is a third process. Loads:

- **open loop**: ``--clients`` (200) clients each polling once per ``--interval`` (1 s), as
  that many open pages do. Requests leave on schedule whether or not the previous answer
  came back; latency runs from the scheduled send, so a slow answer cannot hide the requests
  it delayed (no coordinated omission). Clients send ``If-None-Match`` with the tag they hold,
  as the page does. Reports p50/p99 and the share of 304s.
- **closed loop**: ``--closed-clients`` (50) clients, each sending its next request as soon as
  the last answer arrives, for the service and the anchor alternately over ``--rounds``
  rounds of ``--round-seconds`` each, once with full bodies and once with ``If-None-Match``
  (304s). Reports requests/s per round and the ratio service/anchor: median and 95%
  bootstrap interval over rounds (``bench/spread.py``).
- **two workers**: ``sparkglass serve --workers 2`` on the PostgreSQL store under the open
  loop: rounds started against the refresh interval (one per interval, not one per worker).

``cpu_ms_per_poll`` is the service processes' CPU (``/proc/<pid>/stat``, workers included)
during a closed loop divided by its requests. ``rounds_started`` counts the store's rounds
of the vertex while the store's runs lasted; ``rounds_expected_at_most`` is that time divided
by the refresh interval (``--refresh-interval``, 10 s), plus one: a poll starts a round only
when the result it would get is older than the interval. Writes ``bench/results/service.json``.
The load generator, Spark and the service share the machine's cores: ``load_generator_lag_ms``
(p99 of how late the open loop's requests left) says when the generator itself fell behind.
With ``--cpu-partition`` (the default on 2 or more cores) the demo's Spark driver (its JVM and
the Python side) runs on the last core only and everything else (service, anchor, load
generator) on the others, through Linux CPU affinity inherited by child processes: on a
2-core machine the streaming demo otherwise takes both cores, and the figures measure Spark,
not the service. The service and its anchor get the same cores, so their ratio stays fair.

Against a running service instead, the open loop only::

    python bench/service_bench.py --url http://127.0.0.1:8080 --token ... --vertex parse
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).parent))
from load_generator import LoadGenerator
from provenance import run_info
from spread import median_ci

RESULTS = Path(__file__).parent / "results" / "service.json"
APP = "flights"
ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"
PG_ADMIN_URL = os.environ.get("SPARKGLASS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
#: The service's gzip settings (``service/app.py``: ``gzip_min_bytes`` default, level 5).
GZIP_MIN_BYTES = 1024
GZIP_LEVEL = 5
_CLK_TCK = os.sysconf("SC_CLK_TCK")
STORE_KEY = Fernet.generate_key().decode()


def sample_path(vertex: str) -> str:
    return f"/api/v1/namespaces/local/applications/{APP}/vertices/{vertex}/data-sample"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- processes under test ----------------------------------------------------------------


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / _CLK_TCK


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (uvicorn's worker processes), from ``/proc``."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree = [pid]
    for candidate in tree:
        tree.extend(child for child, parent in parents.items() if parent == candidate)
    return tree


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"not healthy within {timeout} s: {log.read_text()[-2000:]}")
        time.sleep(0.1)


@contextmanager
def serve(
    driver_url: str, driver_token: str, database_url: str, work: Path, refresh: float, workers: int
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``sparkglass serve`` (local mode) in front of the demo driver."""
    port = _free_port()
    tokens = work / "tokens.csv"
    tokens.write_text(f"{ADMIN_TOKEN},bench,admin\n")
    env = {
        **os.environ,
        "SPARKGLASS_DATABASE_URL": database_url,
        "SPARKGLASS_PORT": str(port),
        "SPARKGLASS_CONTROL_TOKEN": driver_token,
        "SPARKGLASS_REFRESH_INTERVAL_SECONDS": str(refresh),
        # A PostgreSQL store keeps the driver token encrypted under a key it is given.
        "SPARKGLASS_STORE_KEY": STORE_KEY,
    }
    log = work / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparkglass",
                "serve",
                "--driver",
                f"{APP}={driver_url}",
                "--tokens-file",
                str(tokens),
                "--workers",
                str(workers),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log, 90)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def bare_app(body: bytes, etag: str, path: str) -> Any:
    """The anchor: a FastAPI endpoint answering ``path`` with ``body`` (and 304 to its
    ``etag``) behind the same gzip middleware as the service, and nothing else."""
    from fastapi import FastAPI, Header
    from fastapi.middleware.gzip import GZipMiddleware
    from fastapi.responses import Response

    app = FastAPI()
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(path)
    async def sample(if_none_match: str | None = Header(None)) -> Response:
        if if_none_match == etag:
            return Response(status_code=304, headers={"etag": etag})
        return Response(body, media_type="application/json", headers={"etag": etag})

    return app


@contextmanager
def anchor(body: bytes, etag: str, path: str, work: Path) -> Iterator[tuple[str, int]]:
    port = _free_port()
    (work / "anchor.body").write_bytes(body)
    log = work / "anchor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--anchor",
                str(work / "anchor.body"),
                "--anchor-etag",
                etag,
                "--anchor-path",
                path,
                "--anchor-port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log, 60)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _first_complete(url: str, path: str, timeout: float) -> httpx.Response:
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Accept-Encoding": "identity"}
    while True:
        r = httpx.get(f"{url}{path}", headers=headers, timeout=30)
        if r.status_code == 200 and b'"status":"COMPLETE"' in r.content[:400]:
            return r
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no COMPLETE round within {timeout} s: {r.status_code} {r.text[:300]}"
            )
        time.sleep(0.5)


def _rounds_in_store(database_url: str, vertex: str, since_ms: int) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM rounds WHERE vertex = :v AND started_at >= :t"),
                    {"v": vertex, "t": since_ms},
                ).scalar_one()
            )
    finally:
        engine.dispose()


@contextmanager
def postgres_database() -> Iterator[str | None]:
    """A fresh PostgreSQL database (dropped after), or None when no server answers."""
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=3):
            pass
    except Exception as exc:
        print(f"no PostgreSQL at {PG_ADMIN_URL} ({exc.__class__.__name__}): SQLite only")
        yield None
        return
    name = f"sg_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the runs --------------------------------------------------------------------------------


def bench_store(
    gen: LoadGenerator,
    args: argparse.Namespace,
    store: str,
    database_url: str,
    driver: tuple[str, str],
    work: Path,
) -> dict[str, Any]:
    """Open loop, then interleaved closed loops against this store's service and the
    anchor."""
    path = sample_path(args.vertex)
    started_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    with serve(*driver, database_url, work, args.refresh_interval, 1) as (url, proc):
        first = _first_complete(url, path, 180)
        etag = first.headers["etag"]
        print(f"[{store}] first round complete ({len(first.content)} bytes); open loop")
        timeout = args.open_seconds + 120
        open_loop = gen.run(
            "open",
            timeout,
            url=url,
            token=ADMIN_TOKEN,
            paths=[path] * args.clients,
            interval=args.interval,
            duration=args.open_seconds,
        )
        with anchor(first.content, etag, path, work) as (anchor_url, anchor_pid):
            anchor_open = gen.run(
                "open",
                timeout,
                url=anchor_url,
                token=ADMIN_TOKEN,
                paths=[path] * args.clients,
                interval=args.interval,
                duration=args.open_seconds,
            )
            closed: dict[str, Any] = {}
            for conditional in (False, True):
                label = "not_modified" if conditional else "full_body"
                service_rps: list[float] = []
                anchor_rps: list[float] = []
                ratios: list[float] = []
                cpu_ms: list[float] = []
                anchor_cpu_ms: list[float] = []
                for r in range(args.rounds):
                    print(f"[{store}] closed loop {label} round {r + 1}/{args.rounds}")
                    pair: dict[str, float] = {}
                    # Alternate who goes first, so drift on the machine hits both alike.
                    order = [("service", url, [proc.pid]), ("anchor", anchor_url, [anchor_pid])]
                    for who, target, pids in order if r % 2 == 0 else order[::-1]:
                        cpu0 = _cpu_seconds(pids)
                        res = gen.run(
                            "closed",
                            args.round_seconds + 60,
                            url=target,
                            path=path,
                            token=ADMIN_TOKEN,
                            clients=args.closed_clients,
                            duration=args.round_seconds,
                            conditional=conditional,
                        )
                        cpu = (_cpu_seconds(pids) - cpu0) * 1000 / max(1, res["requests"])
                        pair[who] = res["requests_per_s"]
                        (cpu_ms if who == "service" else anchor_cpu_ms).append(cpu)
                    service_rps.append(pair["service"])
                    anchor_rps.append(pair["anchor"])
                    ratios.append(pair["service"] / pair["anchor"])
                closed[label] = {
                    "service_requests_per_s": median_ci(service_rps),
                    "anchor_requests_per_s": median_ci(anchor_rps),
                    "ratio_to_anchor": median_ci(ratios),
                    "service_cpu_ms_per_poll": median_ci(cpu_ms),
                    "anchor_cpu_ms_per_poll": median_ci(anchor_cpu_ms),
                    "per_round_service_requests_per_s": [round(x, 1) for x in service_rps],
                    "per_round_anchor_requests_per_s": [round(x, 1) for x in anchor_rps],
                }
        elapsed = time.monotonic() - t0
        rounds = _rounds_in_store(database_url, args.vertex, started_ms)
    return {
        "open_loop": open_loop,
        "anchor_open_loop": anchor_open,
        "closed_loop": closed,
        "body_bytes": len(first.content),
        "rounds_started": rounds,
        "rounds_expected_at_most": int(elapsed // args.refresh_interval) + 1,
        "seconds": round(elapsed, 1),
    }


def bench_workers(
    gen: LoadGenerator,
    args: argparse.Namespace,
    database_url: str,
    driver: tuple[str, str],
    work: Path,
) -> dict[str, Any]:
    """``--workers 2`` under the open loop: one round per refresh interval, not per worker."""
    path = sample_path(args.vertex)
    with serve(*driver, database_url, work, args.refresh_interval, 2) as (url, proc):
        _first_complete(url, path, 180)
        started_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        pids = _process_tree(proc.pid)
        cpu0 = _cpu_seconds(pids)
        open_loop = gen.run(
            "open",
            args.open_seconds + 120,
            url=url,
            token=ADMIN_TOKEN,
            paths=[path] * args.clients,
            interval=args.interval,
            duration=args.open_seconds,
        )
        cpu = _cpu_seconds(pids) - cpu0
        elapsed = time.monotonic() - t0
        rounds = _rounds_in_store(database_url, args.vertex, started_ms)
    return {
        "workers": 2,
        "service_processes": len(pids),
        "open_loop": open_loop,
        "cpu_ms_per_poll": round(cpu * 1000 / max(1, open_loop["requests"]), 3),
        "rounds_started": rounds,
        "rounds_expected_at_most": int(elapsed // args.refresh_interval) + 1,
        "seconds": round(elapsed, 1),
    }


def cpu_partition(enabled: bool) -> dict[str, list[int]] | None:
    """Split this process's cores: the last for Spark, the rest for everything else.

    Returns ``{"spark": [...], "service_and_load": [...]}`` (core numbers), or ``None`` when
    not enabled, with fewer than 2 cores, or without ``os.sched_setaffinity`` (not Linux).
    Sets this process's affinity to the non-Spark cores; :func:`demo_driver` narrows it to the
    Spark core while the JVM starts (a child inherits its parent's affinity)."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    split = {"spark": cores[-1:], "service_and_load": cores[:-1]}
    os.sched_setaffinity(0, split["service_and_load"])
    return split


@contextmanager
def demo_driver(
    spark_cores: list[int] | None = None, refresh_interval_s: float = 10.0
) -> Iterator[tuple[str, str]]:
    """The flights demo streaming on a local Spark with sampling on; yields its control
    endpoint (url, token). ``spark_cores``: the cores the driver's JVM and this process's
    Python side of the driver run on (the affinity of this process is set to them).
    ``refresh_interval_s``: the application's own ``refresh-interval``, which the service
    follows (a service setting only stands in for an application that states none, and the
    driver states its default, 60 s)."""
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.sampling import registry
    from sparkglass.runtime.session import spark_session

    work = Path(tempfile.mkdtemp(prefix="sparkglass-bench-"))
    before = os.sched_getaffinity(0) if spark_cores is not None else None
    if spark_cores is not None:
        # Affinity is per thread and inherited: the JVM, the Py4J callback threads and the
        # replay thread started below get the Spark cores; this thread goes back afterwards,
        # so the service and anchor processes it starts later get the other cores.
        os.sched_setaffinity(0, spark_cores)
    spark = spark_session(
        "sparkglass-service-bench",
        master="local[2]",
        conf={
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.sampling.refresh-interval": f"{int(refresh_interval_s * 1000)}ms",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    pipeline = build_pipeline(spark, work, max_files_per_trigger=1, trigger_seconds=1.0)
    replay = FlightReplay(work / "stream", days=365, files_per_tick=1, interval=0.5)
    pipeline.start()
    replay.start()
    if before is not None:
        os.sched_setaffinity(0, before)
    try:
        deadline = time.monotonic() + 180
        while pipeline.progress().micro_batches < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the demo stream made no progress in 180 s")
            time.sleep(0.2)
        endpoint = registry.endpoint_for(spark)
        if endpoint is None:
            raise RuntimeError("sampling is on but the driver control endpoint did not start")
        yield endpoint.url, endpoint.token
    finally:
        replay.stop()
        pipeline.stop()
        spark.stop()


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    """The targets of docs/performance.md, checked against each store's figures."""
    checks: dict[str, Any] = {}
    for store, fig in result["stores"].items():
        closed = fig["closed_loop"]
        checks[store] = {
            "open_loop_p99_under_100_ms": fig["open_loop"]["p99_ms"] < 100,
            "full_body_ratio_at_least_0.5": closed["full_body"]["ratio_to_anchor"]["median"] >= 0.5,
            "not_modified_ratio_at_least_0.8": (
                closed["not_modified"]["ratio_to_anchor"]["median"] >= 0.8
            ),
        }
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="A running service: run the open loop against it only.")
    parser.add_argument("--token", help="Bearer token for --url.")
    parser.add_argument("--vertex", default="parse", help="Vertex to poll [parse].")
    parser.add_argument("--clients", type=int, default=200, help="Open-loop clients [200].")
    parser.add_argument("--interval", type=float, default=1.0, help="Open-loop poll interval, s.")
    parser.add_argument("--open-seconds", type=float, default=30.0, help="Open-loop length, s.")
    parser.add_argument("--closed-clients", type=int, default=50, help="Closed-loop clients.")
    parser.add_argument("--rounds", type=int, default=5, help="Closed-loop rounds per variant.")
    parser.add_argument("--round-seconds", type=float, default=5.0, help="Closed-loop round, s.")
    parser.add_argument(
        "--refresh-interval",
        type=float,
        default=10.0,
        help="The demo application's refresh-interval (and the service's), s [10].",
    )
    parser.add_argument("--stores", default="sqlite,postgresql", help="Comma-separated.")
    parser.add_argument(
        "--cpu-partition",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Run the demo's Spark on the last core only, the service, anchor and load "
        "generator on the others (Linux, 2+ cores) [on].",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--anchor", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--anchor-etag", help=argparse.SUPPRESS)
    parser.add_argument("--anchor-path", help=argparse.SUPPRESS)
    parser.add_argument("--anchor-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor:
        import uvicorn

        # As `sparkglass serve` runs uvicorn: same server, same log level, access log on.
        app = bare_app(args.anchor.read_bytes(), args.anchor_etag, args.anchor_path)
        uvicorn.run(app, host="127.0.0.1", port=args.anchor_port, log_level="info")
        return
    # Before the load generator starts: it inherits the non-Spark cores.
    split = cpu_partition(args.cpu_partition and not args.url)
    gen = LoadGenerator()
    try:
        if args.url:
            if not args.token:
                parser.error("--url needs --token")
            result: dict[str, Any] = gen.run(
                "open",
                args.open_seconds + 120,
                url=args.url.rstrip("/"),
                token=args.token,
                paths=[sample_path(args.vertex)] * args.clients,
                interval=args.interval,
                duration=args.open_seconds,
            )
        else:
            result = run_all(gen, args, split)
    finally:
        gen.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def run_all(
    gen: LoadGenerator, args: argparse.Namespace, split: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    result: dict[str, Any] = {
        "clients": args.clients,
        "interval_s": args.interval,
        "open_seconds": args.open_seconds,
        "closed_clients": args.closed_clients,
        "rounds": args.rounds,
        "round_seconds": args.round_seconds,
        "refresh_interval_s": args.refresh_interval,
        "vertex": args.vertex,
        # Cores of each side (None: all processes shared all cores).
        "cpu_partition": split,
        "run": run_info(),
        "stores": {},
    }
    with (
        demo_driver(split["spark"] if split else None, args.refresh_interval) as driver,
        postgres_database() as pg_url,
    ):
        work = Path(tempfile.mkdtemp(prefix="sparkglass-service-bench-"))
        for store in stores:
            if store == "sqlite":
                url = f"sqlite:///{work / 'bench.db'}"
            elif store == "postgresql" and pg_url is not None:
                url = pg_url
            else:
                continue
            result["stores"][store] = bench_store(gen, args, store, url, driver, work)
        workers_url = pg_url or f"sqlite:///{work / 'workers.db'}"
        print("two workers, open loop")
        result["two_workers"] = bench_workers(gen, args, workers_url, driver, work)
        result["two_workers"]["store"] = "postgresql" if pg_url else "sqlite"
    result["targets_met"] = _targets(result)
    result["load_average_1m"] = os.getloadavg()[0]
    result["median_note"] = "median and 95% bootstrap interval over rounds (bench/spread.py)"
    return result


if __name__ == "__main__":
    main()

"""The service curve of the scaling benchmark: one ``sparkglass serve`` against N registered
applications, each polled by 2 open pages at 1 poll/s.

The applications' drivers are scripted (``tests/support/scripted_driver.py``: the real control
endpoint over scripted executors), all in this process, each on its own loopback port with
its own rounds. The service is a
real ``sparkglass serve`` process (local mode, SQLite file, one worker), started fresh for
each N; the load generator is a spawned process of its own. Polled vertex: ``parse`` (a
COMPLETE round of 9 flight-like records after 0.3 s).

Per N, after every application has a first COMPLETE result (warm-up), ``repeats`` open-loop
windows of ``window_s`` each: p50/p99 from the scheduled send (no coordinated omission),
the service process's CPU per poll (``/proc``), and from the store (SQLite's ``dbstat``,
bytes used in the pages) the bytes per stored round (round row, its records, their indexes)
and per audit event. Store growth per hour of retention is extrapolated from those (not
measured over an hour): rounds per refresh interval, and audit events at the rate the store
received them while the pages polled (identical reads are coalesced into one event per
``audit_read_window_seconds``, so events grow with time and readers, not with polls)."""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from load_generator import LoadGenerator
from scale_report import store_growth, summarise

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.scripted_driver import TOKEN, FakeDriver  # noqa: E402

ADMIN_TOKEN = "bench-scale-admin-token-0123456789"
VERTEX = "parse"
PAGES_PER_APP = 2
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def app_name(i: int) -> str:
    return f"app{i:03d}"


def sample_path(i: int) -> str:
    return f"/api/v1/namespaces/local/applications/{app_name(i)}/vertices/{VERTEX}/data-sample"


class DriverFarm:
    """``n`` scripted drivers (the real control endpoint over scripted executors), each on its
    own loopback port, each keeping its own rounds as separate drivers would."""

    def __init__(self, n: int) -> None:
        self.drivers = [FakeDriver(pending_seconds=0.3) for _ in range(n)]
        self.urls: list[str] = []

    def __enter__(self) -> DriverFarm:
        self.urls = [d.start() for d in self.drivers]
        return self

    def __exit__(self, *exc: object) -> None:
        for driver in self.drivers:
            driver.stop()


# ------------------------------------------------------------------------ service and store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / _CLK_TCK


@contextmanager
def serve(
    farm: DriverFarm, apps: int, db: Path, work: Path, refresh_s: float
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real ``sparkglass serve`` (local mode, SQLite ``db``) with ``apps`` drivers."""
    port = _free_port()
    tokens = work / "tokens.csv"
    tokens.write_text(f"{ADMIN_TOKEN},bench,admin\n")
    src = str(REPO / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{db}",
        "SPARKGLASS_PORT": str(port),
        "SPARKGLASS_CONTROL_TOKEN": TOKEN,
        "SPARKGLASS_REFRESH_INTERVAL_SECONDS": str(refresh_s),
    }
    drivers = [a for i in range(apps) for a in ("--driver", f"{app_name(i)}={farm.urls[i]}")]
    log = work / f"serve-{apps}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkglass", "serve", "--tokens-file", str(tokens), *drivers],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=work,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"service exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"service not healthy in 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


STORE_TABLES = ("rounds", "sample_records", "audit_events")


def store_tables(db: Path) -> dict[str, dict[str, int]]:
    """Bytes used by the tables that grow with use, each with its indexes (SQLite's
    ``dbstat``: page bytes minus the unused bytes of those pages, so a figure per row does
    not jump by whole 4 KiB pages), and their rows."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_schema").fetchall())
        out = {t: {"bytes": 0, "rows": 0} for t in STORE_TABLES}
        used = "SELECT name, sum(pgsize) - sum(unused) FROM dbstat GROUP BY name"
        for name, size in conn.execute(used):
            table = owner.get(name)
            if table in out:
                out[table]["bytes"] += int(size)
        for t in STORE_TABLES:
            out[t]["rows"] = int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
        return out
    finally:
        conn.close()


def _file_bytes(db: Path) -> int:
    """The store's size on disk: the database file and its write-ahead log."""
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def _warm_up(url: str, apps: int, timeout_s: float) -> int:
    """Poll every application until its first round is COMPLETE; returns the polls sent."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Accept-Encoding": "identity"}
    deadline = time.monotonic() + timeout_s

    def one(i: int) -> int:
        polls = 0
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while True:
                r = http.get(sample_path(i))
                polls += 1
                if r.status_code == 200 and b'"status":"COMPLETE"' in r.content[:400]:
                    return polls
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{app_name(i)}: no COMPLETE round: {r.status_code}")
                time.sleep(0.2)

    with ThreadPoolExecutor(min(16, apps)) as pool:
        return sum(pool.map(one, range(apps)))


def apps_curve(args: argparse.Namespace) -> dict[str, Any]:
    farm = DriverFarm(max(args.apps))
    gen = LoadGenerator()
    points: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="sparkglass-scale-service-"))
    try:
        with farm:
            for n in args.apps:
                points.append(_apps_point(gen, farm, n, work, args))
    finally:
        gen.close()
    return {
        "x": "applications",
        "pages_per_application": PAGES_PER_APP,
        "poll_interval_s": 1.0,
        "window_s": args.service_window_s,
        "refresh_interval_s": args.refresh_s,
        "vertex": VERTEX,
        "store": "sqlite",
        "method": (
            "a fresh `sparkglass serve` (local mode, SQLite, 1 worker) per N with N fake "
            "drivers registered (tests/support/scripted_driver.py: the real control endpoint "
            "over scripted executors, in the bench process, one loopback port each); after "
            "each application's first COMPLETE result, `repeats` "
            "open-loop windows of 2 pages per application at 1 poll/s each (If-None-Match as "
            "the page sends it; latency from the scheduled send); CPU of the service process "
            "from /proc per poll; store bytes from SQLite dbstat (tables with their indexes)"
        ),
        "store_growth_note": (
            "extrapolated, not measured over an hour: bytes per stored round x one round per "
            "application per refresh interval, plus bytes per audit event x audit events per "
            "hour at the rate the store received them from the end of warm-up to shutdown "
            "(reads are coalesced per principal, round and window, so that rate does not grow "
            "with polls; the windows still open at shutdown count whole, so it errs high for "
            "short runs); rounds of the fake driver's vertex hold 9 short records, "
            "so bytes per round scale with the records a real vertex returns"
        ),
        "points": points,
    }


def _apps_point(
    gen: LoadGenerator, farm: DriverFarm, n: int, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    db = work / f"store-{n}.db"
    with serve(farm, n, db, work, args.refresh_s) as (url, proc):
        before = store_tables(db)
        file_before = _file_bytes(db)
        t0 = time.monotonic()
        warm_polls = _warm_up(url, n, 60 + n)
        print(f"[scale] apps {n}: warm-up {time.monotonic() - t0:.1f} s", flush=True)
        # Audit events written from here to shutdown, over that time: their rate per hour.
        steady_events0 = store_tables(db)["audit_events"]["rows"]
        steady_t0 = time.monotonic()
        repeats: list[dict[str, float]] = []
        polls = warm_polls
        extra: dict[str, Any] = {"codes": {}}
        for r in range(args.repeats):
            cpu0 = cpu_ms(proc.pid)
            res = gen.run(
                "open",
                args.service_window_s + 120,
                url=url,
                token=ADMIN_TOKEN,
                # Page c polls application c // PAGES_PER_APP.
                paths=[sample_path(c // PAGES_PER_APP) for c in range(n * PAGES_PER_APP)],
                interval=1.0,
                duration=args.service_window_s,
            )
            cpu = cpu_ms(proc.pid) - cpu0
            polls += res["requests"]
            for code, count in res["codes"].items():
                extra["codes"][code] = extra["codes"].get(code, 0) + count
            rep = {
                "p50_ms": res["p50_ms"],
                "p99_ms": res["p99_ms"],
                "cpu_ms_per_poll": cpu / max(1, res["requests"]),
                "not_modified_share": res["not_modified_share"],
                "load_generator_lag_p99_ms": res["load_generator_lag_p99_ms"],
                "polls_per_s": res["requests"] / args.service_window_s,
            }
            print(
                f"[scale] apps {n} repeat {r + 1}: "
                + ", ".join(f"{k}={v:.3g}" for k, v in rep.items()),
                flush=True,
            )
            repeats.append(rep)
        seconds = time.monotonic() - t0
        steady_seconds = time.monotonic() - steady_t0
    after = store_tables(db)  # the service has stopped: its audit buffer is flushed
    grown = {t: {k: after[t][k] - before[t][k] for k in ("bytes", "rows")} for t in STORE_TABLES}
    rounds = grown["rounds"]["rows"]
    round_bytes = grown["rounds"]["bytes"] + grown["sample_records"]["bytes"]
    events = grown["audit_events"]["rows"]
    per_round = round_bytes / rounds if rounds else 0.0
    per_event = grown["audit_events"]["bytes"] / events if events else 0.0
    steady_events = after["audit_events"]["rows"] - steady_events0
    events_per_hour = steady_events * 3600.0 / max(1.0, steady_seconds)
    return {
        "applications": n,
        "repeats": len(repeats),
        **summarise(repeats, repeats[0].keys()),
        "per_repeat": [{k: round(v, 3) for k, v in rep.items()} for rep in repeats],
        "codes": extra["codes"],
        "store": {
            "grown": grown,
            "rounds_stored": rounds,
            "rounds_expected_at_most": n * (int(seconds // args.refresh_s) + 1),
            "file_bytes_grown": _file_bytes(db) - file_before,
            "bytes_per_round": round(per_round),
            "records_per_round": (
                round(grown["sample_records"]["rows"] / rounds, 1) if rounds else 0
            ),
            "bytes_per_audit_event": round(per_event),
            "audit_events_per_poll": round(events / max(1, polls), 3),
            "audit_events_per_hour": round(events_per_hour),
            "polls": polls,
            "growth": store_growth(
                bytes_per_round=per_round,
                rounds_per_hour=n * 3600.0 / args.refresh_s,
                bytes_per_audit_event=per_event,
                audit_events_per_hour=events_per_hour,
                retention_hours=args.retention_hours,
            ),
        },
        "seconds": round(seconds, 1),
    }

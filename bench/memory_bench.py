"""Memory benchmark: the service's peak RSS under rounds of the maximum result size.

Default run (``make bench-memory``): a fake driver control endpoint (in this process, on
loopback) whose rounds all return the largest result the contract allows, 5000 records of
10000 characters (about 50 MB of JSON each); the service as a real ``sparkglass serve``
process in local mode (SQLite store) in front of it. Then:

1. 6 rounds of maximum size, on 6 vertices, all triggered at once and polled until done;
2. 40 polls of those results (concurrent, spread over the 6 vertices).

Peak RSS of the service process is its ``VmHWM`` from ``/proc/<pid>/status`` (the kernel's
high-water mark, so nothing between two samples is missed). Writes
``bench/results/memory.json``::

    {"peak_rss_mb": ..., "baseline_rss_mb": ..., "after_rss_mb": ..., "rounds": 6,
     "polls": 40, "result_body_mb": ..., "result_cache_bytes": ..., "target_peak_rss_mb": 400,
     "ok": true, ...}

``--result-cache-bytes`` sets the service's ``SPARKGLASS_RESULT_CACHE_BYTES`` (default: the
service's own default). Exits 1 when the peak exceeds ``--target-mb`` (400).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Header, HTTPException, Query
from fastapi.responses import JSONResponse, Response

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info

RESULTS = Path(__file__).parent / "results" / "memory.json"
REPO = Path(__file__).resolve().parents[1]
DRIVER_TOKEN = "bench-driver-token"
ADMIN_TOKEN = "bench-admin-token-0123456789"
VERTICES = [f"v{i}" for i in range(6)]
RECORDS = 5000  # MAX_RECORDS_PER_RESPONSE
RECORD_CHARS = 10000  # the longest max-record-length
SUBTASKS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _subtasks_json() -> list[str]:
    """The ``samples`` entries of a maximum-size result, one JSON text per subtask (built
    once)."""
    per = RECORDS // SUBTASKS
    now = int(time.time() * 1000)
    subtasks = []
    for sub in range(SUBTASKS):
        recs = []
        for i in range(per):
            # Distinct strings per record, as real rows are (no interning between them).
            payload = f"{sub:02d}{i:06d}" + "x" * (RECORD_CHARS - 8)
            recs.append(
                {
                    "sampleTimestamp": now + i,
                    "data": payload,
                    "dataType": "string",
                    "truncated": False,
                }
            )
        subtasks.append(json.dumps({"subtaskIndex": sub, "records": recs}, separators=(",", ":")))
    return subtasks


def driver_app() -> FastAPI:
    """A driver control endpoint whose every round returns the maximum result."""
    api = FastAPI()
    subtasks = _subtasks_json()
    samples = "[" + ",".join(subtasks) + "]"
    # maxRecords=1 as the driver cuts it (fair_truncate): one record, every subtask listed.
    first = json.loads(subtasks[0])
    one_record = [{"subtaskIndex": first["subtaskIndex"], "records": first["records"][:1]}] + [
        {"subtaskIndex": i, "records": []} for i in range(1, SUBTASKS)
    ]
    pipeline = {
        "name": "big",
        "vertices": [{"name": "source", "kind": "source", "bounded": False}]
        + [{"name": v, "inputs": ["source"]} for v in VERTICES],
    }
    rounds: dict[str, str] = {}

    def auth(authorization: str | None) -> None:
        if authorization != f"Bearer {DRIVER_TOKEN}":
            raise HTTPException(401, "bad token")

    @api.get("/api/v1/pipeline")
    def get_pipeline(authorization: str | None = Header(None)) -> JSONResponse:
        auth(authorization)
        return JSONResponse(pipeline)

    @api.get("/api/v1/settings")
    def get_settings(authorization: str | None = Header(None)) -> JSONResponse:
        auth(authorization)
        return JSONResponse({"enabled": True})

    @api.post("/api/v1/vertices/{vertex}/rounds")
    def start(vertex: str, authorization: str | None = Header(None)) -> JSONResponse:
        auth(authorization)
        rid = uuid.uuid4().hex[:12]
        rounds[rid] = vertex
        return JSONResponse({"status": "PENDING", "roundId": rid}, status_code=202)

    @api.get("/api/v1/rounds/{rid}")
    def get_round(
        rid: str,
        authorization: str | None = Header(None),
        max_records: int | None = Query(None, alias="maxRecords"),
        subtask_index: int | None = Query(None, alias="subtaskIndex"),
    ) -> Response:
        auth(authorization)
        if rid not in rounds:
            raise HTTPException(404, "no round")
        head = {
            "status": "COMPLETE",
            "roundId": rid,
            "endTimestamp": int(time.time() * 1000),
            "totalRecordCount": RECORDS,
        }
        if max_records is not None:  # the driver's post-filter: the first records only
            return JSONResponse({**head, "samples": one_record, "totalTruncated": True})
        chosen = samples
        if subtask_index is not None:  # the driver's post-filter: one subtask's records
            chosen = f"[{subtasks[subtask_index]}]" if 0 <= subtask_index < SUBTASKS else "[]"
        body = json.dumps(head)[:-1] + ',"samples":' + chosen + "}"
        return Response(body.encode(), media_type="application/json")

    return api


class _DriverThread:
    def __init__(self, app: FastAPI) -> None:
        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake driver did not start")
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def proc_status_kb(pid: int, field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _start_service(
    driver_url: str, tmp: Path, env_overrides: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    tokens = tmp / "tokens.csv"
    tokens.write_text(f"{ADMIN_TOKEN},bench,admin\n")
    src = str(REPO / "src")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{tmp / 'bench.db'}",
        "SPARKGLASS_PORT": str(port),
        "SPARKGLASS_CONTROL_TOKEN": DRIVER_TOKEN,
        "SPARKGLASS_REFRESH_INTERVAL_SECONDS": "600",
        "SPARKGLASS_ROUND_TIMEOUT_SECONDS": "120",
        "SPARKGLASS_POLL_INTERVAL_SECONDS": "0.2",
        **env_overrides,
    }
    log = (tmp / "service.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkglass", "serve", "--driver", f"big={driver_url}",
         "--tokens-file", str(tokens)],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"service exited: {(tmp / 'service.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("service did not start within 60 s")
        time.sleep(0.1)


def run(polls: int, target_mb: float, env_overrides: dict[str, str]) -> dict[str, Any]:
    """Start everything, drive the rounds and polls, return the figures."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with tempfile.TemporaryDirectory(prefix="sg-membench-") as tmpdir, _DriverThread(
        driver_app()
    ) as driver_url:
        proc, url = _start_service(driver_url, Path(tmpdir), env_overrides)
        try:
            baseline_kb = proc_status_kb(proc.pid, "VmRSS")
            path = url + "/api/v1/namespaces/local/applications/big/vertices/{v}/data-sample"
            t0 = time.monotonic()
            body_sizes: list[int] = []
            with httpx.Client(headers=headers, timeout=120) as http:

                def until_done(vertex: str) -> int:
                    deadline = time.monotonic() + 300
                    while True:
                        r = http.get(path.format(v=vertex))
                        r.raise_for_status()
                        status = r.json()["status"]
                        if status != "PENDING":
                            if status != "COMPLETE":
                                raise RuntimeError(f"{vertex}: round ended {status}")
                            return len(r.content)
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{vertex}: no result within 300 s")
                        time.sleep(0.5)

                with ThreadPoolExecutor(len(VERTICES)) as pool:
                    body_sizes = list(pool.map(until_done, VERTICES))
                rounds_s = time.monotonic() - t0
                rounds_peak_kb = proc_status_kb(proc.pid, "VmHWM")

                def one_poll(i: int) -> int:
                    r = http.get(path.format(v=VERTICES[i % len(VERTICES)]))
                    r.raise_for_status()
                    return len(r.content)

                t1 = time.monotonic()
                with ThreadPoolExecutor(8) as pool:
                    poll_sizes = list(pool.map(one_poll, range(polls)))
                polls_s = time.monotonic() - t1
            peak_kb = proc_status_kb(proc.pid, "VmHWM")
            after_kb = proc_status_kb(proc.pid, "VmRSS")
        except Exception:
            log_tail = (Path(tmpdir) / "service.log").read_text(errors="replace")[-3000:]
            print(f"service exit code {proc.poll()}; its log ends:\n{log_tail}", file=sys.stderr)
            raise
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    peak_mb = round(peak_kb / 1024, 1)
    return {
        "peak_rss_mb": peak_mb,
        "baseline_rss_mb": round(baseline_kb / 1024, 1),
        "peak_rss_after_rounds_mb": round(rounds_peak_kb / 1024, 1),
        "after_rss_mb": round(after_kb / 1024, 1),
        "target_peak_rss_mb": target_mb,
        "ok": peak_mb <= target_mb,
        "rounds": len(VERTICES),
        "polls": polls,
        "records_per_result": RECORDS,
        "record_chars": RECORD_CHARS,
        "result_body_mb": round(max(body_sizes) / 2**20, 1),
        "poll_body_mb": round(max(poll_sizes) / 2**20, 1) if poll_sizes else 0,
        "rounds_s": round(rounds_s, 1),
        "polls_s": round(polls_s, 1),
        "result_cache_bytes": env_overrides.get("SPARKGLASS_RESULT_CACHE_BYTES", "default"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "command": "make bench-memory",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=40, help="Polls after the rounds (40).")
    parser.add_argument("--target-mb", type=float, default=400, help="Peak RSS allowed (400).")
    parser.add_argument(
        "--result-cache-bytes", type=int, default=None, help="The service's cache budget."
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="Where to write the JSON.")
    args = parser.parse_args()
    env = {}
    if args.result_cache_bytes is not None:
        env["SPARKGLASS_RESULT_CACHE_BYTES"] = str(args.result_cache_bytes)
    result = run(args.polls, args.target_mb, env)
    result["run"] = run_info()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if not result["ok"]:
        print(
            f"peak RSS {result['peak_rss_mb']} MB exceeds the target {args.target_mb} MB",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()

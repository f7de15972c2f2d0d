"""Memory benchmark: the service's peak RSS under rounds of the maximum result size.

Default run (``make bench-memory``): the tests' fake driver (``tests/support/scripted_driver.py``:
the real control endpoint, in this process on loopback, over scripted executors) whose
rounds all capture the largest result the contract allows, 5000 records of 10000
characters (about 50 MB of JSON each); the service as a real ``sparkglass serve``
process in local mode (SQLite store) in front of it. Then:

1. 5 rounds of maximum size, on 5 vertices, all triggered at once and polled until done
   (5: the most rounds a driver runs at once; it refuses a sixth);
2. 40 polls of those results (concurrent, spread over the 5 vertices).

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
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info  # noqa: E402

from sparkglass.runtime.contract.description import PipelineDescription  # noqa: E402
from sparkglass.runtime.sampling.rounds import MAX_CONCURRENT_ROUNDS  # noqa: E402
from tests.support.scripted_driver import (  # noqa: E402
    ScriptedControl,
    VertexScript,
    serving,
)

RESULTS = Path(__file__).parent / "results" / "memory.json"
DRIVER_TOKEN = "bench-driver-token"
ADMIN_TOKEN = "bench-admin-token-0123456789"
#: As many vertices as a driver runs rounds at once (MAX_CONCURRENT_ROUNDS).
VERTICES = [f"v{i}" for i in range(MAX_CONCURRENT_ROUNDS)]
RECORDS = 5000  # MAX_RECORDS_PER_RESPONSE
RECORD_CHARS = 10000  # the longest max-record-length
SUBTASKS = 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _partitions() -> list[dict[str, Any]]:
    """What the executors of every round captured: the maximum result, 5000 records of
    10000 characters over 5 subtasks (distinct strings per record, as real rows are)."""
    per = RECORDS // SUBTASKS
    now = int(time.time() * 1000)
    return [
        {
            "subtaskIndex": sub,
            "records": [
                {
                    "sampleTimestamp": now + i,
                    "data": f"{sub:02d}{i:06d}" + "x" * (RECORD_CHARS - 8),
                    "truncated": False,
                }
                for i in range(per)
            ],
            "droppedByRateLimit": 0,
            "droppedByContention": 0,
        }
        for sub in range(SUBTASKS)
    ]


@dataclass
class MaximumResultDriver(ScriptedControl):
    """The tests' fake driver (the real control endpoint over scripted executors) whose every
    round on any of :data:`VERTICES` captures the maximum result."""

    def vertex_names(self) -> list[str]:
        return VERTICES

    def script(self, vertex: str) -> VertexScript:
        return VertexScript(partitions=_partitions, data_type="string", delay_s=0.1)

    def description(self) -> PipelineDescription:
        return PipelineDescription.model_validate(
            {
                "name": "big",
                "vertices": [{"name": "source", "kind": "source", "bounded": False}]
                + [{"name": v, "inputs": ["source"]} for v in VERTICES],
            }
        )


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
        [
            sys.executable,
            "-m",
            "sparkglass",
            "serve",
            "--driver",
            f"big={driver_url}",
            "--tokens-file",
            str(tokens),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp,
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
    driver = MaximumResultDriver(tokens={DRIVER_TOKEN})
    with tempfile.TemporaryDirectory(prefix="sg-membench-") as tmpdir, serving(driver):
        driver_url = driver.url
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
                                raise RuntimeError(f"{vertex}: round ended {r.text[:500]}")
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

"""Operator benchmark: pickup latency and API load with hundreds of finished DataSamples.

Default run (``make bench-operator``): the real operator process (``sparkglass operator run
--standalone``) against the Kubernetes emulator the operator tests use
(``tests/operator/conftest.py``), with

* 5 SparkApplications whose driver Pods are "Running" at 127.0.0.1, each backed by its own
  scripted driver control endpoint (``tests/support/datasamples.py``: a round answers
  PENDING once, then COMPLETE);
* 500 finished DataSamples retained (``Complete``, a TTL of a day), created before the operator
  starts, so it lists and resumes them;
* 50 new DataSamples, one per second, round-robin over the applications.

Writes ``bench/results/operator.json``::

    {"pickup_p50_s": ..., "pickup_p99_s": ..., "finished_requests_per_minute": ...,
     "operator_cpu_s_per_datasample": ..., "run": {...}, ...}

*Pickup* is measured at the API server: from the moment the create request of a DataSample
is answered to the moment the operator's first ``PATCH …/status`` of it arrives (the issue's
"created → first status written", at millisecond resolution rather than
``creationTimestamp``'s seconds). *Finished requests* counts every request the emulator serves
on one of the 500 finished DataSamples' paths during the measured window (kopf's single watch
stream of the whole collection is not on those paths). *CPU* is the operator process's user
+ system time (``/proc/<pid>/stat``) over the window, divided by the 50 DataSamples; it includes
the operator's fixed costs (SparkApplication resyncs, kopf's watches) for that minute.

The emulator's gaps that matter here: it does not drop ``status`` on create (so the finished
DataSamples can be created finished), and it serves from memory on the same machine, so API
latency is lower than a real API server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.operator.conftest import NAMESPACE, StrictApiServer  # noqa: E402
from tests.support.datasamples import (  # noqa: E402
    ScriptedDriver,
    secret_entry,
    serve_driver,
)

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info  # noqa: E402

GROUP = "/apis/sparkglass.io/v1alpha1"
SAMPLES = f"{GROUP}/namespaces/{NAMESPACE}/datasamples/"
APPS = 5
VERTICES = ("parse", "flights", "schedule", "airports")


class TimedEmulator(StrictApiServer):
    """Also notes when the first status write of each DataSample arrived (monotonic s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first_status: dict[str, float] = {}

    async def __call__(self, raw_request: Any) -> Any:
        path = raw_request.path
        if raw_request.method == "PATCH" and path.startswith(SAMPLES) and path.endswith("/status"):
            self.first_status.setdefault(path[len(SAMPLES) :].split("/")[0], time.monotonic())
        return await super().__call__(raw_request)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def sample(name: str, app: str, vertex: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"applicationRef": {"name": app}, "vertex": vertex, "maxRecords": 10},
    }


async def bench(retained: int, new: int, interval: float, out: Path) -> dict[str, Any]:
    kube = TimedEmulator()
    kube.resources.load_bundled()
    for crd in ("sparkapplication.yaml", "datasample.yaml"):
        kube.register_crd(yaml.safe_load((REPO / "crds" / crd).read_text()))
    drivers = [ScriptedDriver() for _ in range(APPS)]
    runners = [await serve_driver(d) for d in drivers]
    async with kube, kmock.Server(kube):
        tmp = Path(tempfile.mkdtemp(prefix="sg-operator-bench-"))
        kubeconfig = tmp / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "k", "cluster": {"server": str(kube.url).rstrip("/")}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}],
                    "current-context": "k",
                }
            )
        )
        # The retained finished DataSamples, there before the operator starts.
        done = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        finished = {f"old-{i:04d}" for i in range(retained)}
        for i, name in enumerate(sorted(finished)):
            body = sample(name, f"app-{i % APPS}", "parse")
            body["spec"]["ttlSecondsAfterFinished"] = 86400
            body["status"] = {"phase": "Complete", "completionTime": done, "roundId": f"x-{i}"}
            resp = await kube.post(f"{GROUP}/namespaces/{NAMESPACE}/datasamples", json=body)
            assert resp.status in (200, 201), await resp.text()
        app_body = yaml.safe_load((REPO / "examples" / "flights-sparkapplication.yaml").read_text())
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO / "src")}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        log = (tmp / "operator.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkglass", "operator", "run", "--namespace", NAMESPACE,
             "--standalone", "--health-port", "0", "--metrics-port", "0", "--log-level",
             os.environ.get("SG_OPERATOR_LOG_LEVEL", "WARNING")],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO),
        )  # fmt: skip
        try:
            for i, driver in enumerate(drivers):
                body = json.loads(json.dumps(app_body))
                body["metadata"] = {"name": f"app-{i}", "namespace": NAMESPACE}
                body["spec"]["sampling"]["controlPort"] = driver.port
                resp = await kube.post(
                    f"{GROUP}/namespaces/{NAMESPACE}/sparkapplications", json=body
                )
                assert resp.status in (200, 201), await resp.text()
            for i, driver in enumerate(drivers):
                pod = f"app-{i}-driver"
                await wait_for(
                    lambda p=pod: kube.stored("v1/pods", NAMESPACE, p), 120, f"Pod {pod}"
                )
                resp = await kube.patch(
                    f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/status",
                    json={"status": {"phase": "Running", "podIP": "127.0.0.1"}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert resp.status == 200, await resp.text()
                secret = await wait_for(
                    lambda i=i: kube.stored("v1/secrets", NAMESPACE, f"app-{i}-control-token"),
                    60,
                    "the control token",
                )
                driver.tokens.add(secret_entry(secret, "token"))
                # What the driver Pod mounts: the certificate the operator issued and pins.
                driver.serve_certificate(
                    f"app-{i}-driver.{NAMESPACE}.svc",
                    secret_entry(secret, "tls.crt"),
                    secret_entry(secret, "tls.key"),
                )
                driver.vertices = set(VERTICES)
            # Warm-up: one DataSample end to end, so the operator has listed and resumed all.
            resp = await kube.post(
                f"{GROUP}/namespaces/{NAMESPACE}/datasamples",
                json=sample("warmup", "app-0", "parse"),
            )
            await wait_for(
                lambda: (
                    ((kube.stored(SAMPLES_RES, NAMESPACE, "warmup") or {}).get("status") or {}).get(
                        "phase"
                    )
                    == "Complete"
                ),
                180,
                "the warm-up DataSample",
            )
            await asyncio.sleep(2)  # let the resume of the retained ones settle

            def finished_requests() -> int:
                return sum(
                    n
                    for (_, path), n in kube.served.items()
                    if path.startswith(SAMPLES) and path[len(SAMPLES) :].split("/")[0] in finished
                )

            requests_before, cpu_before = finished_requests(), cpu_seconds(proc.pid)
            started = time.monotonic()
            created: dict[str, float] = {}
            for k in range(new):
                name = f"new-{k:03d}"
                body = sample(name, f"app-{k % APPS}", VERTICES[k % len(VERTICES)])
                resp = await kube.post(f"{GROUP}/namespaces/{NAMESPACE}/datasamples", json=body)
                assert resp.status in (200, 201), await resp.text()
                created[name] = time.monotonic()
                await asyncio.sleep(max(0.0, started + (k + 1) * interval - time.monotonic()))

            def phases() -> dict[str, str | None]:
                return {
                    n: ((kube.stored(SAMPLES_RES, NAMESPACE, n) or {}).get("status") or {}).get(
                        "phase"
                    )
                    for n in created
                }

            await wait_for(
                lambda: all(p not in (None, "Pending", "InProgress") for p in phases().values()),
                180,
                "every new DataSample to finish",
            )
            window = time.monotonic() - started
            cpu = cpu_seconds(proc.pid) - cpu_before
            requests = finished_requests() - requests_before
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            for r in runners:
                await r.cleanup()
    pickups = [kube.first_status[n] - t for n, t in created.items() if n in kube.first_status]
    outcome = phases()
    result = {
        "pickup_p50_s": round(percentile(pickups, 0.5), 3),
        "pickup_p90_s": round(percentile(pickups, 0.9), 3),
        "pickup_p99_s": round(percentile(pickups, 0.99), 3),
        "pickup_max_s": round(max(pickups), 3),
        "finished_requests_per_minute": round(requests / window * 60, 2),
        "operator_cpu_s_per_datasample": round(cpu / new, 4),
        "targets": {"pickup_p99_s": "< 1", "finished_requests_per_minute": 0},
        "retained_finished": retained,
        "new_datasamples": new,
        "create_interval_s": interval,
        "applications": APPS,
        "window_s": round(window, 1),
        "phases": {p: list(outcome.values()).count(p) for p in set(outcome.values())},
        "picked_up": len(pickups),
        "run": run_info(),
        "pickups_s": sorted(round(p, 3) for p in pickups),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result


SAMPLES_RES = "sparkglass.io/v1alpha1/datasamples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--retained", type=int, default=500, help="finished DataSamples kept")
    parser.add_argument("--new", type=int, default=50, help="new DataSamples created")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between creates")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "operator.json")
    args = parser.parse_args()
    result = asyncio.run(bench(args.retained, args.new, args.interval, args.out))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

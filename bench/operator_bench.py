"""Operator benchmark: API requests per SparkApplication, pickup, submissions, CPU, memory.

Run: ``make bench-operator`` (or ``.venv/bin/python bench/operator_bench.py``, ~20 minutes;
``--quick``: small sizes, under 3 minutes, written under ``/tmp``; ``--apps 50 --running 20
--burst 50 --default-qps-burst 20 --new 20 --rounds 2`` and the other options scale each
part down; ``--phases`` picks parts). Every phase runs the real operator process
(``sparkglass operator run --standalone``) against a fresh stand-in Kubernetes API server,
the one the operator tests use (``tests/operator/conftest.py``,
``tests/support/kube_apiserver.py``), served from this process on loopback.

**Steady state**, at the operator's defaults (``--api-qps 20 --api-burst 40``,
``--resync-seconds 10``, ``--full-resync-seconds 300``; this script's options of the same
names change them, and the JSON's ``run`` says which were used):

* ``--apps`` (1,000) SparkApplications (the flights example) in the namespace:
  ``--running`` (300) of them are submitted by a first operator process and this script
  plays the kubelet, marking each driver Pod ``Running`` at 127.0.0.1; the rest are
  finished, stored ``COMPLETED`` (their spec's hash, a termination time,
  ``timeToLiveSeconds`` of a day, kopf's finalizer and spec digest) as a previous operator
  leaves them. That first operator runs at ``--raised-api-qps`` (to be quick) and is then
  stopped; the measured one starts on the namespace it left (an upgrade, a failover), and
  resumes every running application with a full pass
  (``restart_to_every_application_resumed_s``; finished ones cost none);
* half of the running applications' drivers answer (one scripted driver control endpoint,
  ``tests/support/datasamples.py``, serving each application's own certificate by SNI and
  accepting each one's token): the operator reads their progress every
  ``--progress-seconds`` (its default, 60) and writes it into the status when it changed;
  the other half's control port refuses connections (a driver that does not answer);
* ``--retained`` (500) finished DataSamples (``Complete``, a TTL of a day), stored before
  the operator starts;
* once every application was resumed and a warm-up DataSample went end to end, a
  ``--warmup`` (30 s) pause, then the measured window (``--window``, default the full-resync
  period plus one resync, 310 s, so that it holds each running application's full resync
  once); during it ``--new`` (200) DataSamples are created, one per ``--interval`` (1 s), on
  5 running applications whose drivers answer (the *sampled* ones).

Requests are counted where they arrive, at the stand-in, and attributed to an application
when they are on its own path (``sparkapplications/<app>``, ``…/status``) or one of its
children's (``operator/names.py``: driver Pod and Service ``<app>-driver``, ConfigMap
``<app>-sparkglass``, Secret ``<app>-control-token``), when they create one of those, or
when they post an Event about the application or its driver Pod. kopf's watch streams of
whole collections are on no application's path (``details.window_requests`` lists every
request of the window). This script's own requests (creating objects, playing the kubelet)
carry a header and are not counted.

**Submissions**, ``--rounds`` (3) rounds per setting, each against a fresh stand-in and
operator process: once the operator is up (it submitted a first application), a burst of
SparkApplications created at once (concurrent creates); per application, the latency from
its create being answered to the stand-in answering the operator's create of its driver Pod,
and the *status lag*, to the operator's first status write after that (``SUBMITTED``). At
``--raised-api-qps 200 --raised-api-burst 400`` the burst is ``--burst`` (1,000); at the
operator's default ``--api-qps 20 --api-burst 40`` it is ``--default-qps-burst`` (100): at
that limit a submission's ~14 throttled requests allow about 80 per minute, so a burst of
1,000 would take ~13 minutes a round (``--default-qps-burst 1000`` measures it). The Pods
are left ``Pending`` (no kubelet); a round ends once the operator leaves its applications
alone (requests per submission include the passes after the Pods' events).

Figures (``bench/results/operator.json``), each with its spread: the median and a 95%
percentile-bootstrap interval over applications, rounds, slices of time or samples, as each
says in ``over`` (``bench/spread.py``; other percentiles by the same bootstrap,
``quantile_ci``):

* ``running_sparkapplication_requests_per_min`` (drivers answering) and
  ``running_sparkapplication_requests_per_min_driver_unreachable``;
  ``finished_sparkapplication_requests_per_min``; ``sampled_…`` for the 5 applications the
  DataSamples used (left out of the running figures); each with its requests by kind;
* ``datasample_pickup_p50_s``/``_p99_s``: create answered → the operator's first
  ``PATCH …/status`` of the DataSample, at the stand-in; ``datasample_to_final_p50_s``/
  ``_p99_s``: create answered → the answer to the status write that gave it a terminal
  phase (what ``kubectl apply`` then ``kubectl wait`` sees); ``finished_datasample_requests_
  per_min``: requests on the retained DataSamples' paths in the window;
* ``operator_cpu_seconds``: the operator's user + system CPU (``/proc/<pid>/stat``) over the
  window, and per minute over ~5 s slices; ``operator_peak_rss_mb``: ``VmHWM`` of
  ``/proc/<pid>/status`` of each operator process (and ``VmRSS`` sampled in the window);
  ``operator_requests_per_s`` and ``operator_rate_limit_wait`` (its
  ``sparkglass_operator_api_rate_limit_wait_seconds`` histogram over the window): how much
  of the client-side limit the steady state uses;
* ``submissions_per_min`` (over rounds), ``submission_latency_p50_s``/``_p99_s``,
  ``status_lag_p50_s``/``_p99_s`` (over every application of the rounds),
  ``requests_per_submission``, ``operator_cpu_ms_per_submission``: per setting
  (``default_api_qps``, ``raised_api_qps``); ``operator_api_qps`` says which limits each
  phase ran with; ``peer_reference``: Kubeflow spark-operator's published rate.

The stand-in's gaps that matter here: it serves from memory in this process, on the same 2
cores as the operator (its CPU is reported as ``bench_process_cpu_*``; with thousands of
objects it needs more CPU per submission than the operator), so API latency is a loopback
call's, not a real API server's, and a busy stand-in slows the operator down; finished
objects are stored as written before (``store_unchecked``), not admitted.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import itertools
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from sparkglass.operator.children import spec_hash  # noqa: E402
from sparkglass.operator.datasample import FINAL as FINAL_PHASES  # noqa: E402
from tests.operator.conftest import NAMESPACE, StrictApiServer  # noqa: E402
from tests.support import structural  # noqa: E402
from tests.support.datasamples import (  # noqa: E402
    ScriptedDriver,
    secret_entry,
    serve_driver,
)

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info  # noqa: E402
from spread import median_ci  # noqa: E402

RESULTS = REPO / "bench" / "results" / "operator.json"
QUICK_RESULTS = Path(tempfile.gettempdir()) / "sparkglass-operator-quick" / "operator.json"

GROUP = "/apis/sparkglass.io/v1alpha1"
APPS_PATH = f"{GROUP}/namespaces/{NAMESPACE}/sparkapplications"
SAMPLES_PATH = f"{GROUP}/namespaces/{NAMESPACE}/datasamples"
SAMPLES = f"{SAMPLES_PATH}/"
CORE = f"/api/v1/namespaces/{NAMESPACE}"
APPS_RES = "sparkglass.io/v1alpha1/sparkapplications"
SAMPLES_RES = "sparkglass.io/v1alpha1/datasamples"
VERTICES = ("parse", "flights", "schedule", "airports")
#: Children of application ``<app>`` by plural: the suffix of their name (operator/names.py).
CHILD_SUFFIX = {
    "pods": "-driver",
    "services": "-driver",
    "configmaps": "-sparkglass",
    "secrets": "-control-token",
}
#: Header on this script's own requests: the stand-in does not count them.
OWN = "X-Sparkglass-Bench"
MERGE = {"Content-Type": "application/merge-patch+json", OWN: "1"}
#: The operator's defaults (operator/settings.py) and the raised setting measured beside them.
DEFAULT_QPS, DEFAULT_BURST = 20.0, 40
DEFAULT_RESYNC_S, DEFAULT_FULL_RESYNC_S = 10.0, 300.0
#: Applications the new DataSamples use (excluded from the running figures).
SAMPLED_APPS = 5

TARGETS = {
    "finished_sparkapplication_requests_per_min": "0",
    "running_sparkapplication_requests_per_min": "<= 2",
    "datasample_pickup_p99_s": "< 1",
    "finished_datasample_requests_per_min": "0",
    "operator_peak_rss_mb": "<= 300",
    "submissions_per_min": ">= 600",
}

PEER_REFERENCE = {
    "what": "Kubeflow spark-operator v2.1.0: SparkApplications processed per minute",
    "submissions_per_min": "130-150",
    "setup": (
        "controller pod on a c5.9xlarge (36 vCPUs; 33 requested), 10 then 20 controller "
        "workers (~130-140, then ~140-155 per minute, CPU-bound), 6,000 applications "
        "submitted at 1,000/min to Amazon EKS 1.31; each submission runs spark-submit (a "
        "JVM), which sparkglass's operator does not"
    ),
    "source": "https://www.kubeflow.org/docs/components/spark-operator/performance/benchmarking/",
}


# --------------------------------------------------------------------------- the stand-in
def _parts(path: str) -> tuple[str, str | None, str | None]:
    """(plural, name, subresource) of an API path (namespaced or not)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return path, None, None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    plural = rest[0] if rest else ""
    return plural, (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)


def _label(method: str, path: str, query: Any) -> str:
    plural, name, sub = _parts(path)
    if method == "GET":
        watching = str(query.get("watch", "")).lower() in ("true", "1")
        verb = "get" if name else ("watch" if watching else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(
            method, method.lower()
        )
    return f"{verb} {plural}{'/' + sub if sub else ''}"


def _owner_app(plural: str, name: str | None) -> str | None:
    """The application whose child (or itself) ``plural/name`` is, by its name."""
    if not name:
        return None
    if plural == "sparkapplications":
        return name
    suffix = CHILD_SUFFIX.get(plural)
    if suffix and name.endswith(suffix):
        return name[: -len(suffix)]
    return None


class BenchApiServer(StrictApiServer):
    """The stand-in, noting when and on whose behalf the operator's requests arrived.

    Two changes to its cost, none to its answers (it serves the operator from this process,
    on the same 2 cores, and would otherwise spend more CPU per submission than the
    operator): its garbage collector scans every object after every write
    (``StrictApiServer._collect_garbage``), but objects become garbage only when their owner
    is deleted, and here none is (every child is created by the operator for an application
    that exists, and nothing deletes an application), so the scan runs only after a delete
    was served, then as before; and the schema and CEL validation of a SparkApplication
    create (this script's own, ~50 ms of Python each) runs once per distinct spec, the
    result reused under the next name (names are valid by construction)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deletes_unswept = False
        self.admitted: dict[str, Any] = {}
        #: Applications requests are attributed to (others' paths are not).
        self.apps: set[str] = set()
        #: Every request not the bench's own: (monotonic s, label).
        self.log: list[tuple[float, str]] = []
        #: Requests attributed to an application: (monotonic s, app, label).
        self.app_log: list[tuple[float, str, str]] = []
        #: Requests on one DataSample's paths: (monotonic s, its name).
        self.sample_log: list[tuple[float, str]] = []
        #: First status write of each DataSample (monotonic s).
        self.first_status: dict[str, float] = {}
        #: When the status write that gave each DataSample a terminal phase was answered.
        self.final_status: dict[str, float] = {}
        #: When the create of each Pod was answered 201 (monotonic s), by Pod name.
        self.pod_created: dict[str, float] = {}
        #: When each application's status writes were answered, by application.
        self.app_status_writes: dict[str, list[float]] = defaultdict(list)

    def _validated(self, info: Any, obj: dict[str, Any], old: Any, resource: Any) -> Any:
        if old is not None or resource.plural != "sparkapplications":
            return super()._validated(info, obj, old, resource)
        # Creates of SparkApplications are this script's own (the operator makes none), of a
        # few specs, under names valid by construction: each spec is checked once.
        meta = obj.get("metadata") or {}
        key = json.dumps({**obj, "metadata": {**meta, "name": ""}}, sort_keys=True)
        if key not in self.admitted:
            self.admitted[key] = super()._validated(info, obj, old, resource)
        admitted = copy.deepcopy(self.admitted[key])
        admitted["metadata"]["name"] = meta.get("name")
        return admitted

    async def _collect_garbage(self) -> None:
        if self.deletes_unswept:
            self.deletes_unswept = False
            await super()._collect_garbage()

    async def __call__(self, raw_request: Any) -> Any:
        arrived = time.monotonic()
        method, path = raw_request.method, raw_request.path
        if method == "DELETE":
            self.deletes_unswept = True
        own = OWN in raw_request.headers
        if method == "PATCH" and path.startswith(SAMPLES) and path.endswith("/status"):
            self.first_status.setdefault(path[len(SAMPLES) :].split("/")[0], arrived)
        response = await super().__call__(raw_request)
        if method == "PATCH" and path.startswith(SAMPLES) and path.endswith("/status"):
            name = path[len(SAMPLES) :].split("/")[0]
            if name not in self.final_status and sample_phase(self, name) in FINAL_PHASES:
                self.final_status[name] = time.monotonic()
        if own:
            return response
        answered = time.monotonic()
        label = _label(method, path, raw_request.query)
        code = getattr(response, "status", 0)
        if code >= 400:
            label = f"{label} {code}"
        self.log.append((arrived, label))
        if path.startswith(SAMPLES):
            self.sample_log.append((arrived, path[len(SAMPLES) :].split("/")[0]))
        plural, name, sub = _parts(path)
        app = _owner_app(plural, name)
        if app is None and method == "POST" and name is None:
            app = await self._created_for(raw_request, plural)
            if plural == "pods" and app is not None and code == 201:
                self.pod_created.setdefault(f"{app}-driver", answered)
        if app is not None and app in self.apps:
            self.app_log.append((arrived, app, label))
            written = code == 200 and method == "PATCH"
            if plural == "sparkapplications" and sub == "status" and written:
                self.app_status_writes[app].append(answered)
        return response

    @staticmethod
    async def _created_for(raw_request: Any, plural: str) -> str | None:
        """The application a create is for: the object's name, or an Event's object."""
        try:
            body = json.loads(await raw_request.read())
        except (ValueError, OSError):
            return None
        if not isinstance(body, dict):
            return None
        if plural == "events":
            involved = body.get("involvedObject") or {}
            kind, name = involved.get("kind"), involved.get("name")
            if kind == "SparkApplication":
                return name
            return _owner_app("pods", name) if kind == "Pod" else None
        return _owner_app(plural, (body.get("metadata") or {}).get("name"))


def new_api_server() -> BenchApiServer:
    kube = BenchApiServer()
    kube.resources.load_bundled()
    for crd in ("sparkapplication.yaml", "datasample.yaml"):
        kube.register_crd(yaml.safe_load((REPO / "crds" / crd).read_text()))
    return kube


# --------------------------------------------------------------------------- helpers
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kib(pid: int, key: str) -> int:
    """``VmHWM``/``VmRSS`` of ``/proc/<pid>/status``, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sig4(x: float) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, max(0, 3 - math.floor(math.log10(abs(x)))))


def quantile_ci(
    values: Sequence[float], q: float, confidence: float = 0.95, resamples: int = 4000
) -> dict[str, Any]:
    """Quantile ``q`` of ``values`` and its percentile-bootstrap interval (as
    ``spread.median_ci`` does for the median)."""
    data = np.asarray(values, dtype=float)
    value = float(np.quantile(data, q))
    low = high = value
    if len(data) > 1:
        rng = np.random.default_rng(0)
        picks = rng.integers(0, len(data), size=(resamples, len(data)))
        estimates = np.quantile(data[picks], q, axis=1)
        tail = (1.0 - confidence) / 2.0
        low, high = (float(x) for x in np.quantile(estimates, [tail, 1.0 - tail]))
    return {
        "value": sig4(value),
        "ci_low": sig4(low),
        "ci_high": sig4(high),
        "confidence": confidence,
        "samples": len(data),
    }


def spread_of(values: Sequence[float], over: str, **extra: Any) -> dict[str, Any]:
    figure = median_ci(values)
    figure["over"] = over
    figure.update(extra)
    return figure


async def wait_for(check: Any, timeout: float, what: str, proc: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the operator exited ({proc.returncode}) while waiting for {what}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def free_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(kube: BenchApiServer, tmp: Path) -> Path:
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
    return kubeconfig


def start_operator(
    kubeconfig: Path, log: Path, args: list[str], metrics_port: int = 0
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO / "src")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    command = [
        sys.executable, "-m", "sparkglass", "operator", "run", "--namespace", NAMESPACE,
        "--standalone", "--health-port", "0", "--metrics-port", str(metrics_port),
        "--log-level", os.environ.get("SG_OPERATOR_LOG_LEVEL", "WARNING"), *args,
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


def stop_operator(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 1 s (kopf's graceful exit can wait on open watches; what
    is measured of the process was read before)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def rate_limit_wait(port: int) -> tuple[float, float]:
    """(requests, seconds waited) of the operator's client-side rate limit so far, from its
    ``sparkglass_operator_api_rate_limit_wait_seconds`` histogram (``operator/metrics.py``)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    found = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        for key in found:
            if line.startswith(f"sparkglass_operator_api_rate_limit_wait_seconds_{key} "):
                found[key] = float(line.split()[1])
    return found["count"], found["sum"]


def operator_args(qps: float, burst: int, resync: float, full_resync: float) -> list[str]:
    return [
        "--api-qps", f"{qps:g}", "--api-burst", str(burst),
        "--resync-seconds", f"{resync:g}", "--full-resync-seconds", f"{full_resync:g}",
    ]  # fmt: skip


def example_app(name: str, port: int) -> dict[str, Any]:
    body = yaml.safe_load((REPO / "examples" / "flights-sparkapplication.yaml").read_text())
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    body["spec"]["sampling"]["controlPort"] = port
    return body


def sample(name: str, app: str, vertex: str) -> dict[str, Any]:
    return {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"applicationRef": {"name": app}, "vertex": vertex, "maxRecords": 10},
    }


async def post(kube: BenchApiServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await kube.post(path, json=body, headers={OWN: "1"})
    assert resp.status in (200, 201), await resp.text()
    return dict(await resp.json())


async def patch(kube: BenchApiServer, path: str, body: dict[str, Any]) -> None:
    resp = await kube.patch(path, json=body, headers=MERGE)
    assert resp.status == 200, await resp.text()


async def gather_in_chunks(coros: Iterable[Any], size: int = 50) -> None:
    batch: list[Any] = []
    for coro in coros:
        batch.append(coro)
        if len(batch) >= size:
            await asyncio.gather(*batch)
            batch = []
    if batch:
        await asyncio.gather(*batch)


def app_state(kube: BenchApiServer, name: str) -> str | None:
    status = (kube.stored(APPS_RES, NAMESPACE, name) or {}).get("status") or {}
    return (status.get("applicationState") or {}).get("state")


def sample_phase(kube: BenchApiServer, name: str) -> str | None:
    status = (kube.stored(SAMPLES_RES, NAMESPACE, name) or {}).get("status") or {}
    return status.get("phase")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def per_minute(count: int, seconds: float) -> float:
    return count * 60.0 / seconds if seconds > 0 else 0.0


# --------------------------------------------------------------------------- steady state
async def steady_phase(cfg: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    kube = new_api_server()
    driver = ScriptedDriver()
    driver.vertices = set(VERTICES)
    runner = await serve_driver(driver)
    refused_port = free_port()
    running = [f"run-{i:04d}" for i in range(cfg.running)]
    finished = [f"done-{i:04d}" for i in range(cfg.apps - cfg.running)]
    answering = running[: math.ceil(len(running) / 2)]
    silent = running[len(answering) :]
    sampled = answering[: min(SAMPLED_APPS, len(answering))]
    kube.apps = set(running) | set(finished)
    log = tmp / "operator-steady.log"
    args = operator_args(cfg.api_qps, cfg.api_burst, cfg.resync_seconds, cfg.full_resync_seconds)
    timings: dict[str, float] = {}
    began = time.monotonic()
    async with kube, kmock.Server(kube):
        kubeconfig = write_kubeconfig(kube, tmp)
        # The retained finished DataSamples and the finished applications: there before the
        # operator starts, as a previous operator left them (stored finished, as written
        # before: no admission on the way).
        done = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        retained = [f"old-{i:04d}" for i in range(cfg.retained)]
        for i, name in enumerate(retained):
            body = sample(name, sampled[i % len(sampled)], "parse")
            body["spec"]["ttlSecondsAfterFinished"] = 86400
            body["status"] = {"phase": "Complete", "completionTime": done, "roundId": f"x-{i}"}
            await kube.store_unchecked(SAMPLES_RES, body)
        # The hash of the spec as the server stores it (with the schema's defaults), as the
        # operator computes it: another one would make the operator submit the run again.
        schema = kube.custom[APPS_RES].schema
        template = example_app("x", refused_port)
        stored = structural.default(
            schema, structural.drop_nulls(schema, structural.prune(schema, template))
        )
        finished_status = {
            "specHash": spec_hash(stored["spec"]),
            "applicationState": {"state": "COMPLETED"},
            "observedGeneration": 1,
            "executionAttempts": 1,
            "submissionAttempts": 1,
            "restarts": 0,
            "lastSubmissionAttemptTime": done,
            "terminationTime": done,
        }
        # What kopf keeps on an application it handled (operator/app.py: the finalizer, the
        # spec digest of operator/diff_base.py): without them the setup operator's first
        # patch of each would race kmock's replay and wait for the watch to reconnect.
        digest = hashlib.sha256(
            json.dumps(stored["spec"], sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        handled = {
            "finalizers": ["sparkglass.io/operator"],
            "annotations": {
                "sparkglass.io/kopf-managed": "yes",
                "sparkglass.io/last-handled-configuration": json.dumps(
                    {"spec": {"sha256": digest}}, separators=(",", ":")
                )
                + "\n",
            },
        }
        for name in finished:
            body = example_app(name, refused_port)
            body["metadata"].update(copy.deepcopy(handled))
            body["status"] = dict(finished_status)
            await kube.store_unchecked(APPS_RES, body)
        await gather_in_chunks(
            post(kube, APPS_PATH, example_app(n, driver.port if n in answering else refused_port))
            for n in running
        )
        timings["seeded_s"] = time.monotonic() - began
        # A first operator (at the raised limits, to be quick) submits the running
        # applications and takes over the finished ones (their children, their status); the
        # measured one is then started on that namespace, as after an upgrade or a failover.
        setup_args = operator_args(
            cfg.raised_api_qps, cfg.raised_api_burst, cfg.resync_seconds, cfg.full_resync_seconds
        )
        proc = start_operator(kubeconfig, tmp / "operator-setup.log", setup_args)
        started = time.monotonic()
        try:
            # Play the kubelet: every driver Pod the operator creates starts running.
            marked: set[str] = set()

            async def kubelet() -> None:
                while len(marked) < len(running):
                    fresh = [
                        n
                        for n in running
                        if n not in marked and kube.stored("v1/pods", NAMESPACE, f"{n}-driver")
                    ]
                    for n in fresh:
                        marked.add(n)
                    await gather_in_chunks(
                        patch(
                            kube,
                            f"{CORE}/pods/{n}-driver/status",
                            {"status": {"phase": "Running", "podIP": "127.0.0.1"}},
                        )
                        for n in fresh
                    )
                    await asyncio.sleep(0.25)

            marking = asyncio.create_task(kubelet())

            # A finished application whose status is of its spec costs no pass at all (the
            # operator reads it from its watch), so only the running ones are waited for.
            def settled() -> bool:
                return all(app_state(kube, n) == "RUNNING" for n in running)

            await wait_for(settled, cfg.setup_timeout, "every application settled", proc)
            await marking
            timings["setup_operator_start_to_settled_s"] = time.monotonic() - started
            stop_operator(proc)
            # What each answering driver Pod mounts: its Secret's token and certificate.
            for n in answering:
                secret = kube.stored("v1/secrets", NAMESPACE, f"{n}-control-token")
                assert secret is not None, n
                driver.tokens.add(secret_entry(secret, "token"))
                driver.serve_certificate(
                    f"{n}-driver.{NAMESPACE}.svc",
                    secret_entry(secret, "tls.crt"),
                    secret_entry(secret, "tls.key"),
                )
            # The measured operator: resumes every running application (a full pass each), then the
            # warm-up: one DataSample end to end.
            restarted, seen = time.monotonic(), len(kube.app_log)
            metrics_port = free_port()
            proc = start_operator(kubeconfig, log, args, metrics_port)
            passed: set[str] = set()

            def resumed() -> bool:
                nonlocal seen
                fresh = kube.app_log[seen:]
                seen += len(fresh)
                passed.update(a for _, a, lbl in fresh if lbl.startswith("get pods"))
                return passed >= set(running)

            await wait_for(resumed, cfg.setup_timeout, "every running application resumed", proc)
            timings["restart_to_every_application_resumed_s"] = time.monotonic() - restarted
            resume_requests = [lbl for t, _, lbl in kube.app_log if t >= restarted]
            await post(kube, SAMPLES_PATH, sample("warmup", sampled[0], "parse"))
            await wait_for(
                lambda: sample_phase(kube, "warmup") == "Complete", 300, "the warm-up", proc
            )
            await asyncio.sleep(cfg.warmup)

            # The measured window.
            waits0 = await rate_limit_wait(metrics_port)
            t0, cpu0, own0 = time.monotonic(), cpu_seconds(proc.pid), own_cpu_seconds()
            cpu_marks: list[tuple[float, float]] = [(t0, cpu0)]
            rss_kib: list[int] = []
            created: dict[str, float] = {}

            async def create_samples() -> None:
                for k in range(cfg.new):
                    name = f"new-{k:04d}"
                    body = sample(name, sampled[k % len(sampled)], VERTICES[k % len(VERTICES)])
                    await post(kube, SAMPLES_PATH, body)
                    created[name] = time.monotonic()
                    await asyncio.sleep(max(0.0, t0 + (k + 1) * cfg.interval - time.monotonic()))

            async def sampler() -> None:
                while True:
                    await asyncio.sleep(min(5.0, cfg.window / 12))
                    cpu_marks.append((time.monotonic(), cpu_seconds(proc.pid)))
                    rss_kib.append(proc_kib(proc.pid, "VmRSS"))

            creating = asyncio.create_task(create_samples())
            sampling = asyncio.create_task(sampler())
            await asyncio.sleep(max(0.0, t0 + cfg.window - time.monotonic()))
            t1, cpu1, own1 = time.monotonic(), cpu_seconds(proc.pid), own_cpu_seconds()
            waits1 = await rate_limit_wait(metrics_port)
            cpu_marks.append((t1, cpu1))
            sampling.cancel()
            await creating
            await wait_for(
                lambda: all(
                    sample_phase(kube, n) not in (None, "Pending", "InProgress") for n in created
                ),
                300,
                "every new DataSample to finish",
                proc,
            )
            peak_kib = proc_kib(proc.pid, "VmHWM")
            if proc.poll() is not None:
                raise RuntimeError(f"the operator exited: {tail(log)}")
        except BaseException:
            print(tail(log), file=sys.stderr)
            raise
        finally:
            stop_operator(proc)
            await runner.cleanup()

    window = t1 - t0
    in_window = [(t, a, lbl) for t, a, lbl in kube.app_log if t0 <= t < t1]
    per_app = Counter(a for _, a, _ in in_window)

    def rates(apps: Sequence[str]) -> list[float]:
        return [per_minute(per_app.get(a, 0), window) for a in apps]

    def by_kind(apps: Sequence[str]) -> dict[str, float]:
        chosen = set(apps)
        kinds = Counter(lbl for _, a, lbl in in_window if a in chosen)
        n = max(1, len(apps))
        return {k: sig4(per_minute(c, window) / n) for k, c in kinds.most_common()}

    def group(apps: Sequence[str], what: str) -> dict[str, Any] | None:
        values = rates(apps)
        if not values:
            return None
        return spread_of(
            values,
            f"applications ({what}), each one's requests per minute over the window",
            mean=sig4(float(np.mean(values))) if values else 0.0,
            max=sig4(max(values)) if values else 0.0,
            applications=len(apps),
            by_request_per_application=by_kind(apps),
        )

    measured_answering = [a for a in answering if a not in sampled]
    pickups = [kube.first_status[n] - t for n, t in created.items() if n in kube.first_status]
    to_final = [kube.final_status[n] - t for n, t in created.items() if n in kube.final_status]
    kept = set(retained)
    retained_hits = sum(1 for t, name in kube.sample_log if t0 <= t < t1 and name in kept)
    slices = [
        (c2 - c1) * 60.0 / (s2 - s1)
        for (s1, c1), (s2, c2) in itertools.pairwise(cpu_marks)
        if s2 - s1 > 1.0
    ]
    outcome = Counter(sample_phase(kube, n) for n in created)
    step = 10.0
    window_log = [t for t, _ in kube.log if t0 <= t < t1]
    per_second = [
        sum(1 for t in window_log if t0 + i * step <= t < t0 + (i + 1) * step) / step
        for i in range(int(window // step))
    ]
    limited = waits1[0] - waits0[0]
    return {
        "operator_requests_per_s": spread_of(
            per_second,
            "10 s slices of the window: every request the operator made, per second",
            max=sig4(max(per_second, default=0.0)),
            mean=sig4(len(window_log) / window),
        ),
        "rate_limit_wait": {
            "requests": int(limited),
            "seconds_waited": sig4(waits1[1] - waits0[1]),
            "mean_wait_ms": sig4((waits1[1] - waits0[1]) * 1000 / limited) if limited else 0.0,
            "what": "sparkglass_operator_api_rate_limit_wait_seconds over the window",
        },
        "running": group(measured_answering, "running, driver answers progress"),
        "running_unreachable": group(silent, "running, driver does not answer"),
        "finished": group(finished, "finished, COMPLETED"),
        "sampled": group(sampled, "running, the new DataSamples' applications"),
        "pickups": pickups,
        "to_final": to_final,
        "retained_datasample_requests_total": retained_hits,
        "window_s": window,
        "window_requests": dict(Counter(lbl for t, lbl in kube.log if t0 <= t < t1).most_common()),
        "operator_cpu_s": cpu1 - cpu0,
        "operator_cpu_s_per_min_slices": slices,
        "bench_process_cpu_s": own1 - own0,
        "rss_kib": rss_kib,
        "peak_kib": peak_kib,
        "phases": dict(outcome),
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "resume_requests_per_application": sig4(len(resume_requests) / max(1, len(kube.apps))),
        "operator_args": args,
        "setup_operator_args": setup_args,
        "applications": {
            "running": len(running),
            "running_driver_answers": len(answering),
            "running_driver_unreachable": len(silent),
            "sampled": len(sampled),
            "finished": len(finished),
        },
    }


# --------------------------------------------------------------------------- submissions
async def burst_phase(
    cfg: argparse.Namespace, tmp: Path, qps: float, burst: int, size: int, tag: str
) -> dict[str, Any]:
    """``cfg.rounds`` bursts of ``size`` SparkApplications at ``qps``/``burst``, each against
    a fresh stand-in and operator process (rounds do not share a namespace)."""
    rounds = [
        await burst_round(cfg, tmp, qps, burst, size, f"{tag}-{r}") for r in range(cfg.rounds)
    ]
    latencies = [x for r in rounds for x in r.pop("latencies")]
    lags = [x for r in rounds for x in r.pop("lags")]
    requests: Counter[str] = Counter()
    for r in rounds:
        requests.update(r.pop("requests"))
    submissions = size * len(rounds)
    return {
        "api_qps": qps,
        "api_burst": burst,
        "applications": size,
        "rounds": len(rounds),
        "submissions_per_min": spread_of(
            [r["submissions_per_min"] for r in rounds],
            "rounds: each burst's applications per minute, from its first create answered "
            "to its last driver Pod created",
        ),
        "submission_latency_p50_s": quantile_ci(latencies, 0.5),
        "submission_latency_p99_s": quantile_ci(latencies, 0.99),
        "submission_latency_max_s": sig4(max(latencies)),
        "status_lag_p50_s": quantile_ci(lags, 0.5),
        "status_lag_p99_s": quantile_ci(lags, 0.99),
        "requests_per_submission": sig4(sum(requests.values()) / submissions),
        "requests_per_submission_by_kind": {
            k: sig4(c / submissions) for k, c in requests.most_common()
        },
        "operator_cpu_ms_per_submission": sig4(
            sum(r["operator_cpu_s"] for r in rounds) * 1000 / submissions
        ),
        "bench_process_cpu_ms_per_submission": sig4(
            sum(r["bench_process_cpu_s"] for r in rounds) * 1000 / submissions
        ),
        "operator_peak_rss_mb": sig4(max(r["operator_peak_rss_mb"] for r in rounds)),
        "per_round": rounds,
        "operator_args": operator_args(qps, burst, cfg.resync_seconds, cfg.full_resync_seconds),
    }


async def burst_round(
    cfg: argparse.Namespace, tmp: Path, qps: float, burst: int, size: int, tag: str
) -> dict[str, Any]:
    """One burst: ``size`` SparkApplications created at once once the operator is up; done
    when every one is ``SUBMITTED`` (their Pods stay ``Pending``: no kubelet here), then
    counted until the operator leaves them alone (its passes after the Pod's event)."""
    kube = new_api_server()
    names = [f"burst-{i:04d}" for i in range(size)]
    kube.apps = {"canary", *names}
    chosen = set(names)
    port = free_port()
    log = tmp / f"operator-{tag}.log"
    args = operator_args(qps, burst, cfg.resync_seconds, cfg.full_resync_seconds)
    answered: dict[str, float] = {}

    def status_after_pod(name: str) -> float | None:
        pod_at = kube.pod_created[f"{name}-driver"]
        return next((t for t in kube.app_status_writes[name] if t >= pod_at), None)

    async def create(name: str) -> None:
        await post(kube, APPS_PATH, example_app(name, port))
        answered[name] = time.monotonic()

    async with kube, kmock.Server(kube):
        kubeconfig = write_kubeconfig(kube, tmp)
        proc = start_operator(kubeconfig, log, args)
        try:
            # The operator is up once it submitted a first application.
            await post(kube, APPS_PATH, example_app("canary", port))
            await wait_for(
                lambda: app_state(kube, "canary") == "SUBMITTED", 300, "the canary", proc
            )
            await asyncio.sleep(2)
            cpu0, own0, log0 = cpu_seconds(proc.pid), own_cpu_seconds(), len(kube.log)
            began = time.monotonic()
            await asyncio.gather(*(create(n) for n in names))
            await wait_for(
                lambda: all(f"{n}-driver" in kube.pod_created for n in names),
                cfg.burst_timeout,
                f"{size} driver Pods",
                proc,
            )
            await wait_for(
                lambda: all(status_after_pod(n) is not None for n in names),
                120,
                "the SUBMITTED status writes",
                proc,
            )
            ended = time.monotonic()
            # The passes that follow (the Pods' events) belong to the submissions' cost.
            quiet_since, seen = time.monotonic(), len(kube.app_log)
            while time.monotonic() - quiet_since < 3 and time.monotonic() - ended < 60:
                await asyncio.sleep(0.2)
                if any(a in chosen for _, a, _ in kube.app_log[seen:]):
                    quiet_since = time.monotonic()
                seen = len(kube.app_log)
            cpu1, own1 = cpu_seconds(proc.pid), own_cpu_seconds()
            peak_kib = proc_kib(proc.pid, "VmHWM")
            states = Counter(app_state(kube, n) for n in names)
        except BaseException:
            print(tail(log), file=sys.stderr)
            raise
        finally:
            stop_operator(proc)
    first = min(answered.values())
    pod_times = [kube.pod_created[f"{n}-driver"] for n in names]
    return {
        "submissions_per_min": sig4(per_minute(size, max(pod_times) - first)),
        "burst_s": sig4(max(pod_times) - first),
        "creates_answered_within_s": sig4(max(answered.values()) - began),
        "operator_cpu_s": sig4(cpu1 - cpu0),
        "bench_process_cpu_s": sig4(own1 - own0),
        "operator_peak_rss_mb": sig4(peak_kib / 1024),
        "operator_requests": len(kube.log) - log0,
        "states": dict(states),
        "elapsed_s": sig4(ended - began),
        "latencies": [kube.pod_created[f"{n}-driver"] - answered[n] for n in names],
        "lags": [(status_after_pod(n) or 0.0) - answered[n] for n in names],
        "requests": Counter(lbl for t, a, lbl in kube.app_log if a in chosen and t >= began),
        "timeline": {
            "slice_s": cfg.slice_seconds,
            "creates_answered": timeline(answered.values(), began, cfg),
            "pods_created": timeline(pod_times, began, cfg),
            "operator_requests": timeline((t for t, _ in kube.log[log0:]), began, cfg),
        },
    }


def timeline(times: Iterable[float], began: float, cfg: argparse.Namespace) -> list[int]:
    """How many of ``times`` fell in each ``cfg.slice_seconds`` slice from ``began``."""
    step = cfg.slice_seconds
    counts = Counter(int((t - began) // step) for t in times if t >= began)
    return [counts.get(i, 0) for i in range(max(counts, default=-1) + 1)]


# --------------------------------------------------------------------------- the run
async def bench(cfg: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="sg-operator-bench-"))
    phases = set(cfg.phases)
    steady = await steady_phase(cfg, tmp) if "steady" in phases else None
    bursts: dict[str, dict[str, Any]] = {}
    if "burst-default" in phases:
        bursts["default_api_qps"] = await burst_phase(
            cfg, tmp, DEFAULT_QPS, DEFAULT_BURST, cfg.default_qps_burst, "default"
        )
    if "burst-raised" in phases:
        bursts["raised_api_qps"] = await burst_phase(
            cfg, tmp, cfg.raised_api_qps, cfg.raised_api_burst, cfg.burst, "raised"
        )
    result: dict[str, Any] = {}
    peaks: dict[str, float] = {}
    if steady is not None:
        result["running_sparkapplication_requests_per_min"] = steady["running"]
        result["running_sparkapplication_requests_per_min_driver_unreachable"] = steady[
            "running_unreachable"
        ]
        result["finished_sparkapplication_requests_per_min"] = steady["finished"]
        result["sampled_sparkapplication_requests_per_min"] = steady["sampled"]
        pickups = steady["pickups"]
        if pickups:
            result["datasample_pickup_p50_s"] = quantile_ci(pickups, 0.5)
            result["datasample_pickup_p99_s"] = quantile_ci(pickups, 0.99)
            result["datasample_pickup_max_s"] = sig4(max(pickups))
        if to_final := steady.get("to_final"):
            result["datasample_to_final_p50_s"] = quantile_ci(to_final, 0.5)
            result["datasample_to_final_p99_s"] = quantile_ci(to_final, 0.99)
        result["datasample_outcomes"] = steady["phases"]
        result["finished_datasample_requests_per_min"] = sig4(
            per_minute(steady["retained_datasample_requests_total"], steady["window_s"])
        )
        result["operator_cpu_seconds"] = {
            "window_total": sig4(steady["operator_cpu_s"]),
            "window_s": sig4(steady["window_s"]),
            "per_minute": spread_of(
                steady["operator_cpu_s_per_min_slices"],
                "slices of the window (~5 s each): operator CPU seconds per minute",
            ),
            "bench_process_cpu_s": sig4(steady["bench_process_cpu_s"]),
        }
        result["operator_requests_per_s"] = steady["operator_requests_per_s"]
        result["operator_rate_limit_wait"] = steady["rate_limit_wait"]
        peaks["steady"] = steady["peak_kib"] / 1024
    for tag, b in bursts.items():
        peaks[f"submissions_{tag}"] = b["operator_peak_rss_mb"]
    if peaks:
        result["operator_peak_rss_mb"] = {
            "max": sig4(max(peaks.values())),
            "by_process": {k: sig4(v) for k, v in peaks.items()},
            "over": "VmHWM of each operator process (a peak: one value per process)",
        }
        if steady is not None and steady["rss_kib"]:
            result["operator_peak_rss_mb"]["steady_rss_mb_in_window"] = spread_of(
                [k / 1024 for k in steady["rss_kib"]], "VmRSS samples of the window"
            )
    for key in (
        "submissions_per_min",
        "submission_latency_p50_s",
        "submission_latency_p99_s",
        "status_lag_p50_s",
        "status_lag_p99_s",
        "requests_per_submission",
        "operator_cpu_ms_per_submission",
        "bench_process_cpu_ms_per_submission",
    ):
        if bursts:
            result[key] = {tag: b[key] for tag, b in bursts.items()}
    result["operator_api_qps"] = {
        **(
            {
                "steady": {"api_qps": cfg.api_qps, "api_burst": cfg.api_burst},
                "steady_setup": {
                    "api_qps": cfg.raised_api_qps,
                    "api_burst": cfg.raised_api_burst,
                },
            }
            if steady
            else {}
        ),
        **{
            tag: {"api_qps": b["api_qps"], "api_burst": b["api_burst"], "burst": b["applications"]}
            for tag, b in bursts.items()
        },
    }
    result["peer_reference"] = PEER_REFERENCE
    result["targets"] = TARGETS
    result["targets_met"] = targets_met(result)
    defaults = (cfg.resync_seconds, cfg.full_resync_seconds) == (
        DEFAULT_RESYNC_S,
        DEFAULT_FULL_RESYNC_S,
    )
    result["run"] = {
        **run_info(),
        "quick": cfg.quick,
        "resync_seconds": cfg.resync_seconds,
        "full_resync_seconds": cfg.full_resync_seconds,
        "full_resync_note": (
            "the operator's defaults (--resync-seconds 10, --full-resync-seconds 300); the "
            "window (one full-resync period plus one resync) holds each running "
            "application's full resync once"
            if defaults
            else "shorter than the operator's defaults (--resync-seconds 10, "
            "--full-resync-seconds 300): full passes come more often than at the defaults, "
            "so the running figures are higher than the defaults'"
        ),
        "window_s": sig4(steady["window_s"]) if steady else None,
        "warmup_s": cfg.warmup,
        "retained_datasamples": cfg.retained,
        "new_datasamples": cfg.new,
        "create_interval_s": cfg.interval,
        "steady": (
            {
                "applications": steady["applications"],
                "setup_operator_args": steady["setup_operator_args"],
                "operator_args": steady["operator_args"],
                "timings_s": steady["timings"],
                "resume_requests_per_application": steady["resume_requests_per_application"],
            }
            if steady
            else None
        ),
        "bursts": {
            tag: {
                "applications_per_round": b["applications"],
                "rounds": b["rounds"],
                "operator_args": b["operator_args"],
                "per_round": [
                    {k: v for k, v in r.items() if k != "timeline"} for r in b["per_round"]
                ],
            }
            for tag, b in bursts.items()
        },
    }
    result["details"] = {
        "requests_per_submission_by_kind": {
            tag: b["requests_per_submission_by_kind"] for tag, b in bursts.items()
        },
        "submission_latency_max_s": {
            tag: b["submission_latency_max_s"] for tag, b in bursts.items()
        },
        "submission_timeline": {
            tag: [r["timeline"] for r in b["per_round"]] for tag, b in bursts.items()
        },
    }
    if steady is not None:
        result["details"]["window_requests"] = steady["window_requests"]
        result["details"]["pickups_s"] = sorted(round(p, 3) for p in steady["pickups"])
    return result


def targets_met(result: dict[str, Any]) -> dict[str, Any]:
    met: dict[str, Any] = {}

    def median(key: str) -> float | None:
        figure = result.get(key)
        return None if figure is None else float(figure["median"])

    finished = result.get("finished_sparkapplication_requests_per_min")
    if finished is not None:  # every finished application: none may cost a request
        met["finished_sparkapplication_requests_per_min"] = finished["max"] == 0
    if (v := median("running_sparkapplication_requests_per_min")) is not None:
        met["running_sparkapplication_requests_per_min"] = v <= 2
    if (v := median("running_sparkapplication_requests_per_min_driver_unreachable")) is not None:
        met["running_sparkapplication_requests_per_min_driver_unreachable"] = v <= 2
    if "datasample_pickup_p99_s" in result:
        met["datasample_pickup_p99_s"] = result["datasample_pickup_p99_s"]["value"] < 1
    if "finished_datasample_requests_per_min" in result:
        met["finished_datasample_requests_per_min"] = (
            result["finished_datasample_requests_per_min"] == 0
        )
    if "operator_peak_rss_mb" in result:
        met["operator_peak_rss_mb"] = result["operator_peak_rss_mb"]["max"] <= 300
    for tag, figure in (result.get("submissions_per_min") or {}).items():
        met[f"submissions_per_min.{tag}"] = figure["median"] >= 600
    return met


#: Sizes of the default run (the issue's), and of ``--quick``.
FULL = {
    "apps": 1000,
    "running": 300,
    "retained": 500,
    "new": 200,
    "burst": 1000,
    "default_qps_burst": 100,
    "rounds": 3,
    "warmup": 30.0,
    "resync_seconds": DEFAULT_RESYNC_S,
    "full_resync_seconds": DEFAULT_FULL_RESYNC_S,
}
QUICK = {
    "apps": 50,
    "running": 20,
    "retained": 50,
    "new": 20,
    "burst": 50,
    "default_qps_burst": 10,
    "rounds": 2,
    "warmup": 3.0,
    "resync_seconds": 5.0,
    "full_resync_seconds": 20.0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under 3 minutes")
    parser.add_argument("--apps", type=int, help="SparkApplications in the namespace (1000)")
    parser.add_argument("--running", type=int, help="of them running (300)")
    parser.add_argument("--retained", type=int, help="finished DataSamples kept (500)")
    parser.add_argument("--new", type=int, help="new DataSamples in the window (200)")
    parser.add_argument("--interval", type=float, default=1.0, help="s between their creates")
    parser.add_argument("--burst", type=int, help="SparkApplications created at once (1000)")
    parser.add_argument(
        "--default-qps-burst", type=int, help="burst size at the default --api-qps (100)"
    )
    parser.add_argument("--rounds", type=int, help="bursts per setting, one after the other (3)")
    parser.add_argument("--window", type=float, help="measured window, s (full resync + resync)")
    parser.add_argument("--warmup", type=float, help="pause before the window, s (30)")
    parser.add_argument("--resync-seconds", type=float, help="operator's (default 10)")
    parser.add_argument("--full-resync-seconds", type=float, help="operator's (default 300)")
    parser.add_argument("--api-qps", type=float, default=DEFAULT_QPS, help="steady state's")
    parser.add_argument("--api-burst", type=int, default=DEFAULT_BURST, help="steady state's")
    parser.add_argument("--raised-api-qps", type=float, default=200.0)
    parser.add_argument("--raised-api-burst", type=int, default=400)
    parser.add_argument("--slice-seconds", type=float, default=10.0, help="burst rate slices")
    parser.add_argument("--setup-timeout", type=float, default=1500.0)
    parser.add_argument("--burst-timeout", type=float, default=1200.0)
    parser.add_argument(
        "--phases",
        nargs="+",
        default=["steady", "burst-default", "burst-raised"],
        choices=["steady", "burst-default", "burst-raised"],
    )
    parser.add_argument("--out", type=Path, help=f"default {RESULTS} ({QUICK_RESULTS} --quick)")
    cfg = parser.parse_args()
    for key, value in (QUICK if cfg.quick else FULL).items():
        if getattr(cfg, key) is None:
            setattr(cfg, key, value)
    if cfg.window is None:
        cfg.window = cfg.full_resync_seconds + cfg.resync_seconds
    if cfg.out is None:
        cfg.out = QUICK_RESULTS if cfg.quick else RESULTS
    if not 0 < cfg.running <= cfg.apps:
        parser.error("--running must be between 1 and --apps")
    result = asyncio.run(bench(cfg))
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cfg.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "details"}, indent=2))
    print(f"written to {cfg.out}")


if __name__ == "__main__":
    main()

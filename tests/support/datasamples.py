"""DataSamples run by the real operator process against a scripted driver control endpoint.

The scripted driver (:class:`ScriptedDriver`, ``serve_driver``, the ``driver`` fixture) serves
HTTPS only, with the certificate the operator put in each application's Secret; the store,
result service and operator-argument fixtures; the example application running
(``running_app``), DataSample bodies, their status, phases and events.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import yaml

from tests.operator.conftest import (
    EXAMPLES_DIR,
    NAMESPACE,
    OperatorProcess,
    StrictApiServer,
    eventually,
)
from tests.support.result_service import ResultService, serve_results

APPS = "sparkglass.io/v1alpha1/sparkapplications"
SAMPLES = "sparkglass.io/v1alpha1/datasamples"
SERVICE_URL = "http://sparkglass.example:8000"


@dataclass
class ScriptedDriver:
    """The driver's control endpoint with per-vertex behaviour.

    ``behaviour[vertex]``: ``complete`` (default), ``partial``, ``no-data``, ``failed``,
    ``busy`` (429 on every open), ``flaky`` (503 on the first open), ``disabled``,
    ``reject-filter`` (400 naming ``filter``, as the real driver answers a filter over an
    unknown column), ``hold
    (the round stays PENDING until ``release()``), ``dead`` (503 on every read of its rounds:
    a driver that stopped answering), ``negative`` (a final result with a negative counter:
    an answer past the status's bounds). Unknown vertices (not in ``vertices``) get 404, and so
    do rounds it does not know (``forget()``: a restarted driver). Records: ``records`` per
    subtask, 2 subtasks, each ~``record_bytes`` long.
    """

    tokens: set[str] = field(default_factory=set)  # one per application using this driver
    vertices: set[str] = field(default_factory=set)
    behaviour: dict[str, str] = field(default_factory=dict)
    records: int = 3
    record_bytes: int = 60
    held: bool = True
    calls: Counter[str] = field(default_factory=Counter)
    rounds: dict[str, str] = field(default_factory=dict)  # round id -> vertex
    auth_failures: int = 0
    port: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # idempotency key -> round id
    #: The query of each authorized open (samplingWindow, idempotencyKey, kind, filter...).
    opens: list[dict[str, str]] = field(default_factory=list)
    #: While set, an open registers its round and then answers only once ``open_gate`` is set
    #: (a caller can die between the driver opening the round and learning its id).
    stall_opens: bool = False
    open_gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: A ``slow`` round check answers once this is set.
    check_gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: TLS: the context of each server name (SNI) this driver answers for.
    contexts: dict[str, ssl.SSLContext] = field(default_factory=dict)
    handshakes: Counter[str] = field(default_factory=Counter)  # server name -> handshakes

    def serve_certificate(self, server_name: str, cert_pem: str, key_pem: str) -> None:
        """Answer TLS handshakes for ``server_name`` with this certificate and key."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = f"{tmp}/tls.crt", f"{tmp}/tls.key"
            with open(cert, "w") as f:
                f.write(cert_pem)
            with open(key, "w") as f:
                f.write(key_pem)
            context.load_cert_chain(cert, key)
        self.contexts[server_name] = context

    def ssl_context(self) -> ssl.SSLContext:
        """The listening context: the certificate is picked per server name (SNI)."""
        listening = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

        def pick(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> int | None:
            self.handshakes[name or ""] += 1
            chosen = self.contexts.get(name or "")
            if chosen is None:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            sock.context = chosen
            return None

        listening.sni_callback = pick  # type: ignore[assignment]
        return listening

    def release(self) -> None:
        self.held = False

    def forget(self, vertex: str) -> None:
        """Forget the rounds at ``vertex``, as a new driver run knows none of the last one's."""
        self.rounds = {r: v for r, v in self.rounds.items() if v != vertex}

    def _authorized(self, request: aiohttp.web.Request) -> bool:
        ok = request.headers.get("Authorization") in {f"Bearer {t}" for t in self.tokens}
        self.auth_failures += 0 if ok else 1
        return ok

    async def progress(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        """``GET /api/v1/progress``: live metrics that grow with every call."""
        self.calls["progress"] += 1
        if not self._authorized(request):
            return aiohttp.web.json_response({"error": "unauthorized"}, status=401)
        n = self.calls["progress"]
        return aiohttp.web.json_response(
            {
                "state": "ACTIVE",
                "activeQueries": 1,
                "microBatches": n,
                "inputRowsPerSecond": 10.0,
                "processedRowsPerSecond": 10.0,
                "lastMicroBatchTimestamp": 1_700_000_000_000 + n,
                "observedAt": 1_700_000_000_000 + n,
                "failed": None,
                "vertices": {
                    "parse": {"rowsLastMicroBatch": 5, "rowsPerSecond": 10.0, "rowsTotal": 5 * n}
                },
            }
        )

    async def open_round(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        vertex = request.match_info["vertex"]
        self.calls[f"open:{vertex}"] += 1
        if not self._authorized(request):
            return aiohttp.web.json_response({"error": "unauthorized"}, status=401)
        if vertex not in self.vertices:
            return aiohttp.web.json_response(
                {"error": f"no vertex {vertex!r}; vertices: {sorted(self.vertices)}"}, status=404
            )
        self.opens.append(dict(request.query))
        mode = self.behaviour.get(vertex, "complete")
        if mode == "busy":
            return aiohttp.web.json_response(
                {"status": "FAILED", "errorCode": "TOO_MANY_CONCURRENT_ROUNDS"}, status=429
            )
        if mode == "flaky" and self.calls[f"open:{vertex}"] == 1:
            return aiohttp.web.json_response({"error": "starting"}, status=503)
        if mode == "disabled":
            return aiohttp.web.json_response({"status": "DISABLED"})
        if mode == "reject-filter" and "filter" in request.query:
            return _filter_refusal()
        # The real driver's idempotency rule (runtime/sampling/rounds.py): a key it has seen
        # answers the round that key opened.
        key = request.query.get("idempotencyKey")
        if key is not None and key in self.keys:
            return aiohttp.web.json_response(
                {"status": "PENDING", "roundId": self.keys[key]}, status=202
            )
        round_id = f"r{len(self.rounds) + 1}-{vertex}"
        self.rounds[round_id] = vertex
        if key is not None:
            self.keys[key] = round_id
        if self.stall_opens:
            await self.open_gate.wait()
        return aiohttp.web.json_response({"status": "PENDING", "roundId": round_id}, status=202)

    async def check_round(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        """``GET .../round-check``: what ``open_round`` would answer, opening nothing
        (``reject-filter`` refuses a filter; ``slow`` answers once ``check_gate`` is set;
        ``old`` is a driver without the route)."""
        vertex = request.match_info["vertex"]
        self.calls[f"check:{vertex}"] += 1
        if not self._authorized(request):
            return aiohttp.web.json_response({"error": "unauthorized"}, status=401)
        mode = self.behaviour.get(vertex, "complete")
        if mode == "old":
            return aiohttp.web.json_response({"error": f"no route {request.path}"}, status=404)
        if vertex not in self.vertices:
            return aiohttp.web.json_response(
                {"error": f"no vertex {vertex!r}; vertices: {sorted(self.vertices)}"}, status=404
            )
        if mode == "slow":  # until the test lets it go (or 30 s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.check_gate.wait(), 30)
        if mode == "reject-filter" and "filter" in request.query:
            return _filter_refusal()
        return aiohttp.web.json_response({"accepted": mode != "disabled"})

    async def get_round(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        round_id = request.match_info["round"]
        self.calls[f"get:{round_id}"] += 1
        if not self._authorized(request):
            return aiohttp.web.json_response({"error": "unauthorized"}, status=401)
        if round_id not in self.rounds:
            return aiohttp.web.json_response({"error": "unknown round"}, status=404)
        vertex = self.rounds[round_id]
        mode = self.behaviour.get(vertex, "complete")
        if mode == "dead":
            return aiohttp.web.json_response({"error": "driver gone"}, status=503)
        if self.calls[f"get:{round_id}"] < 2 or (mode == "hold" and self.held):
            return aiohttp.web.json_response({"status": "PENDING", "roundId": round_id})
        max_records = int(request.query.get("maxRecords", "5000"))
        body: dict[str, Any] = {"roundId": round_id, "endTimestamp": 1_700_000_000_000}
        if mode == "no-data":
            return aiohttp.web.json_response({**body, "status": "NO_DATA"})
        if mode == "failed":
            return aiohttp.web.json_response({**body, "status": "FAILED", "errorCode": "TIMEOUT"})
        subtasks = [0] if mode == "partial" else [0, 1]
        samples = []
        for s in subtasks:
            records = [
                {
                    "sampleTimestamp": 1_700_000_000_000 + i,
                    "data": json.dumps({"subtask": s, "i": i, "pad": "x" * self.record_bytes}),
                    "dataType": "struct<subtask:int,i:int,pad:string>",
                    "truncated": False,
                }
                for i in range(self.records)
            ]
            samples.append({"subtaskIndex": s, "records": records})
        total = sum(len(x["records"]) for x in samples)
        result = {
            **body,
            "status": "PARTIAL" if mode == "partial" else "COMPLETE",
            "totalRecordCount": min(total, max_records),
            "totalTruncated": total > max_records,
            "droppedByRateLimit": 7,
            "samples": samples,
        }
        if mode == "partial":
            result.update(errorCode="EXECUTOR_UNREACHABLE", failedSubtasks=[1])
        if mode == "negative":
            result["droppedByRateLimit"] = -1
        return aiohttp.web.json_response(result)


def _filter_refusal() -> aiohttp.web.Response:
    """The real driver's 400 for a filter over an unknown column (open and round check)."""
    return aiohttp.web.json_response(
        {
            "error": "filter: unknown column 'carier' at vertex 'parse'; columns: "
            "carrier, flight, dep_delay",
            "field": "filter",
        },
        status=400,
    )


async def serve_driver(d: ScriptedDriver) -> aiohttp.web.AppRunner:
    """Serve ``d`` over HTTPS on 127.0.0.1 (``d.port``), as a driver's control endpoint;
    the caller cleans the runner up. Also used by ``bench/operator_bench.py``."""
    app = aiohttp.web.Application()
    app.router.add_post("/api/v1/vertices/{vertex}/rounds", d.open_round)
    app.router.add_get("/api/v1/vertices/{vertex}/round-check", d.check_round)
    app.router.add_get("/api/v1/rounds/{round}", d.get_round)
    app.router.add_get("/api/v1/progress", d.progress)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=d.ssl_context())
    await site.start()
    d.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner


@pytest.fixture()
async def driver() -> AsyncIterator[ScriptedDriver]:
    d = ScriptedDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


def secret_entry(secret: dict[str, Any], key: str) -> str:
    """A decoded ``data`` entry of a Secret."""
    return base64.b64decode(secret["data"][key]).decode()


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture()
def result_service(store_url: str, tmp_path: Path) -> Iterator[ResultService]:
    """The service the operator hands results to, saving them in ``store_url``."""
    with serve_results(store_url, tmp_path) as service:
        yield service


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    return [
        "--max-status-bytes",
        "4096",
        "--service-url",
        SERVICE_URL,
        *result_service.operator_args(),
        # The records' preview in status is opt-in; these tests read it.
        "--records-in-status",
        "--progress-seconds",
        "1",
    ]


def example(kind_file: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / kind_file).read_text())


async def post(kube: StrictApiServer, plural: str, body: dict[str, Any]) -> None:
    group = "/apis/sparkglass.io/v1alpha1"
    resp = await kube.post(f"{group}/namespaces/{NAMESPACE}/{plural}", json=body)
    assert resp.status in (200, 201), await resp.text()


async def patch_status(kube: StrictApiServer, path: str, status: dict[str, Any]) -> None:
    resp = await kube.patch(
        path, json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert resp.status == 200, await resp.text()


async def running_app(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    name: str = "flights",
    *,
    sampling: bool = True,
) -> None:
    """The example application, its driver Pod 'Running' at 127.0.0.1 (the scripted driver)."""
    body = example("flights-sparkapplication.yaml")
    body["metadata"]["name"] = name
    body["spec"]["sampling"]["controlPort"] = driver.port
    body["spec"]["sampling"]["enabled"] = sampling
    await post(kube, "sparkapplications", body)
    await eventually(lambda: kube.stored("v1/pods", NAMESPACE, f"{name}-driver"), operator=operator)
    await patch_status(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}-driver/status",
        {"phase": "Running", "podIP": "127.0.0.1"},
    )
    await eventually(
        lambda: state(kube, name) == "RUNNING", what=f"{name} RUNNING", operator=operator
    )
    secret = kube.stored("v1/secrets", NAMESPACE, f"{name}-control-token")
    assert secret is not None
    driver.tokens.add(secret_entry(secret, "token"))
    # What the driver Pod mounts: the certificate and key of the application's Secret.
    driver.serve_certificate(
        f"{name}-driver.{NAMESPACE}.svc",
        secret_entry(secret, "tls.crt"),
        secret_entry(secret, "tls.key"),
    )
    driver.vertices = {
        v["name"] for v in body["spec"]["pipeline"]["vertices"] if v.get("kind") != "sink"
    }


def state(kube: StrictApiServer, name: str) -> str | None:
    obj = kube.stored(APPS, NAMESPACE, name) or {}
    return ((obj.get("status") or {}).get("applicationState") or {}).get("state")


def sample_body(name: str, vertex: str, app: str = "flights", **spec: Any) -> dict[str, Any]:
    body = example("flights-datasample.yaml")
    body["metadata"]["name"] = name
    body["spec"].pop("ttlSecondsAfterFinished", None)
    body["spec"].update(applicationRef={"name": app}, vertex=vertex, **spec)
    return body


def status(kube: StrictApiServer, name: str) -> dict[str, Any]:
    return (kube.stored(SAMPLES, NAMESPACE, name) or {}).get("status") or {}


def phase(kube: StrictApiServer, name: str) -> str | None:
    return status(kube, name).get("phase")


def events_for(kube: StrictApiServer, name: str) -> list[dict[str, Any]]:
    found = []
    for n in kube.names("v1/events", NAMESPACE):
        event = kube.stored("v1/events", NAMESPACE, n) or {}
        if (event.get("involvedObject") or {}).get("name") == name:
            found.append(event)
    return found


FINAL = {"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"}


async def wait_final(kube: StrictApiServer, name: str, operator: OperatorProcess) -> str:
    return await eventually(
        lambda: phase(kube, name) if phase(kube, name) in FINAL else None,
        what=f"{name} to finish",
        operator=operator,
    )

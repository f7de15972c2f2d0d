"""A stand-in Spark driver control endpoint on loopback, scriptable per vertex.

It speaks the contract of ``sparkglass.runtime.contract.sample_result`` (POST a round, GET the
round) so every status and error code can be produced on demand. The real driver endpoint is
exercised separately by ``test_real_driver.py``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.sample_result import DataSampleResult, post_filter

TOKEN = "driver-secret-token"

PIPELINE = PipelineDescription.model_validate(
    {
        "name": "flights",
        "vertices": [
            {"name": "flights", "kind": "source", "bounded": False},
            {
                "name": "parse",
                "inputs": ["flights"],
                "python": True,
                "attributes": {"notCacheRecord": True},
            },
            {"name": "airlines", "kind": "source"},
            {
                "name": "carrier-names",
                "inputs": ["airlines"],
                "attributes": {"noOutputUntilEndOfInput": True},
            },
            {"name": "enriched", "inputs": ["parse", "carrier-names"]},
            {"name": "partial", "inputs": ["parse"]},
            {"name": "empty", "inputs": ["parse"]},
            {"name": "off", "inputs": ["parse"]},
            {"name": "busy", "inputs": ["parse"]},
            {"name": "stuck", "inputs": ["parse"]},
            {"name": "broken", "inputs": ["parse"]},
            {"name": "unreachable", "inputs": ["parse"]},
            {"name": "terminated", "inputs": ["parse"]},
            {"name": "slow", "inputs": ["parse"]},
            {"name": "timeout", "inputs": ["parse"]},
            {"name": "idle", "inputs": ["parse"]},
            {"name": "nested", "inputs": ["parse"]},
            {"name": "many", "inputs": ["parse"]},
            {"name": "out", "kind": "sink", "inputs": ["enriched"]},
        ],
    }
)


def records(subtask: int, n: int) -> list[dict[str, Any]]:
    """``n`` flight-like records of one subtask."""
    now = int(time.time() * 1000)
    return [
        {
            "sampleTimestamp": now + i,
            "data": f'{{"carrier":"UA","flight":{subtask * 1000 + i},"dep_delay":{i % 7}}}',
            "dataType": "struct<carrier:string,flight:bigint,dep_delay:bigint>",
            "truncated": i == 0 and subtask == 1,
        }
        for i in range(n)
    ]


#: Records with nested values, markup and fields missing in some records (vertex ``nested``).
NESTED_RECORDS: list[dict[str, Any]] = [
    {
        "carrier": "UA",
        "route": {"from": "SFO", "to": "JFK", "stops": [{"code": "DEN", "minutes": 45}]},
        "tags": ["red-eye", "intl"],
        "delay": 12,
        "note": None,
        "formula": "=HYPERLINK(\"http://evil\")",
    },
    {
        "carrier": "<img src=x onerror=\"window.__xss=1\">",
        "route": {"from": "<b>LAX</b>", "to": "ORD", "stops": []},
        "tags": ["<script>window.__xss=2</script>"],
        "delay": 3,
        "note": "<a href='javascript:window.__xss=3'>click</a>",
    },
    {"carrier": "AA", "route": {"from": "BOS", "to": "MIA", "stops": []}, "delay": 40},
    {"carrier": "DL", "route": {"from": "ATL", "to": "SEA", "stops": []}, "delay": 7},
]


def nested_result() -> list[dict[str, Any]]:
    """The ``nested`` vertex's samples: one subtask, the last record cut (truncated)."""
    now = int(time.time() * 1000)
    recs = []
    for i, rec in enumerate(NESTED_RECORDS):
        data = json.dumps(rec)
        truncated = i == len(NESTED_RECORDS) - 1
        recs.append(
            {
                "sampleTimestamp": now + i,
                "data": data[:40] if truncated else data,
                "dataType": "struct<carrier:string,route:struct<from:string,to:string>>",
                "truncated": truncated,
            }
        )
    return [{"subtaskIndex": 0, "records": recs}]


#: Records of the ``many`` vertex (5 subtasks of 1000: the 5,000-record response cap).
MANY_SUBTASKS = 5
MANY_PER_SUBTASK = 1000


def many_result() -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [
        {
            "subtaskIndex": s,
            "records": [
                {
                    "sampleTimestamp": now + s * MANY_PER_SUBTASK + i,
                    "data": (
                        f'{{"id":{s * MANY_PER_SUBTASK + i},"carrier":"C{(i * 7919) % 97:02d}",'
                        f'"delay":{(i * 31 + s) % 200},"route":{{"from":"A{i % 13}",'
                        f'"to":"B{i % 17}"}},"ok":{"true" if i % 3 else "false"}}}'
                    ),
                    "dataType": "struct<id:bigint,carrier:string,delay:bigint>",
                    "truncated": False,
                }
                for i in range(MANY_PER_SUBTASK)
            ],
        }
        for s in range(MANY_SUBTASKS)
    ]


def final_result(vertex: str, round_id: str) -> tuple[int, dict[str, Any]]:
    """(HTTP code of the POST, final body) for ``vertex``'s scripted behaviour."""
    base: dict[str, Any] = {"roundId": round_id}
    samples = [{"subtaskIndex": i, "records": records(i, 3)} for i in range(3)]
    if vertex == "partial":
        return 202, {
            **base,
            "status": "PARTIAL",
            "errorCode": "EXECUTOR_UNREACHABLE",
            "failedSubtasks": [2],
            "samples": samples[:2],
            "totalRecordCount": 6,
        }
    if vertex == "empty":
        return 202, {**base, "status": "NO_DATA", "noDataReason": "NO_ROWS"}
    if vertex == "idle":  # the query ran no micro-batch during the round
        return 202, {
            **base,
            "status": "NO_DATA",
            "noDataReason": "NO_MICRO_BATCH",
            "lastMicroBatchTimestamp": 1_700_000_000_000,
        }
    if vertex == "off":
        return 200, {"status": "DISABLED"}
    if vertex == "busy":
        return 429, {"status": "FAILED", "errorCode": "TOO_MANY_CONCURRENT_ROUNDS"}
    if vertex == "broken":
        return 202, {**base, "status": "FAILED", "errorCode": "INTERNAL_ERROR"}
    if vertex == "unreachable":
        return 202, {
            **base,
            "status": "FAILED",
            "errorCode": "EXECUTOR_UNREACHABLE",
            "failedSubtasks": [0, 1, 2],
        }
    if vertex == "terminated":
        return 202, {**base, "status": "FAILED", "errorCode": "TASK_TERMINATED"}
    if vertex == "timeout":
        return 202, {**base, "status": "FAILED", "errorCode": "TIMEOUT"}
    if vertex == "nested":
        return 202, {
            **base,
            "status": "COMPLETE",
            "samples": nested_result(),
            "totalRecordCount": len(NESTED_RECORDS),
        }
    if vertex == "many":
        return 202, {
            **base,
            "status": "COMPLETE",
            "samples": many_result(),
            "totalRecordCount": MANY_SUBTASKS * MANY_PER_SUBTASK,
        }
    return 202, {
        **base,
        "status": "COMPLETE",
        "samples": samples,
        "totalRecordCount": 9,
        "droppedByRateLimit": 4,
        "droppedByContention": 1,
    }


@dataclass
class FakeDriver:
    """The server's state: rounds started per vertex, and how long rounds stay PENDING."""

    pending_seconds: float = 0.3
    #: What ``GET /api/v1/settings`` answers: only what a test states (a real driver states
    #: every field; the service falls back to its own settings for the missing ones).
    sampling: dict[str, Any] = field(
        default_factory=lambda: {"enabled": True, "maxSampleRate": 100}
    )
    rounds: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: ``GET /api/v1/progress`` answers so far: each answer is one micro-batch further.
    progress_reads: int = 0

    def progress(self) -> dict[str, Any]:
        """The next metrics snapshot: micro-batch ``n`` counts ``10 * (i + 1) + n`` rows at
        the ``i``-th non-sink vertex, over one second (so as many rows/s)."""
        with self.lock:
            self.progress_reads += 1
            n = self.progress_reads
        now = int(time.time() * 1000)
        steps = [v.name for v in PIPELINE.vertices if v.kind.value != "sink"]
        return {
            "state": "ACTIVE",
            "activeQueries": 1,
            "microBatches": n,
            "inputRowsPerSecond": 10.0 + n,
            "processedRowsPerSecond": 20.0 + n,
            "lastMicroBatchTimestamp": now - 100,
            "observedAt": now,
            "vertices": {
                name: {
                    "rowsLastMicroBatch": 10 * (i + 1) + n,
                    "rowsPerSecond": float(10 * (i + 1) + n),
                    "rowsTotal": (10 * (i + 1)) * n + n * (n + 1) // 2,
                }
                for i, name in enumerate(steps)
            },
        }
    #: The Authorization header of every request that reached the app (None: absent).
    authorizations: list[str | None] = field(default_factory=list)
    #: The query parameters of every round opened, in order (kind, filter, columns, ...).
    opened: list[dict[str, str]] = field(default_factory=list)
    #: The query parameters of every round check (``GET .../round-check``).
    checked: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> FastAPI:
        api = FastAPI()

        @api.middleware("http")
        async def record(request: Request, call_next: Any) -> Any:
            with self.lock:
                self.authorizations.append(request.headers.get("authorization"))
            return await call_next(request)

        def auth(authorization: str | None) -> None:
            if authorization != f"Bearer {TOKEN}":
                raise HTTPException(401, "bad token")

        @api.get("/api/v1/pipeline")
        def pipeline(authorization: str | None = Header(None)) -> JSONResponse:
            auth(authorization)
            return JSONResponse(PIPELINE.to_json_dict())

        @api.get("/api/v1/settings")
        def settings(authorization: str | None = Header(None)) -> dict[str, Any]:
            auth(authorization)
            return dict(self.sampling)

        @api.get("/api/v1/progress")
        def progress(authorization: str | None = Header(None)) -> dict[str, Any]:
            auth(authorization)
            return self.progress()

        @api.post("/api/v1/vertices/{vertex}/rounds")
        def start(
            vertex: str, request: Request, authorization: str | None = Header(None)
        ) -> JSONResponse:
            auth(authorization)
            if vertex not in PIPELINE.names():
                raise HTTPException(404, f"no vertex {vertex}")
            rid = uuid.uuid4().hex[:12]
            with self.lock:
                self.started[vertex] = self.started.get(vertex, 0) + 1
                self.opened.append(dict(request.query_params))
            code, body = final_result(vertex, rid)
            if code != 202:
                return JSONResponse(body, status_code=code)
            delay = (
                1e9 if vertex == "stuck" else (2.0 if vertex == "slow" else self.pending_seconds)
            )
            self.rounds[rid] = {"vertex": vertex, "done_at": time.monotonic() + delay, "body": body}
            return JSONResponse({"status": "PENDING", "roundId": rid}, status_code=202)

        @api.get("/api/v1/vertices/{vertex}/round-check")
        def round_check(
            vertex: str, request: Request, authorization: str | None = Header(None)
        ) -> JSONResponse:
            # As the real driver: a filter naming a column the vertex lacks is a 400 naming
            # the parameter (here: any filter that mentions ``no_such_column``).
            auth(authorization)
            with self.lock:
                self.checked.append(dict(request.query_params))
            if "check_breaks" in request.query_params.get("filter", ""):
                return JSONResponse({"error": "the check broke"}, status_code=500)
            if "no_such_column" in request.query_params.get("filter", ""):
                return JSONResponse(
                    {"error": "filter: no column no_such_column", "field": "filter"},
                    status_code=400,
                )
            return JSONResponse({"accepted": True})

        @api.get("/api/v1/rounds/{rid}")
        def get_round(
            rid: str,
            authorization: str | None = Header(None),
            subtask_index: int | None = Query(None, alias="subtaskIndex"),
            max_records: int | None = Query(None, alias="maxRecords"),
        ) -> JSONResponse:
            auth(authorization)
            r = self.rounds.get(rid)
            if r is None:
                raise HTTPException(404, "no round")
            if time.monotonic() < r["done_at"]:
                return JSONResponse({"status": "PENDING", "roundId": rid})
            # The round ends when it is first seen finished (like the driver's end time).
            r["body"].setdefault("endTimestamp", int(time.time() * 1000))
            if subtask_index is None and max_records is None:
                return JSONResponse(r["body"])
            # The driver's post-filters, as the real endpoint applies them.
            cut = post_filter(
                DataSampleResult.model_validate(r["body"]), subtask_index, max_records
            )
            return JSONResponse(cut.to_json_dict())

        return api


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a daemon thread; over
    HTTPS when given a certificate and key file (``ssl_certfile``, ``ssl_keyfile``)."""

    def __init__(
        self, app: Any, *, ssl_certfile: str | None = None, ssl_keyfile: str | None = None
    ) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
        )
        self.scheme = "https" if ssl_certfile else "http"
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

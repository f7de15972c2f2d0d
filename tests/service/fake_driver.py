"""A stand-in Spark driver control endpoint on loopback, scriptable per vertex.

It speaks the contract of ``sparkglass.runtime.contract.sample_result`` (POST a round, GET the
round) so every status and error code can be produced on demand. The real driver endpoint is
exercised separately by ``test_real_driver.py``.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse

from sparkglass.runtime.contract.description import PipelineDescription

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

    def app(self) -> FastAPI:
        api = FastAPI()

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
            code, body = final_result(vertex, rid)
            if code != 202:
                return JSONResponse(body, status_code=code)
            delay = (
                1e9 if vertex == "stuck" else (2.0 if vertex == "slow" else self.pending_seconds)
            )
            self.rounds[rid] = {"vertex": vertex, "done_at": time.monotonic() + delay, "body": body}
            return JSONResponse({"status": "PENDING", "roundId": rid}, status_code=202)

        @api.get("/api/v1/rounds/{rid}")
        def get_round(rid: str, authorization: str | None = Header(None)) -> JSONResponse:
            auth(authorization)
            r = self.rounds.get(rid)
            if r is None:
                raise HTTPException(404, "no round")
            if time.monotonic() < r["done_at"]:
                return JSONResponse({"status": "PENDING", "roundId": rid})
            # The round ends when it is first seen finished (like the driver's end time).
            r["body"].setdefault("endTimestamp", int(time.time() * 1000))
            return JSONResponse(r["body"])

        return api


class ServerThread:
    """Runs an ASGI app with uvicorn on a free loopback port in a daemon thread."""

    def __init__(self, app: Any) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

"""Result memory is bounded in bytes.

The attack: results within the caps are large (5000 records of 10000 characters, ~50 MB
of JSON), and the service kept decoded results and rendered bodies in caches bounded by
entries, and built each body whole per request: 6 rounds and 40 polls took it from 150 MB
to over 1 GB. Now bodies are written from the store a page at a time, and finished bodies
are cached within ``result_cache_bytes`` (each at most a quarter of it).

Against the real service over HTTP (uvicorn on 127.0.0.1, SQLite store) in front of a
driver (the real control endpoint over scripted executors) whose rounds return large
results on many vertices:

* the cache never holds more than its byte budget, however many large results are read,
  and it evicts rather than grows;
* a body larger than a cache entry may be is never cached (it is streamed from the store)
  and still arrives whole and exact;
* every body is exactly the driver's result (records, order, post-filters).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.sample_result import DataSampleResult, post_filter
from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread
from tests.support.scripted_driver import ScriptedControl, VertexScript

pytestmark = pytest.mark.timeout(300)

TOKEN = "big-driver-token"
ADMIN = "memory-admin-token-0123456789"
#: Vertices whose rounds return ~600 KB bodies (300 records of 2000 characters).
VERTICES = [f"v{i}" for i in range(8)]
#: A vertex whose body (~2.4 MB) is larger than a cache entry may be.
HUGE = "huge"
CACHE_BYTES = 4 * 1024 * 1024  # entries up to 1 MiB


def result_body(vertex: str, round_id: str) -> dict[str, Any]:
    """The driver's full result of ``vertex``: 3 subtasks, distinct records."""
    n, width = (1200, 2000) if vertex == HUGE else (300, 2000)
    samples = []
    for sub in range(3):
        records = [
            {
                "sampleTimestamp": 1_700_000_000_000 + i,
                "data": f"{vertex}-{sub}-{i:05d}-" + "x" * (width - 20) + '"\u00e9\\',
                "dataType": "string",
                "truncated": i % 7 == 0,
            }
            for i in range(n // 3)
        ]
        samples.append({"subtaskIndex": sub, "records": records})
    return {
        "status": "COMPLETE",
        "roundId": round_id,
        "endTimestamp": int(time.time() * 1000),
        "totalRecordCount": n,
        "droppedByRateLimit": 3,
        "samples": samples,
    }


def partitions(vertex: str) -> list[dict[str, Any]]:
    """What the executors captured at ``vertex``: the samples of :func:`result_body`, the
    rate-limit drops counted at the first subtask."""
    samples = result_body(vertex, "")["samples"]
    parts = [{"subtaskIndex": s["subtaskIndex"], "records": s["records"]} for s in samples]
    parts[0]["droppedByRateLimit"] = 3
    return parts


@dataclass
class BigDriver(ScriptedControl):
    """The real control endpoint whose rounds return large results (:func:`result_body`)."""

    def vertex_names(self) -> list[str]:
        return ["source", *VERTICES, HUGE]

    def description(self) -> PipelineDescription:
        return PipelineDescription.model_validate(
            {
                "name": "big",
                "vertices": [{"name": "source", "kind": "source", "bounded": False}]
                + [{"name": v, "inputs": ["source"]} for v in [*VERTICES, HUGE]],
            }
        )

    def advertised(self) -> SamplingSettings:
        # As the service's own settings below: results stay fresh for the whole test.
        return SamplingSettings(
            enabled=True, refresh_interval_ms=600_000, timeout_ms=60_000, min_micro_batches=0
        )

    def script(self, vertex: str) -> VertexScript:
        return VertexScript(partitions=lambda: partitions(vertex), data_type="string", delay_s=0)


def big_driver() -> BigDriver:
    return BigDriver(tokens={TOKEN})


def expected(vertex: str, **filters: int | None) -> dict[str, Any]:
    """What the service must answer for ``vertex`` (volatile fields left out)."""
    full = DataSampleResult.model_validate(result_body(vertex, "x"))
    cut = post_filter(full, filters.get("subtask_index"), filters.get("max_records"))
    return comparable(cut.to_json_dict())


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("roundId", "endTimestamp", "stale")}


def test_result_cache_stays_within_its_byte_budget(tmp_path: Path) -> None:
    with ServerThread(big_driver()) as driver:
        tokens = tmp_path / "tokens.csv"
        tokens.write_text(f"{ADMIN},admin,admin\n")
        app = create_app(
            Settings(
                database_url=f"sqlite:///{tmp_path / 'service.db'}",
                tokens_file=tokens,
                result_cache_bytes=CACHE_BYTES,
                refresh_interval_seconds=600,
                round_timeout_seconds=60,
                round_grace_seconds=0,
                poll_interval_seconds=0.05,
            )
        )
        state = app.state.sparkglass
        register_local_application(state.sessions, "big", driver.url, TOKEN)
        cache = state.coordinator.bodies.cache
        assert cache.max_bytes == CACHE_BYTES
        with (
            ServerThread(app) as service,
            httpx.Client(
                base_url=service.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60
            ) as http,
        ):
            path = "/api/v1/namespaces/local/applications/big/vertices/{v}/data-sample"
            sizes: dict[str, int] = {}

            def until_complete(vertex: str) -> None:
                deadline = time.monotonic() + 120
                while True:
                    r = http.get(path.format(v=vertex))
                    assert r.status_code == 200, r.text
                    if r.json()["status"] == "COMPLETE":
                        assert comparable(r.json()) == expected(vertex)
                        sizes[vertex] = len(r.content)
                        return
                    assert time.monotonic() < deadline, f"{vertex}: no result in 120 s"
                    time.sleep(0.1)

            for vertex in [*VERTICES, HUGE]:
                until_complete(vertex)
                assert cache.bytes <= CACHE_BYTES
            # The results together are well over the budget: the cache must have evicted.
            assert sum(sizes[v] for v in VERTICES) > CACHE_BYTES
            assert all(CACHE_BYTES // 8 < sizes[v] <= CACHE_BYTES // 4 for v in VERTICES)
            assert sizes[HUGE] > CACHE_BYTES // 4

            # Many concurrent polls of all of them: answers stay exact, the budget holds.
            def poll(i: int) -> int:
                vertex = [*VERTICES, HUGE][i % (len(VERTICES) + 1)]
                r = http.get(path.format(v=vertex))
                assert r.status_code == 200
                assert comparable(r.json()) == expected(vertex)
                assert cache.bytes <= CACHE_BYTES
                return len(r.content)

            with ThreadPoolExecutor(6) as pool:
                assert sum(pool.map(poll, range(45))) > 8 * CACHE_BYTES
            assert cache.bytes <= CACHE_BYTES
            assert 0 < len(cache) < len(VERTICES)
            # What is cached: the rounds of the cached bodies (keys carry entity tags).
            held = {json.loads(entry.raw)["roundId"] for entry, _ in list(cache._data.values())}
            assert len(held) == len(cache)

            # The oversized body was never cached, and post-filters read the store exactly.
            with state.sessions() as session:
                from sparkglass.service.store import repository

                app_row = repository.get_application(session, "local", "big")
                assert app_row is not None
                huge_round = repository.latest_finished_round(session, app_row.id, HUGE)
                assert huge_round is not None
            assert huge_round.id not in held
            for filters in (
                {"subtask_index": 1},
                {"max_records": 7},
                {"subtask_index": 2, "max_records": 5},
            ):
                params = {
                    {"subtask_index": "subtaskIndex", "max_records": "maxRecords"}[k]: v
                    for k, v in filters.items()
                }
                r = http.get(path.format(v=HUGE), params=params)
                assert r.status_code == 200
                assert comparable(r.json()) == expected(HUGE, **filters)
            # The round's own URL streams the same body from the store.
            r = http.get(f"/api/v1/namespaces/local/applications/big/rounds/{huge_round.id}")
            assert comparable(r.json()) == expected(HUGE)
            assert json.loads(r.content)["roundId"] == huge_round.id
        assert state.coordinator.wait_idle(10)

"""Attacks (review items A2 and A9): in Kubernetes execution mode the service took a round's
records from the DataSample's ``status`` and the pipeline's vertices from the
SparkApplication's ``status``. A status can be written by anyone granted
``patch datasamples/status`` (or ``sparkapplications/status``), so such a user could plant
records that every reader of the namespace then saw as the application's round, or
vertices that do not exist.

Now the operator hands every result to the service, which saves it in its store, and the
service serves only that row, after checking it is its round's, of its (namespace,
application, vertex), saved for its DataSample, and that this DataSample is still the one it
created (uid); a status only ever tells that a round ended without records. Whatever the
store (PostgreSQL or SQLite: the gap an operator without a store left is closed), a planted
status is never served. Vertices come from ``spec.pipeline`` only, and ``status.progress`` is
display data limited to those vertices.

Against the service over HTTP on 127.0.0.1 (uvicorn) in front of the Kubernetes API
emulator (kmock, giving each object a uid as the API server does); the operator's saves are
played with the store function the service's result route calls
(``repository.save_datasample_result``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from sparkglass.runtime.contract.datasample_status import encode
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread
from tests.service.kube_fixtures import ReviewingEmulator, install

pytestmark = pytest.mark.timeout(300)

API = "/apis/sparkglass.io/v1alpha1/namespaces/team-a"
APP = "/api/v1/namespaces/team-a/applications/flights"
SAMPLE = f"{APP}/vertices/parse/data-sample"
MERGE = {"Content-Type": "application/merge-patch+json"}

SPARKAPP: dict[str, Any] = {
    "apiVersion": "sparkglass.io/v1alpha1",
    "kind": "SparkApplication",
    "metadata": {"name": "flights", "namespace": "team-a"},
    "spec": {
        "type": "Python",
        "mode": "client",
        "image": "registry.example.com/flights:1",
        "mainApplicationFile": "local:///opt/flights_job.py",
        "pipeline": {
            "vertices": [
                {"name": "flights", "kind": "source"},
                {"name": "parse", "inputs": ["flights"]},
                {"name": "off", "inputs": ["parse"]},
                {"name": "gone", "inputs": ["parse"]},
            ]
        },
    },
}

FORGED = {"sampleTimestamp": 1, "data": '{"forged":true}', "dataType": "struct<forged:boolean>"}


class UidEmulator(ReviewingEmulator):
    """kmock, plus what the API server does on every create: a fresh ``metadata.uid``."""

    async def _handle(self, request: kmock.Request) -> Any:
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            request.data.setdefault("metadata", {})["uid"] = str(uuid.uuid4())
        return await super()._handle(request)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def real_result(tag: str, n: int = 3) -> DataSampleResult:
    return DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "totalRecordCount": n,
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [
                        {
                            "sampleTimestamp": i,
                            "data": json.dumps({"source": tag, "n": i}),
                            "dataType": "struct<source:string,n:int>",
                        }
                        for i in range(n)
                    ],
                }
            ],
        }
    )


def live_samples(k: kmock.KubernetesEmulator) -> list[dict[str, Any]]:
    return [
        dict(obj.raw)
        for key, obj in list(k.objects.items())
        if key[0].plural == "datasamples" and not obj.deleted
    ]


async def play_operator(
    k: kmock.KubernetesEmulator,
    database_url: str | None,
    *,
    delay_s: float = 0.3,
    only_replacements: bool = False,
    saved: asyncio.Event | None = None,
) -> None:
    """The operator: for each DataSample (by uid), after ``delay_s``, has a result saved in
    the service's store as the result route does (unless ``database_url`` is None: an
    operator that cannot reach the service), then writes its status. Records say which
    DataSample they are for (``real`` for the service's own, ``replacement`` for one with
    ``spec.columns``). Like the real operator, it leaves alone a DataSample whose status is
    already final.

    With ``saved``: sets it once a result is in the store and stops there, writing no status
    (an operator stopped between its two writes), so that the status the service reads is
    whatever someone else writes next."""
    from sparkglass.service.store import open_store
    from sparkglass.service.store.repository import save_datasample_result_retrying

    sessions = open_store(database_url) if database_url else None

    def save(**fields: Any) -> str:
        assert sessions is not None
        return save_datasample_result_retrying(sessions, **fields)

    handled: set[str] = set()
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        while True:
            for raw in live_samples(k):
                uid = raw["metadata"]["uid"]
                if uid in handled or (only_replacements and not raw["spec"].get("columns")):
                    continue
                handled.add(uid)
                await asyncio.sleep(delay_s)
                now = next((o for o in live_samples(k) if o["metadata"]["uid"] == uid), None)
                if now is None or (now.get("status") or {}).get("phase"):
                    continue  # deleted meanwhile, or final already: nothing to do
                spec, meta = raw["spec"], raw["metadata"]
                if spec["vertex"] == "off":
                    status: dict[str, Any] = {"phase": "Disabled"}
                elif spec["vertex"] == "gone":
                    status = {"phase": "Abandoned", "message": "driver gone"}
                else:
                    result = real_result("replacement" if spec.get("columns") else "real")
                    round_id = uid
                    if sessions is not None:
                        round_id = await asyncio.to_thread(
                            save,
                            namespace="team-a",
                            application=spec["applicationRef"]["name"],
                            vertex=spec["vertex"],
                            result=result,
                            uid=uid,
                            name=meta["name"],
                            started_at_ms=None,
                            request_key="",
                        )
                    if saved is not None:
                        saved.set()
                        continue
                    status = {**encode(result, 64 * 1024), "roundId": round_id}
                r = await kube.patch(
                    f"{API}/datasamples/{meta['name']}/status",
                    content=json.dumps({"status": status}),
                    headers=MERGE,
                )
                if r.status_code == 404:
                    # Deleted after the look above (replace_samples): as the real operator,
                    # nothing to do. On a loaded machine the delay leaves time for that.
                    continue
                assert r.status_code < 300, r.text
            await asyncio.sleep(0.05)


async def forge_statuses(
    k: kmock.KubernetesEmulator,
    records: list[dict[str, Any]],
    *,
    after: asyncio.Event | None = None,
) -> None:
    """Someone with ``patch datasamples/status``: as soon as a DataSample appears (and
    ``after`` is set), marks it Complete with records of their own."""
    done: set[str] = set()
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        while True:
            for raw in live_samples(k):
                uid = raw["metadata"]["uid"]
                if uid in done or (after is not None and not after.is_set()):
                    continue
                done.add(uid)
                forged = {
                    "phase": "Complete",
                    "totalRecordCount": len(records),
                    "samples": [{"subtaskIndex": 0, "records": records}],
                }
                r = await kube.patch(
                    f"{API}/datasamples/{raw['metadata']['name']}/status",
                    content=json.dumps({"status": forged}),
                    headers=MERGE,
                )
                # 404: deleted meanwhile (replace_samples); there is nothing left to forge.
                assert r.status_code < 300 or r.status_code == 404, r.text
            await asyncio.sleep(0.01)


async def replace_samples(k: kmock.KubernetesEmulator, after_s: float = 0.2) -> None:
    """Someone with ``delete`` and ``create datasamples``: ``after_s`` after the service's
    DataSample appears (a watch event away; the API server's answer to the service's create
    already told it its uid), deletes it and creates another under its name (same
    annotations), asking for other columns."""
    done: set[str] = set()
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        while True:
            for raw in live_samples(k):
                if raw["spec"].get("columns") or raw["metadata"]["uid"] in done:
                    continue
                done.add(raw["metadata"]["uid"])
                await asyncio.sleep(after_s)
                name = raw["metadata"]["name"]
                await kube.delete(f"{API}/datasamples/{name}")
                twin = copy.deepcopy(raw)
                twin["metadata"] = {
                    k: v for k, v in twin["metadata"].items() if k not in ("uid", "resourceVersion")
                }
                twin["spec"]["columns"] = ["card_number"]
                twin.pop("status", None)
                r = await kube.post(f"{API}/datasamples", json=twin)
                assert r.status_code < 300, r.text
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(*coroutines: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coroutines]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def create_sparkapp(k: kmock.KubernetesEmulator, body: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        r = await kube.post(f"{API}/sparkapplications", json=body)
        assert r.status_code < 300, r.text


def service_settings(k: kmock.KubernetesEmulator, database_url: str) -> dict[str, Any]:
    return {
        "database_url": database_url,
        "auth_mode": "kubernetes",
        "execution_mode": "kubernetes",
        "kube_api_url": str(k.url),
        "kube_token": "service-account-token",
        "refresh_interval_seconds": 600,
        "round_timeout_seconds": 8,
        "round_grace_seconds": 0,
        "poll_interval_seconds": 0.05,
    }


def poll_to_the_end(url: str, path: str, token: str = "alice-token") -> list[dict[str, Any]]:
    """Every body of ``path`` until one is final (blocking; run it in a thread)."""
    bodies = []
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, timeout=30) as http:
        while True:
            r = http.get(path, headers=bearer(token))
            assert r.status_code == 200, r.text
            bodies.append(r.json())
            if r.json()["status"] != "PENDING":
                return bodies
            assert time.monotonic() < deadline, "no final result within 60 s"
            time.sleep(0.05)


def records_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(r["data"]) for s in body.get("samples", []) for r in s["records"]]


def stored_round(url: str, round_id: str) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30) as http:
        r = http.get(f"{APP}/rounds/{round_id}", headers=bearer("bob-token"))
        assert r.status_code == 200, r.text
        return dict(r.json())


PgFactory = Callable[[str], AbstractContextManager[str]]


# ------------------------------------------------------------------ store mode (PostgreSQL)
@pytest.mark.kmock(cls=UidEmulator)
@pytest.mark.parametrize(
    "operator_saves", [False, True], ids=["operator-stops", "forged-after-the-operator"]
)
async def test_a_planted_status_is_never_served_as_the_round(
    kmock: kmock.KubernetesEmulator, postgres_database: PgFactory, operator_saves: bool
) -> None:
    """A forged Complete status with records of its own: with no operator (it stopped) the
    round fails, as the status claims records nobody stored; after an operator saved the
    round in the store (and before it wrote its status), the stored records are served.
    Never the forged ones. The forger waits for its moment (the DataSample, or the save), so
    the order of events does not depend on the machine's load."""
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    with postgres_database("a2_forged") as db:
        app = create_app(Settings(**service_settings(kmock, db)))
        saved = asyncio.Event() if operator_saves else None
        actors = [forge_statuses(kmock, [FORGED, FORGED], after=saved)]
        if saved is not None:
            actors.append(play_operator(kmock, db, delay_s=0.05, saved=saved))
        async with running(*actors):
            with ServerThread(app) as server:
                bodies = await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE)
                final = bodies[-1]
                stored = await asyncio.to_thread(stored_round, server.url, final["roundId"])
        for body in [*bodies, stored]:
            assert {"forged": True} not in records_of(body), body
        if operator_saves:
            assert final["status"] == "COMPLETE", final
            assert [r["source"] for r in records_of(final)] == ["real"] * 3
        else:  # the status claims records the operator never stored
            assert (final["status"], final["errorCode"]) == ("FAILED", "INTERNAL_ERROR")
            assert final["totalRecordCount"] == 0


@pytest.mark.kmock(cls=UidEmulator)
async def test_a_datasample_replaced_under_its_name_is_not_the_round(
    kmock: kmock.KubernetesEmulator, postgres_database: PgFactory
) -> None:
    # The operator saves the replacement's result in a round of its own (its uid); the
    # service notices the other uid under its DataSample's name and fails its round.
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    with postgres_database("a2_replaced") as db:
        app = create_app(Settings(**service_settings(kmock, db)))
        async with running(replace_samples(kmock), play_operator(kmock, db, delay_s=0.6)):
            with ServerThread(app) as server:
                bodies = await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE)
                final = bodies[-1]
        for body in bodies:
            assert all(r["source"] != "replacement" for r in records_of(body)), body
        assert (final["status"], final["errorCode"]) == ("FAILED", "INTERNAL_ERROR")


@pytest.mark.kmock(cls=UidEmulator)
async def test_the_operator_does_not_save_a_replacement_over_the_failed_round(
    kmock: kmock.KubernetesEmulator, postgres_database: PgFactory
) -> None:
    # Was a known gap: the operator bound a DataSample to the service's round by its name and
    # creation time, so it saved the replacement's result over the round the service had
    # failed. The operator saves in the round bound to the DataSample's uid only.
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    with postgres_database("a2_overwrite") as db:
        app = create_app(Settings(**service_settings(kmock, db)))
        async with running(replace_samples(kmock), play_operator(kmock, db, delay_s=1.0)):
            with ServerThread(app) as server:
                final = (await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE))[-1]
                assert final["status"] == "FAILED"

                def saved_again() -> dict[str, Any]:
                    deadline = time.monotonic() + 10
                    while True:
                        body = stored_round(server.url, final["roundId"])
                        if body["status"] != "FAILED" or time.monotonic() > deadline:
                            return body
                        time.sleep(0.1)

                stored = await asyncio.to_thread(saved_again)
        assert all(r["source"] != "replacement" for r in records_of(stored)), stored


@pytest.mark.kmock(cls=UidEmulator)
async def test_store_mode_serves_what_the_operator_stored(
    kmock: kmock.KubernetesEmulator, postgres_database: PgFactory
) -> None:
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    with postgres_database("a2_store") as db:
        app = create_app(Settings(**service_settings(kmock, db)))
        async with running(play_operator(kmock, db)):
            with ServerThread(app) as server:
                body = (await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE))[-1]
                off = (
                    await asyncio.to_thread(
                        poll_to_the_end, server.url, f"{APP}/vertices/off/data-sample"
                    )
                )[-1]
                gone = (
                    await asyncio.to_thread(
                        poll_to_the_end, server.url, f"{APP}/vertices/gone/data-sample"
                    )
                )[-1]
        assert body["status"] == "COMPLETE"
        assert records_of(body) == [{"source": "real", "n": i} for i in range(3)]
        # Outcomes without records may come from the status alone.
        assert off["status"] == "DISABLED"
        assert (gone["status"], gone["errorCode"]) == ("FAILED", "TASK_TERMINATED")


# ----------------------------------------------- a SQLite store (once: records from status)
@pytest.mark.kmock(cls=UidEmulator)
async def test_a_status_with_records_past_the_caps_is_never_served(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    db = f"sqlite:///{tmp_path / 'store.db'}"
    app = create_app(Settings(**service_settings(kmock, db)))
    huge = {**FORGED, "data": json.dumps({"forged": True, "pad": "x" * 20_000})}
    async with running(forge_statuses(kmock, [huge])):
        with ServerThread(app) as server:
            final = (await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE))[-1]
    assert records_of(final) == []
    assert (final["status"], final["errorCode"]) == ("FAILED", "INTERNAL_ERROR")


@pytest.mark.kmock(cls=UidEmulator)
async def test_a_replacement_is_never_served_with_a_sqlite_store(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    app = create_app(Settings(**service_settings(kmock, f"sqlite:///{tmp_path / 's.db'}")))
    async with running(replace_samples(kmock), play_operator(kmock, None)):
        with ServerThread(app) as server:
            final = (await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE))[-1]
    assert all(r["source"] != "replacement" for r in records_of(final)), final
    assert final["status"] == "FAILED"


@pytest.mark.kmock(cls=UidEmulator)
async def test_a_planted_status_is_never_served_with_a_sqlite_store(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    install(kmock)
    await create_sparkapp(kmock, SPARKAPP)
    app = create_app(Settings(**service_settings(kmock, f"sqlite:///{tmp_path / 's.db'}")))
    async with running(forge_statuses(kmock, [FORGED])):
        with ServerThread(app) as server:
            final = (await asyncio.to_thread(poll_to_the_end, server.url, SAMPLE))[-1]
    # Was a known gap: with a SQLite store the operator could not save, so the service took
    # records from the status, which whoever may patch datasamples/status can write.
    assert {"forged": True} not in records_of(final)
    assert (final["status"], final["errorCode"]) == ("FAILED", "INTERNAL_ERROR")


# ----------------------------------------------------------- A9: SparkApplication status
@pytest.mark.kmock(cls=UidEmulator)
async def test_sparkapplication_status_cannot_add_vertices_or_metrics(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    install(kmock)
    planted = copy.deepcopy(SPARKAPP)
    planted["status"] = {
        # Someone with patch sparkapplications/status: a vertex of their own, and the
        # pipeline rewired.
        "vertices": [
            {"name": "flights", "kind": "source"},
            {"name": "exfil", "kind": "vertex", "inputs": ["flights"]},
        ],
        "progress": {
            "state": "FAILED",
            # The CRD bounds it (1,000 characters): the longest the API server stores.
            "failed": "see http://attacker.example/" + "x" * 960,
            "microBatches": 7,
            "vertices": {
                "parse": {"rowsLastMicroBatch": 5, "rowsPerSecond": 1.0, "rowsTotal": 5},
                "exfil": {"rowsLastMicroBatch": 1, "rowsPerSecond": 1.0, "rowsTotal": 1},
            },
        },
    }
    status = planted.pop("status")
    await create_sparkapp(kmock, planted)
    async with httpx.AsyncClient(base_url=str(kmock.url)) as kube:
        path = f"{API}/sparkapplications/flights/status"
        longer = copy.deepcopy(status)
        longer["progress"]["failed"] += "x" * 10_000
        r = await kube.patch(path, json={"status": longer}, headers=MERGE)
        assert r.status_code == 422 and "status.progress.failed" in r.text, r.text
        r = await kube.patch(path, json={"status": status}, headers=MERGE)
        assert r.status_code < 300, r.text
    app = create_app(Settings(**service_settings(kmock, f"sqlite:///{tmp_path / 's.db'}")))

    def read() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
            detail = http.get(APP, headers=bearer("bob-token"))
            exfil = http.get(f"{APP}/vertices/exfil/data-sample", headers=bearer("alice-token"))
            progress = http.get(f"{APP}/progress", headers=bearer("bob-token"))
            return detail, exfil, progress

    detail, exfil, progress = await asyncio.to_thread(read)
    assert detail.status_code == 200, detail.text
    names = [v["name"] for v in detail.json()["vertices"]]
    assert names == ["flights", "parse", "off", "gone"]
    assert exfil.status_code == 404 and "exfil" not in exfil.json()["detail"].split("vertices:")[1]
    assert not any(o["spec"]["vertex"] == "exfil" for o in live_samples(kmock))
    assert progress.status_code == 200, progress.text
    shown = progress.json()
    assert set(shown["vertices"]) == {"parse"}
    assert len(shown["failed"]) <= 1024

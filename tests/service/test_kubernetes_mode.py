"""Kubernetes mode against a Kubernetes API on loopback (kmock): TokenReview +
SubjectAccessReview allow/deny with caching, and rounds run as DataSample resources."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from fastapi.testclient import TestClient
from kubernetes.client.exceptions import ApiException

from sparkglass.runtime.contract.round_request import RoundRequest as Narrowing
from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.execution import RoundRefused, RoundRequest
from sparkglass.service.execution.kubernetes import DataSampleExecutor, _refusal
from sparkglass.service.kube import make_api_client
from sparkglass.service.settings import Settings
from sparkglass.service.store.repository import get_application, list_rounds
from tests.support.crd_schema import yaml_documents

from .fake_driver import TOKEN, FakeDriver
from .kube_fixtures import (
    WEBHOOK,
    ReviewingEmulator,
    admit_datasamples_by_the_webhook,
    install,
    run_driver,
)

pytestmark = pytest.mark.kmock(cls=ReviewingEmulator)

LOCAL = "/api/v1/namespaces/local/applications/flights/vertices/{v}/data-sample"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def reviews(k: kmock.KubernetesEmulator, kind: str) -> list[Any]:
    assert isinstance(k, ReviewingEmulator)
    return [r for r in k.reviews if str(r.url.path).endswith(kind)]


@pytest.fixture
def k8s_settings(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> dict[str, Any]:
    install(kmock)
    return {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "kube_api_url": str(kmock.url),
        "kube_token": "service-account-token",
        "refresh_interval_seconds": 60,
        "round_timeout_seconds": 30,  # generous: no test here times a round out
        "round_grace_seconds": 0,
        "poll_interval_seconds": 0.05,
        "authn_cache_seconds": 30,
        "authz_allow_cache_seconds": 30,
        "authz_deny_cache_seconds": 30,
    }


async def call(client: TestClient, method: str, url: str, **kw: Any) -> httpx.Response:
    # The emulator runs on this test's event loop: call the service from another thread.
    return await asyncio.to_thread(client.request, method, url, **kw)


async def test_rbac_allow_and_deny_with_cached_decisions(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any], fake_driver: FakeDriver
) -> None:
    app = create_app(Settings(**k8s_settings))
    register_local_application(app.state.sparkglass.sessions, "flights", fake_driver.url, TOKEN)
    with TestClient(app) as client:
        # 401: no token, unknown token.
        r = await call(client, "GET", LOCAL.format(v="parse"))
        assert r.status_code == 401
        r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("nobody"))
        assert (r.status_code, r.json()) == (401, {"detail": "missing or invalid bearer token"})
        # 403: authenticated, no RBAC grant; nothing leaks (not even whether the app exists).
        for url in (
            LOCAL.format(v="parse"),
            LOCAL.format(v="nope"),
            "/api/v1/namespaces/local/applications/none",
        ):
            r = await call(client, "GET", url, headers=bearer("eve-token"))
            assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
        # bob may `get` but not `create`: he cannot start the first round.
        r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("bob-token"))
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
        # alice (group team-a) may create: her poll starts the round.
        r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("alice-token"))
        assert r.status_code == 200 and r.json()["status"] == "PENDING"
        deadline = time.monotonic() + 60
        while True:
            r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("bob-token"))
            assert r.status_code == 200
            if r.json()["status"] == "COMPLETE":
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        # Decisions are cached: repeated polls send no new reviews.
        n_tr, n_sar = (
            len(reviews(kmock, "tokenreviews")),
            len(reviews(kmock, "subjectaccessreviews")),
        )
        for _ in range(5):
            r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("bob-token"))
            assert r.status_code == 200
        assert len(reviews(kmock, "tokenreviews")) == n_tr
        assert len(reviews(kmock, "subjectaccessreviews")) == n_sar
        # The reviews asked the right questions, and the token never reached a log or answer.
        sar = reviews(kmock, "subjectaccessreviews")[0].data["spec"]["resourceAttributes"]
        assert sar["group"] == "sparkglass.io" and sar["resource"] == "datasamples"
        verbs = {
            r.data["spec"]["resourceAttributes"]["verb"]
            for r in reviews(kmock, "subjectaccessreviews")
        }
        assert verbs == {"get", "create"}
        alice = next(
            r for r in reviews(kmock, "subjectaccessreviews") if r.data["spec"]["user"] == "alice"
        )
        assert alice.data["spec"]["groups"] == ["team-a"]


async def test_api_server_down_is_503_not_401(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any]
) -> None:
    k8s_settings["kube_api_url"] = "http://127.0.0.1:9"
    with TestClient(create_app(Settings(**k8s_settings))) as client:
        r = await call(client, "GET", LOCAL.format(v="parse"), headers=bearer("alice-token"))
        assert r.status_code == 503
        assert "TokenReview failed" in r.json()["detail"]
        assert "alice-token" not in r.text


SPARKAPP = {
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
                {"name": "airlines", "kind": "source"},
                {
                    "name": "carriers",
                    "inputs": ["airlines"],
                    "attributes": {"noOutputUntilEndOfInput": True},
                },
                {"name": "joined", "inputs": ["parse", "carriers"]},
                {"name": "off", "inputs": ["parse"]},
                {"name": "gone", "inputs": ["parse"]},
            ]
        },
    },
}
TEAM_A = "/api/v1/namespaces/team-a/applications/flights"


def _validate_against_crd(obj: dict[str, Any]) -> None:
    import jsonschema

    crd_path = Path(__file__).parents[2] / "crds" / "datasample.yaml"
    if not crd_path.exists():
        return
    crd = yaml_documents(crd_path)[0]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.validate(obj, schema)


async def fake_operator(k: kmock.KubernetesEmulator, sessions: Any, seen: list) -> None:
    """Plays the operator: finishes each new DataSample the way the real one would, its
    status written over HTTP (the API server then tells every watcher)."""
    from sparkglass.runtime.contract.sample_result import DataSampleResult
    from sparkglass.service.store import save_round

    async def patch_status(raw: dict[str, Any], status: dict[str, Any]) -> None:
        meta = raw["metadata"]
        async with httpx.AsyncClient(base_url=str(k.url)) as kube:
            r = await kube.patch(
                f"/apis/sparkglass.io/v1alpha1/namespaces/{meta['namespace']}/datasamples/"
                f"{meta['name']}/status",
                json={"status": status},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            assert r.status_code < 300, r.text

    while True:
        for key, obj in list(k.objects.items()):
            if key[0].plural != "datasamples" or (obj.get("status") or {}).get("phase"):
                continue
            raw = dict(obj.raw)
            seen.append(raw)
            # The real operator saves a result a sampling window (1 s at least) after the
            # DataSample appeared, long after the service bound its round to the uid.
            await asyncio.sleep(1.0)
            vertex = raw["spec"]["vertex"]
            uid = raw["metadata"]["uid"]
            if vertex == "off":
                await patch_status(raw, {"phase": "Disabled"})
            elif vertex == "gone":
                await patch_status(raw, {"phase": "Abandoned", "message": "driver gone"})
            else:
                full = DataSampleResult.model_validate(
                    {
                        "status": "COMPLETE",
                        "totalRecordCount": 3,
                        "samples": [
                            {
                                "subtaskIndex": 0,
                                "records": [
                                    {
                                        "sampleTimestamp": i,
                                        "data": f'{{"n":{i}}}',
                                        "dataType": "struct<n:int>",
                                    }
                                    for i in range(3)
                                ],
                            }
                        ],
                    }
                )
                rid = await asyncio.to_thread(_save, sessions, save_round, raw, full, uid)
                await patch_status(
                    raw,
                    {
                        "phase": "Complete",
                        "roundId": rid,
                        "totalRecordCount": 3,
                        "recordsInStatus": 1,
                        "samplesTruncated": True,
                        "samples": [
                            {
                                "subtaskIndex": 0,
                                "records": [full.samples[0].records[0].to_json_dict()],
                            }
                        ],
                    },
                )
        await asyncio.sleep(0.05)


def _save(sessions: Any, save_round: Any, raw: dict, full: Any, uid: str) -> str:
    """As the service saves what the operator hands it: in the round bound to the uid."""
    from sparkglass.service.store.repository import save_datasample_result_retrying

    return save_datasample_result_retrying(
        sessions,
        namespace=raw["metadata"]["namespace"],
        application=raw["spec"]["applicationRef"]["name"],
        vertex=raw["spec"]["vertex"],
        result=full,
        uid=uid,
        name=raw["metadata"]["name"],
        started_at_ms=None,
        request_key="",
    )


async def poll_done(client: TestClient, url: str, token: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        r = await call(client, "GET", url, headers=bearer(token))
        assert r.status_code == 200, r.text
        if r.json()["status"] != "PENDING":
            return r.json()
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_rounds_run_as_datasample_resources(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any]
) -> None:
    async with httpx.AsyncClient(base_url=str(kmock.url)) as kube:
        r = await kube.post(
            "/apis/sparkglass.io/v1alpha1/namespaces/team-a/sparkapplications", json=SPARKAPP
        )
        assert r.status_code < 300, r.text
    app = create_app(
        Settings(
            **k8s_settings, execution_mode="kubernetes", public_url="http://sparkglass.example"
        )
    )
    seen: list[dict[str, Any]] = []
    operator = asyncio.create_task(fake_operator(kmock, app.state.sparkglass.sessions, seen))
    try:
        with TestClient(app) as client:
            r = await call(
                client, "GET", "/api/v1/namespaces/team-a/applications", headers=bearer("bob-token")
            )
            assert [a["name"] for a in r.json()] == ["flights"]
            r = await call(client, "GET", TEAM_A, headers=bearer("bob-token"))
            edges = {(e["from"], e["to"]): e["kind"] for e in r.json()["edges"]}
            assert edges[("carriers", "joined")] == "blocking"
            r = await call(
                client, "GET", f"{TEAM_A}/vertices/nope/data-sample", headers=bearer("alice-token")
            )
            assert r.status_code == 404 and "vertices: flights, parse" in r.json()["detail"]

            first = await call(
                client, "GET", f"{TEAM_A}/vertices/parse/data-sample", headers=bearer("alice-token")
            )
            assert first.json()["status"] == "PENDING"
            body = await poll_done(client, f"{TEAM_A}/vertices/parse/data-sample", "bob-token")
            # The full result the operator stored, not the byte-bounded status.
            assert body["status"] == "COMPLETE" and body["totalRecordCount"] == 3
            assert len(body["samples"][0]["records"]) == 3
            assert body["roundId"] == first.json()["roundId"]

            off = await poll_done(client, f"{TEAM_A}/vertices/off/data-sample", "alice-token")
            assert off["status"] == "DISABLED"
            gone = await poll_done(client, f"{TEAM_A}/vertices/gone/data-sample", "alice-token")
            assert (gone["status"], gone["errorCode"]) == ("FAILED", "TASK_TERMINATED")
            # A viewer (bob) cannot create DataSamples: no new resource for his first poll.
            n = len(seen)
            r = await call(
                client, "GET", f"{TEAM_A}/vertices/joined/data-sample", headers=bearer("bob-token")
            )
            assert r.status_code == 403
            await asyncio.sleep(0.2)
            assert len(seen) == n
    finally:
        operator.cancel()
    # The service learned of each round's end from its watch (one per round), never by
    # reading the DataSample again and again.
    samples = "/apis/sparkglass.io/v1alpha1/namespaces/team-a/datasamples"
    assert kmock.served["GET", samples] >= 3
    reads = {
        d["metadata"]["name"]: kmock.served["GET", f"{samples}/{d['metadata']['name']}"]
        for d in seen
    }
    assert set(reads.values()) == {0}, reads
    ds = seen[0]
    assert ds["kind"] == "DataSample" and ds["metadata"]["namespace"] == "team-a"
    # The API server filled in the schema's defaults.
    assert ds["spec"]["applicationRef"] == {
        "name": "flights",
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "SparkApplication",
    }
    assert ds["spec"]["vertex"] == "parse" and ds["spec"]["maxRecords"] == 5000
    assert ds["metadata"]["annotations"]["sparkglass.io/requested-by"] == "alice"
    _validate_against_crd(ds)


async def test_live_metrics_come_from_the_status_the_operator_publishes(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any]
) -> None:
    """Kubernetes mode: the service holds no driver token; GET .../progress answers what the
    operator copied into the SparkApplication's status.progress (read permission, as for
    every application route), 502 saying why while there is none."""
    import copy

    published = {
        "state": "ACTIVE",
        "activeQueries": 1,
        "microBatches": 42,
        "inputRowsPerSecond": 120.5,
        "processedRowsPerSecond": 118.0,
        "lastMicroBatchTimestamp": 1_790_000_000_000,
        "observedAt": 1_790_000_000_500,
        "publishedAt": "2026-09-21T00:00:00Z",
        "vertices": {
            "parse": {
                "rowsLastMicroBatch": 60,
                "rowsPerSecond": 120.5,
                "rowsTotal": 9,
                "expectations": {
                    "delay-known": {
                        "action": "warn",
                        "passedLastMicroBatch": 58,
                        "failedLastMicroBatch": 2,
                        "passedTotal": 900,
                        "failedTotal": 31,
                    }
                },
            }
        },
    }
    with_progress = copy.deepcopy(SPARKAPP)
    with_progress["status"] = {**with_progress.get("status", {}), "progress": published}
    quiet = copy.deepcopy(SPARKAPP)
    quiet["metadata"]["name"] = "quiet"
    async with httpx.AsyncClient(base_url=str(kmock.url)) as kube:
        apps = "/apis/sparkglass.io/v1alpha1/namespaces/team-a/sparkapplications"
        for body in (with_progress, quiet):
            r = await kube.post(apps, json=body)
            assert r.status_code < 300, r.text
        # A create drops the status (the resource has /status): the operator patches it in.
        r = await kube.patch(
            f"{apps}/flights/status",
            json={"status": with_progress["status"]},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status_code < 300, r.text
    app = create_app(Settings(**k8s_settings, execution_mode="kubernetes"))
    with TestClient(app) as client:
        r = await call(client, "GET", f"{TEAM_A}/progress", headers=bearer("bob-token"))
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["state"], body["microBatches"]) == ("ACTIVE", 42)
        assert body["vertices"]["parse"]["rowsLastMicroBatch"] == 60
        quiet_url = TEAM_A.replace("/flights", "/quiet") + "/progress"
        r = await call(client, "GET", quiet_url, headers=bearer("bob-token"))
        assert r.status_code == 502 and "status.progress" in r.json()["detail"]
        r = await call(client, "GET", f"{TEAM_A}/progress", headers=bearer("eve-token"))
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
        # The expectations' counts: the same published reading, listed as the driver lists
        # them (local mode asks the driver; Kubernetes mode has only what the operator wrote).
        r = await call(client, "GET", f"{TEAM_A}/expectations", headers=bearer("bob-token"))
        assert r.status_code == 200, r.text
        assert r.json() == [
            {
                "vertex": "parse",
                "name": "delay-known",
                "action": "warn",
                "passed": 900,
                "failed": 31,
                "passedLastBatch": 58,
                "failedLastBatch": 2,
            }
        ]
        quiet_expectations = TEAM_A.replace("/flights", "/quiet") + "/expectations"
        r = await call(client, "GET", quiet_expectations, headers=bearer("bob-token"))
        assert r.status_code == 502 and "status.progress" in r.json()["detail"]
        r = await call(client, "GET", f"{TEAM_A}/expectations", headers=bearer("eve-token"))
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})


SAMPLES = "/apis/sparkglass.io/v1alpha1/namespaces/team-a/datasamples"


async def flights_with_the_webhook(k: kmock.KubernetesEmulator, driver: FakeDriver) -> Any:
    """SPARKAPP in team-a, sampling, with its driver (``driver``) running, and DataSamples
    admitted by the operator's webhook, which asks that driver; returns the webhook's API
    client."""
    assert isinstance(k, ReviewingEmulator)
    sampling = {**SPARKAPP, "spec": {**SPARKAPP["spec"], "sampling": {"enabled": True}}}
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        r = await kube.post(
            "/apis/sparkglass.io/v1alpha1/namespaces/team-a/sparkapplications", json=sampling
        )
        assert r.status_code < 300, r.text
    await run_driver(k, "team-a", "flights", driver.url, TOKEN)
    return admit_datasamples_by_the_webhook(k, "team-a")


async def test_a_filtered_round_runs_as_a_datasample_with_its_fields(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any], fake_driver: FakeDriver
) -> None:
    webhook = await flights_with_the_webhook(kmock, fake_driver)
    checked = len(fake_driver.checked)
    app = create_app(Settings(**k8s_settings, execution_mode="kubernetes"))
    seen: list[dict[str, Any]] = []
    operator = asyncio.create_task(fake_operator(kmock, app.state.sparkglass.sessions, seen))
    url = f"{TEAM_A}/vertices/parse/data-sample?filter=n%20%3E%200&columns=n"
    try:
        with TestClient(app) as client:
            body = await poll_done(client, url, "alice-token")
            assert body["status"] == "COMPLETE" and body["totalRecordCount"] == 3
            # Shared and stored as a plain round: a viewer reads the same round.
            again = await call(client, "GET", url, headers=bearer("bob-token"))
            assert again.json()["roundId"] == body["roundId"]
            # The plain poll is its own request, with its own DataSample.
            plain = await poll_done(client, f"{TEAM_A}/vertices/parse/data-sample", "alice-token")
            assert plain["roundId"] != body["roundId"]
            # A poll sees the result once it is stored, before the operator writes the
            # status that ends the service's watch: let the rounds end before it stops.
            assert await asyncio.to_thread(app.state.sparkglass.coordinator.wait_idle, 15)
    finally:
        operator.cancel()
        webhook.close()
    # The webhook asked the driver about the narrowed DataSample twice, and admitted it
    # both times: its dry run, then its create (a plain round needs no driver).
    asked = fake_driver.checked[checked:]
    assert [(c["filter"], c["columns"]) for c in asked] == [("n > 0", "n")] * 2, asked
    narrowed = [d for d in seen if d["spec"].get("filter")]
    assert len(narrowed) == 1 and len(seen) == 2, seen
    spec = narrowed[0]["spec"]
    assert (spec["kind"], spec["filter"], spec["columns"]) == ("output", "n > 0", ["n"])
    assert "filter" not in next(d for d in seen if d is not narrowed[0])["spec"]
    _validate_against_crd(narrowed[0])


async def test_a_filter_the_webhook_refuses_answers_422_naming_it_and_creates_nothing(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any], fake_driver: FakeDriver
) -> None:
    """Before a narrowed round starts, its DataSample is created with dryRun=All: the
    operator's webhook asks the driver, and its denial is the client's 422 naming the
    parameter, as in local mode; no DataSample and no round exist afterwards."""
    assert isinstance(kmock, ReviewingEmulator)
    webhook = await flights_with_the_webhook(kmock, fake_driver)
    checked = len(fake_driver.checked)
    app = create_app(Settings(**k8s_settings, execution_mode="kubernetes"))
    url = f"{TEAM_A}/vertices/parse/data-sample?filter=no_such_column%20%3E%201"
    try:
        with TestClient(app) as client:
            r = await call(client, "GET", url, headers=bearer("alice-token"))
            assert r.status_code == 422, r.text
            assert r.json() == {
                "detail": "filter: no column no_such_column",
                "errors": [
                    {
                        "loc": ["query", "filter"],
                        "msg": "no column no_such_column",
                        "type": "value_error",
                    }
                ],
            }
            assert await asyncio.to_thread(app.state.sparkglass.coordinator.wait_idle, 15)
    finally:
        webhook.close()
    assert [c["filter"] for c in fake_driver.checked[checked:]] == ["no_such_column > 1"]
    # The refusal was the webhook's, of a dry run; nothing was created or started.
    refused = [(code, message) for _, path, code, message in kmock.refused if path == SAMPLES]
    assert refused == [
        (
            403,
            f'admission webhook "{WEBHOOK}" denied the request: spec.filter: no column '
            "no_such_column",
        )
    ]
    assert kmock.names("sparkglass.io/v1alpha1/datasamples", "team-a") == set()
    with app.state.sparkglass.sessions() as s:
        flights = get_application(s, "team-a", "flights")
        assert flights is None or list_rounds(s, flights.id, "parse") == []


@pytest.mark.parametrize("trouble", ["503", "429"])
async def test_a_dry_run_that_fails_lets_the_round_start(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any], trouble: str
) -> None:
    """A dry run the API server cannot answer (5xx, or throttled) is no verdict on the
    request: the round starts and runs as a DataSample, never a 502 from the check."""
    assert isinstance(kmock, ReviewingEmulator)
    async with httpx.AsyncClient(base_url=str(kmock.url)) as kube:
        r = await kube.post(
            "/apis/sparkglass.io/v1alpha1/namespaces/team-a/sparkapplications", json=SPARKAPP
        )
        assert r.status_code < 300, r.text
    # The next POST of a DataSample, the dry run, is the one that fails.
    if trouble == "503":
        kmock.fail("POST", SAMPLES, times=1, code=503)
    else:
        kmock.throttle("POST", SAMPLES, times=1, retry_after=1)
    app = create_app(Settings(**k8s_settings, execution_mode="kubernetes"))
    seen: list[dict[str, Any]] = []
    operator = asyncio.create_task(fake_operator(kmock, app.state.sparkglass.sessions, seen))
    url = f"{TEAM_A}/vertices/parse/data-sample?filter=n%20%3E%200"
    try:
        with TestClient(app) as client:
            first = await call(client, "GET", url, headers=bearer("alice-token"))
            assert first.status_code == 200, first.text
            assert first.json()["status"] == "PENDING"
            body = await poll_done(client, url, "alice-token")
            assert body["status"] == "COMPLETE" and body["roundId"] == first.json()["roundId"]
            assert await asyncio.to_thread(app.state.sparkglass.coordinator.wait_idle, 15)
    finally:
        operator.cancel()
    rule = kmock.failing if trouble == "503" else kmock.throttled
    assert rule["POST", SAMPLES][0] == 0  # the dry run met it
    # The dry run, then the create (a loaded machine has shown a third POST, not yet
    # explained): one DataSample was created, and it ran the round.
    assert kmock.served["POST", SAMPLES] >= 2
    assert [d["spec"]["filter"] for d in seen] == ["n > 0"]
    assert len(kmock.names("sparkglass.io/v1alpha1/datasamples", "team-a")) == 1


async def test_a_field_the_crd_refuses_is_named_by_the_dry_run(
    kmock: kmock.KubernetesEmulator, k8s_settings: dict[str, Any]
) -> None:
    """The CRD's own validation (422 Invalid) refuses too, naming the parameter from
    ``details.causes[].field``. The service's own checks mirror the CRD's, so the executor
    is handed a request they would have refused (a column name with a comma)."""
    assert isinstance(kmock, ReviewingEmulator)
    api = make_api_client(Settings(**k8s_settings))
    executor = DataSampleExecutor(api, _NoRounds())
    request = RoundRequest(
        round_id="0123456789abcdef",
        namespace="team-a",
        application="flights",
        vertex="parse",
        sampling_window=None,
        timeout_s=30,
        poll_interval_s=0.05,
        requested_by="alice",
        narrowing=Narrowing(columns=("a,b",)),
    )
    try:
        with pytest.raises(RoundRefused) as refused:
            await asyncio.to_thread(executor.check, request)
    finally:
        api.close()
    assert refused.value.field == "columns"
    assert str(refused.value).startswith('Invalid value: "a,b": '), refused.value
    assert kmock.names("sparkglass.io/v1alpha1/datasamples", "team-a") == set()


class _NoRounds:
    """The store, for an executor that only checks (no round is ever bound or read)."""

    def lookup(self, round_id: str) -> None:
        raise AssertionError("a check reads no round")

    def bind(self, round_id: str, uid: str) -> bool:
        raise AssertionError("a check binds no round")


def _api_error(status: int, body: dict[str, Any]) -> ApiException:
    exc = ApiException(status=status, reason="")
    exc.body = json.dumps(body)
    return exc


@pytest.mark.parametrize(
    ("status", "body", "refusal"),
    [
        (  # the webhook's denial of a parameter
            403,
            {
                "reason": "Forbidden",
                "message": f'admission webhook "{WEBHOOK}" denied the request: spec.columns: '
                "unknown column 'carier' at vertex 'parse'",
            },
            ("columns", "unknown column 'carier' at vertex 'parse'"),
        ),
        (  # ... of a field the client did not set: not the client's to fix
            403,
            {
                "reason": "Forbidden",
                "message": f'admission webhook "{WEBHOOK}" denied the request: '
                "spec.samplingWindow: 20s exceeds the application's 3s",
            },
            None,
        ),
        (  # RBAC: the service may not create DataSamples; the round says so
            403,
            {
                "reason": "Forbidden",
                "message": 'datasamples.sparkglass.io is forbidden: User "system:serviceaccount:'
                'sg:sparkglass" cannot create resource "datasamples"',
            },
            None,
        ),
        (  # the CRD's validation
            422,
            {
                "reason": "Invalid",
                "message": 'DataSample.sparkglass.io "x" is invalid: spec.kind: Unsupported value',
                "details": {
                    "causes": [
                        {"field": "metadata.name", "message": "Too long"},
                        {"field": "spec.kind", "message": 'Unsupported value: "all"'},
                    ]
                },
            },
            ("kind", 'Unsupported value: "all"'),
        ),
        (422, {"reason": "Invalid", "details": {"causes": [{"field": "spec"}]}}, None),
        (429, {"reason": "TooManyRequests", "message": "Too many requests"}, None),
        (500, {"reason": "InternalError", "message": "etcdserver: leader changed"}, None),
    ],
)
def test_only_a_refusal_of_a_parameter_refuses_the_request(
    status: int, body: dict[str, Any], refusal: tuple[str, str] | None
) -> None:
    found = _refusal(_api_error(status, {"kind": "Status", "code": status, **body}))
    assert (None if found is None else (found.field, str(found))) == refusal

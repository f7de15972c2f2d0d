"""Attacks on the operator's trust boundary, against the real parts.

1. Whoever may patch ``sparkapplications/status`` points ``status.driverInfo.controlEndpoint``
   at a listener of theirs and ``controlSecretName`` at another Secret with a ``token`` key:
   the operator (a real process against the kmock API server) must send neither a request nor
   a token there; it finds the driver only from the Pod and Secret it created.
2. Whoever may create DataSamples names one as the service names its rounds' DataSamples, or
   annotates it with another round's id (round ids are not secret; an earlier release took
   the ``sparkglass.io/round-id`` annotation as a claim): the operator saves each result in
   the round bound to the DataSample's uid, or one of its own, never over another round in
   the store (real SQLite and PostgreSQL), and ``save_round`` itself refuses a round id
   owned by another application. Reading a round through another application's REST path
   (the service over HTTP on 127.0.0.1) is refused too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.execution.kubernetes import datasample_name
from sparkglass.service.settings import Settings
from sparkglass.service.store import (
    bind_datasample,
    create_round,
    get_round,
    load_result,
    open_store,
    save_round,
    upsert_application,
)
from sparkglass.service.store.repository import RoundOwnershipError
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.service.fake_driver import PIPELINE, ServerThread
from tests.support import datasamples
from tests.support.datasamples import (
    APPS,
    SAMPLES,
    ScriptedDriver,
    patch_status,
    post,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.http_listener import Listener
from tests.support.http_listener import listener as listener  # the fixture, by name
from tests.support.result_service import ResultService
from tests.support.store_fixtures import BACKENDS

pytestmark = pytest.mark.timeout(180)

# The operator tests' fixtures (API server emulator, kubectl, the operator process, the
# scripted driver), bound here by name so that pytest finds them in this module.
operator = operator_tests.operator
driver = datasamples.driver

SERVICE_URL = "http://sparkglass.example:8000"
STOLEN = "db-password-not-for-the-driver"


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """The service's store the operator saves into: a SQLite file or a PostgreSQL database."""
    return str(request.param)


result_service = datasamples.result_service


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    return ["--service-url", SERVICE_URL, *result_service.operator_args()]


async def create_secret(kube: StrictApiServer, name: str, token: str) -> None:
    resp = await kube.post(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        json={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"token": base64.b64encode(token.encode()).decode()},
        },
    )
    assert resp.status in (200, 201), await resp.text()


def driver_info(kube: StrictApiServer, app: str) -> dict[str, Any]:
    obj = kube.stored(APPS, NAMESPACE, app) or {}
    return dict((obj.get("status") or {}).get("driverInfo") or {})


@contextlib.asynccontextmanager
async def spoofing_status(
    kube: StrictApiServer, app: str, listener: Listener, secret: str
) -> AsyncIterator[None]:
    """Keep re-writing the application's status the way the attacker would (the operator's
    resync writes its own facts back, so one patch alone could be undone before it is read)."""
    stop = asyncio.Event()

    async def spoof() -> None:
        while not stop.is_set():
            await patch_status(
                kube,
                f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/{app}/status",
                {
                    "applicationState": {"state": "RUNNING"},
                    "driverInfo": {"controlEndpoint": listener.url, "controlSecretName": secret},
                },
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    task = asyncio.create_task(spoof())
    try:
        yield
    finally:
        stop.set()
        await task


# --------------------------------------------------------------------------- item 1
#: Item 1 does not depend on the store's backend: one is enough.
one_store = pytest.mark.parametrize("store_backend", ["sqlite"])


@one_store
async def test_a_patched_status_never_sends_a_token_to_the_attackers_listener(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    listener: Listener,
) -> None:
    await running_app(kube, operator, driver)
    await create_secret(kube, "db-credentials", STOLEN)
    async with spoofing_status(kube, "flights", listener, "db-credentials"):
        await post(kube, "datasamples", sample_body("spoofed", "parse", backoffLimit=0))
        final = await wait_final(kube, "spoofed", operator)
    # The attacker's listener heard nothing; the real driver got the round with its own token.
    assert not listener.saw_secret(STOLEN), listener.requests
    assert listener.requests == [], listener.requests
    assert final == "Complete", status(kube, "spoofed")
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0
    # Status is output: the next passes write the operator's own facts back over the spoof.
    own = f"https://127.0.0.1:{driver.port}"
    await eventually(
        lambda: (
            driver_info(kube, "flights").get("controlEndpoint") == own
            and driver_info(kube, "flights").get("controlSecretName") == "flights-control-token"
        ),
        what="driverInfo restored from the Pod",
        operator=operator,
    )


@one_store
async def test_a_secret_not_created_for_the_application_is_never_sent(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
) -> None:
    """Even at the deterministic name, a Secret the operator did not create for this
    application (no owner reference to its uid) is not used."""
    await running_app(kube, operator, driver)
    (own_token,) = driver.tokens
    secret = f"/api/v1/namespaces/{NAMESPACE}/secrets/flights-control-token"
    resp = await kube.patch(
        secret,
        json={"metadata": {"ownerReferences": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert resp.status == 200, await resp.text()
    await post(kube, "datasamples", sample_body("foreign", "parse", backoffLimit=0))
    assert await wait_final(kube, "foreign", operator) == "Failed"
    assert status(kube, "foreign")["conditions"][0]["reason"] == "ControlTokenMissing"
    assert driver.calls["open:parse"] == 0
    assert own_token not in operator.output()


@one_store
async def test_control_secret_name_is_withdrawn_when_the_driver_ends(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    assert driver_info(kube, "flights")["controlSecretName"] == "flights-control-token"
    await patch_status(
        kube, f"/api/v1/namespaces/{NAMESPACE}/pods/flights-driver/status", {"phase": "Succeeded"}
    )
    await eventually(
        lambda: (
            (kube.stored(APPS, NAMESPACE, "flights") or {})
            .get("status", {})
            .get("applicationState", {})
            .get("state")
            in ("COMPLETED", "PENDING_RERUN")
        ),
        what="the driver ended",
        operator=operator,
    )
    info = driver_info(kube, "flights")
    assert "controlSecretName" not in info and "controlEndpoint" not in info, info


# --------------------------------------------------------------------------- item 2
def _victim_result(marker: str) -> DataSampleResult:
    return DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "endTimestamp": 1_700_000_000_000,
            "totalRecordCount": 1,
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [
                        {"sampleTimestamp": 1, "data": json.dumps({"who": marker}), "dataType": "x"}
                    ],
                }
            ],
        }
    )


#: uid of the service's own DataSample in the handshake test.
LEGIT_UID = "5e1f0c4e-0000-4000-8000-00000000abcd"


def _records(store_url: str, round_id: str) -> list[str]:
    with open_store(store_url).begin() as session:
        row = get_round(session, round_id)
        assert row is not None
        return [r.data for s in load_result(session, row).samples for r in s.records]


async def test_a_datasample_with_another_applications_round_id_cannot_overwrite_it(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    # The victim: application "flights", a finished round and a round the service has open.
    sessions = open_store(store_url)
    with sessions.begin() as session:
        save_round(
            session,
            namespace=NAMESPACE,
            application="flights",
            vertex="parse",
            result=_victim_result("victim"),
            round_id="victimdone000001",
        )
        app = upsert_application(session, NAMESPACE, "flights")
        create_round(session, "victimopen000001", app.id, "parse", triggered_by="alice")
        create_round(session, "serviceround0001", app.id, "parse", triggered_by="alice")
        # The service records the uid the API server gave its DataSample (bound before the
        # operator can save; the test API server is told which uid it will give).
        bind_datasample(session, "serviceround0001", LEGIT_UID)
    await running_app(kube, operator, driver)
    await running_app(kube, operator, driver, "evil")

    # Another application's DataSample claiming the victim's finished round...
    body = sample_body("evil-parse", "parse", app="evil")
    body["metadata"]["annotations"] = {"sparkglass.io/round-id": "victimdone000001"}
    await post(kube, "datasamples", body)
    # ... one even named as the service names the victim round's DataSample (the name binds
    # a claim only together with the application and vertex the store has for the round) ...
    forged = datasample_name("flights", "parse", "victimopen000001")
    body = sample_body(forged, "parse", app="evil")
    body["metadata"]["annotations"] = {"sparkglass.io/round-id": "victimopen000001"}
    await post(kube, "datasamples", body)
    # ... and, in the victim's own application, a hand-made DataSample claiming its open round.
    body = sample_body("sneaky", "parse")
    body["metadata"]["annotations"] = {"sparkglass.io/round-id": "victimopen000001"}
    await post(kube, "datasamples", body)
    # The service's own DataSample for its round (the handshake that must keep working).
    legit = datasample_name("flights", "parse", "serviceround0001")
    body = sample_body(legit, "parse")
    body["metadata"]["annotations"] = {"sparkglass.io/round-id": "serviceround0001"}
    kube.uids[legit] = LEGIT_UID
    await post(kube, "datasamples", body)

    for name in ("evil-parse", forged, "sneaky", legit):
        assert await wait_final(kube, name, operator) == "Complete", status(kube, name)

    # The victim's rounds are untouched: same records, same owner, still open.
    assert _records(store_url, "victimdone000001") == [json.dumps({"who": "victim"})]
    with sessions.begin() as session:
        open_row = get_round(session, "victimopen000001")
        assert open_row is not None
        assert open_row.status == "PENDING" and open_row.total_record_count == 0
        assert open_row.external_ref is None
    # The attackers' results went to rounds of their own (their uids), linked as such.
    for name in ("evil-parse", forged, "sneaky"):
        uid = (kube.stored(SAMPLES, NAMESPACE, name) or {})["metadata"]["uid"]
        st = status(kube, name)
        assert st["resultsURL"].endswith(f"/rounds/{uid}"), st["resultsURL"]
        assert len(_records(store_url, uid)) == 6
    assert status(kube, "evil-parse")["resultsURL"].startswith(
        f"{SERVICE_URL}/api/v1/namespaces/{NAMESPACE}/applications/evil/"
    )
    # The service's DataSample was saved in the round the service bound to its uid.
    assert status(kube, legit)["resultsURL"].endswith("/rounds/serviceround0001")
    assert len(_records(store_url, "serviceround0001")) == 6


def test_save_round_refuses_a_round_id_owned_by_another_application(store_url: str) -> None:
    sessions = open_store(store_url)
    with sessions.begin() as session:
        save_round(
            session,
            namespace="team-a",
            application="flights",
            vertex="parse",
            result=_victim_result("victim"),
            round_id="r-victim",
        )
    for namespace, application, vertex in (
        ("team-b", "flights", "parse"),  # same name, another namespace
        ("team-a", "evil", "parse"),  # another application
        ("team-a", "flights", "enrich"),  # another vertex
    ):
        with (
            pytest.raises(RoundOwnershipError, match=r"r-victim.*team-a/flights"),
            sessions.begin() as session,
        ):
            save_round(
                session,
                namespace=namespace,
                application=application,
                vertex=vertex,
                result=_victim_result("attacker"),
                round_id="r-victim",
            )
    assert _records(store_url, "r-victim") == [json.dumps({"who": "victim"})]


def test_rest_refuses_a_round_read_through_another_application(
    store_url: str, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("viewer-token-0123456789,viewer,viewer\n")
    key = Fernet.generate_key().decode()  # driver tokens are stored encrypted
    app = create_app(Settings(database_url=store_url, tokens_file=tokens, store_key=key))
    sessions = app.state.sparkglass.sessions
    for name in ("flights", "evil"):
        register_local_application(
            sessions, name, "http://127.0.0.1:9", "unused", description=PIPELINE
        )
    with sessions.begin() as session:
        save_round(
            session,
            namespace="local",
            application="flights",
            vertex="parse",
            result=_victim_result("victim"),
            round_id="r-victim",
        )
    headers = {"Authorization": "Bearer viewer-token-0123456789"}
    base = "/api/v1/namespaces/local/applications"
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        other = http.get(f"{base}/evil/rounds/r-victim", headers=headers)
        assert other.status_code == 404, other.text
        assert "victim" not in other.text.replace("'r-victim'", "")
        own = http.get(f"{base}/flights/rounds/r-victim", headers=headers)
        assert own.status_code == 200, own.text
        assert own.json()["samples"][0]["records"][0]["data"] == json.dumps({"who": "victim"})

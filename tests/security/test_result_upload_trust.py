"""Attacks on the route the operator hands DataSample results to
(``PUT /api/v1/namespaces/{namespace}/datasamples/{name}/result``): whoever reaches the service
must not plant a round's records through it.

Against the service over HTTP on 127.0.0.1 (uvicorn), in Kubernetes auth mode in front of the
API server stand-in, whose TokenReview honours audiences as the API server does: the
operator's projected token is valid for the service's audience only, its API token for the API
server's only.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import kmock
import pytest

from sparkglass.operator.results import ResultPush, ResultRefused, RoundIdConflict
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from sparkglass.service.store import finished_result, open_store
from tests.service.fake_driver import ServerThread
from tests.service.kube_fixtures import ReviewingEmulator
from tests.support.result_service import serve_results_in_kubernetes

pytestmark = pytest.mark.timeout(120)

PATH = "/api/v1/namespaces/team-a/datasamples/ds-1/result"
UID = "4f1c2d3e-0000-4000-8000-000000000001"


def result(data: str = '{"n":1}', records: int = 1) -> DataSampleResult:
    return DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "totalRecordCount": records,
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [{"sampleTimestamp": 1, "data": data, "dataType": "struct<n:int>"}]
                    * records,
                }
            ],
        }
    )


def upload(uid: str, application: str = "flights", **extra: Any) -> dict[str, Any]:
    return {
        "uid": uid,
        "application": application,
        "vertex": "parse",
        "requestKey": "",
        "maxRecordLength": 100,
        "result": result().to_json_dict(),
        **extra,
    }


class Service(NamedTuple):
    url: str
    db: str
    #: The uid the API server gave DataSample team-a/ds-1 (flights, parse).
    uid: str


async def create_datasample(k: kmock.KubernetesEmulator, name: str, **spec: Any) -> str:
    """Create DataSample ``team-a/name`` of flights/parse (plus ``spec``); its uid."""
    body = {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"applicationRef": {"name": "flights"}, "vertex": "parse", **spec},
    }
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        r = await kube.post("/apis/sparkglass.io/v1alpha1/namespaces/team-a/datasamples", json=body)
        assert r.status_code < 300, r.text
        return str(r.json()["metadata"]["uid"])


@pytest.fixture()
async def service(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> AsyncIterator[Service]:
    """The service (Kubernetes modes, the operator its only result writer), its store, and
    the DataSample ds-1 the results are for."""
    db = f"sqlite:///{tmp_path / 'store.db'}"
    with serve_results_in_kubernetes(kmock, db) as url:
        uid = await create_datasample(kmock, "ds-1")
        yield Service(url, db, uid)


async def put(url: str, token: str | None, body: Any) -> httpx.Response:
    """The PUT, from the test's event loop, which serves the API server stand-in meanwhile."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.put(f"{url}{PATH}", json=body, headers=headers)


def stored(db: str, round_id: str) -> DataSampleResult | None:
    with open_store(db).begin() as session:
        return finished_result(session, round_id)


@pytest.mark.kmock(cls=ReviewingEmulator)
@pytest.mark.parametrize(
    ("token", "code"),
    [
        (None, 401),
        ("not-a-token", 401),
        # The operator's identity, but its API server token: not one of the service's
        # audience, so a token sniffed off the cluster network is no way in either.
        ("operator-api-token", 401),
        # Someone who may create DataSamples: her token is the API server's, not the service's.
        ("alice-token", 401),
        # A token of the service's audience, of someone else: still no result writer.
        ("mallory-service-token", 403),
    ],
)
async def test_only_the_operators_service_token_may_save_a_result(
    service: Service, token: str | None, code: int
) -> None:
    url, db, uid = service
    answer = await put(url, token, upload(uid))
    assert answer.status_code == code, answer.text
    assert stored(db, uid) is None


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_the_operators_token_saves_the_result_under_the_uid(service: Service) -> None:
    url, db, uid = service
    answer = await put(url, "operator-token", upload(uid))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"roundId": uid}
    saved = stored(db, uid)
    assert saved is not None and saved.total_record_count == 1


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_no_body_is_read_before_the_caller_is_known(service: Service) -> None:
    """A body that never ends, sent without a token: the answer is a 401 at once, not a
    wait for a body the service must not read."""
    url, db, uid = service
    host, port = url.removeprefix("http://").split(":")

    def send_a_head_and_wait() -> str:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"PUT {PATH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: 1000000\r\n\r\n{{".encode()
            )
            return sock.recv(4096).decode(errors="replace")

    started = time.monotonic()
    head = await asyncio.to_thread(send_a_head_and_wait)
    assert head.startswith("HTTP/1.1 401"), head
    assert time.monotonic() - started < 10
    assert stored(db, uid) is None


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_a_result_over_max_result_bytes_is_refused_unread(service: Service) -> None:
    url = service.url
    too_big = str(64 * 1024 * 1024 + 1)
    # A head claiming more than the limit, and no body: answered before anything is read.
    host, port = url.removeprefix("http://").split(":")

    def send_the_head() -> str:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"PUT {PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                f"operator-token\r\nContent-Length: {too_big}\r\n\r\n".encode()
            )
            return sock.recv(4096).decode(errors="replace")

    answer = await asyncio.to_thread(send_the_head)
    assert answer.startswith("HTTP/1.1 413"), answer


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_a_result_bigger_than_other_bodies_is_accepted(service: Service) -> None:
    """Results are larger than any other request (max_body_bytes, 1 MiB): 2 MiB passes."""
    url, db, uid = service
    body = upload(uid, maxRecordLength=100_000)
    body["result"] = result(json.dumps({"pad": "x" * 70_000}), records=30).to_json_dict()
    assert len(json.dumps(body)) > 2 * 1024 * 1024
    answer = await put(url, "operator-token", body)
    assert answer.status_code == 200, answer.text
    saved = stored(db, uid)
    assert saved is not None and saved.total_record_count == 30


@pytest.mark.kmock(cls=ReviewingEmulator)
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"maxRecordLength": 3}, "max-record-length 3"),  # the records past the application's cap
        ({"uid": ""}, "uid"),
        ({"vertex": "x" * 64}, "vertex"),
        ({"extra": "field"}, "extra"),
    ],
)
async def test_a_malformed_result_is_refused_naming_what_is_wrong(
    service: Service, change: dict[str, Any], field: str
) -> None:
    url, db, uid = service
    answer = await put(url, "operator-token", {**upload(uid), **change})
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["detail"]
    assert stored(db, uid) is None


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_a_round_of_another_application_is_never_overwritten(
    service: Service,
) -> None:
    url, db, uid = service
    assert (await put(url, "operator-token", upload(uid))).status_code == 200
    answer = await put(url, "operator-token", upload(uid, application="payroll"))
    assert answer.status_code == 409, answer.text
    saved = stored(db, uid)
    assert saved is not None and saved.total_record_count == 1


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_the_operators_client_tells_refusals_from_outages(
    service: Service, tmp_path: Path
) -> None:
    url, _, uid = service
    token = tmp_path / "token"

    async def save(application: str) -> str:
        return await ResultPush(url, str(token)).save(
            namespace="team-a",
            name="ds-1",
            uid=uid,
            application=application,
            vertex="parse",
            result=result(),
            started_at_ms=None,
            request_key="",
            max_record_length=100,
        )

    token.write_text("alice-token")
    with pytest.raises(ResultRefused, match="401"):
        await save("flights")
    token.write_text("operator-token")  # read at each call: a rotated token is picked up
    assert await save("flights") == uid
    with pytest.raises(RoundIdConflict, match="not for what DataSample"):
        await save("payroll")


async def test_nobody_may_save_results_unless_named(tmp_path: Path) -> None:
    """The default: no result writer at all, whatever the token."""
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-token,root,admin\n")
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 's.db'}", tokens_file=tokens))
    with ServerThread(app) as server:
        assert (await put(server.url, "admin-token", upload(UID))).status_code == 403


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_a_uid_naming_another_round_never_overwrites_it(service: Service) -> None:
    """Round ids are not secret: a result whose uid is a plain round's id is refused."""
    url, db = service.url, service.db
    from sparkglass.service.store import create_round, upsert_application

    with open_store(db).begin() as session:
        app = upsert_application(session, "team-a", "flights")
        create_round(session, "plainround000001", app.id, "parse", triggered_by="alice")
    answer = await put(url, "operator-token", upload("plainround000001"))
    assert answer.status_code == 409, answer.text
    with open_store(db).begin() as session:
        from sparkglass.service.store import get_round

        row = get_round(session, "plainround000001")
        assert row is not None and (row.status, row.datasample_uid) == ("PENDING", None)


@pytest.mark.kmock(cls=ReviewingEmulator)
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/namespaces/Team_A/datasamples/ds-1/result", "namespace"),
        ("/api/v1/namespaces/team-a/datasamples/DS_1/result", "name"),
    ],
)
async def test_a_namespace_or_name_that_is_no_kubernetes_name_is_refused(
    service: Service, path: str, field: str
) -> None:
    url, _, uid = service
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.put(
            f"{url}{path}", json=upload(uid), headers={"Authorization": "Bearer operator-token"}
        )
    assert answer.status_code == 422 and field in answer.json()["detail"], answer.text


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_a_datasample_asking_for_everything_still_saves(
    kmock: kmock.KubernetesEmulator, service: Service
) -> None:
    """The longest request a DataSample's spec allows (200 columns of 256 characters and a
    4096-character filter) fits the upload: its result is saved, not retried forever."""
    from sparkglass.runtime.contract.round_request import RoundRequest

    url, db, _ = service
    spec = {"filter": "x" * 4096, "columns": [f"c{i:03d}" + "x" * 252 for i in range(200)]}
    key = RoundRequest.model_validate(spec).key()
    assert len(key) > 50_000
    uid = await create_datasample(kmock, "ds-wide", **spec)
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.put(
            f"{url}/api/v1/namespaces/team-a/datasamples/ds-wide/result",
            json=upload(uid, requestKey=key),
            headers={"Authorization": "Bearer operator-token"},
        )
    assert answer.status_code == 200, answer.text
    assert stored(db, uid) is not None


@pytest.mark.kmock(cls=ReviewingEmulator)
@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"application": "payroll"}, "not for what"),
        ({"vertex": "enrich"}, "not for what"),
        ({"requestKey": '{"kind":"errors"}'}, "not for what"),
        ({"uid": "00000000-0000-4000-8000-000000000000"}, "another uid"),
    ],
)
async def test_a_result_is_saved_only_for_what_its_datasample_asks(
    service: Service, change: dict[str, Any], why: str
) -> None:
    """Even the operator's token saves a result only for the DataSample the API server holds
    under that name and uid, at its own application, vertex and request."""
    url, db, uid = service
    answer = await put(url, "operator-token", {**upload(uid), **change})
    assert answer.status_code == 409 and why in answer.json()["detail"], answer.text
    assert stored(db, uid) is None


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_no_result_for_a_datasample_that_is_not_there(service: Service) -> None:
    url, db, uid = service
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.put(
            f"{url}/api/v1/namespaces/team-a/datasamples/ds-gone/result",
            json=upload(uid),
            headers={"Authorization": "Bearer operator-token"},
        )
    assert answer.status_code == 409 and "no DataSample" in answer.json()["detail"]
    assert stored(db, uid) is None


def test_a_local_writer_must_be_an_admin(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("viewer-token,sparkglass-operator,viewer\n")
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 's.db'}",
            tokens_file=tokens,
            result_writers="sparkglass-operator",
        )
    )
    with ServerThread(app) as server:
        answer = httpx.put(
            f"{server.url}{PATH}",
            json=upload(UID),
            headers={"Authorization": "Bearer viewer-token"},
            timeout=30,
        )
    assert answer.status_code == 403

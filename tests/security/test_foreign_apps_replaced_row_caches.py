"""Attack: reading another operator's application's samples through the row that replaced it.

The catalog mirrors a namespace's applications into the store; a sparkglass SparkApplication
created under the name of a Kubeflow (or Apache Spark) operator's application replaces that
row (sparkglass's own wins a name both hold), and an application deleted in Kubernetes is
deleted from the store. What the service held in memory of the old row stayed: answers keyed
by (application id, vertex, request), result bodies keyed by ``namespace/name``. SQLite gave
the new row the deleted row's id, so bob, who may read and sample in the namespace but not
``get`` the other operator's applications, polled the new sparkglass application's vertex
and was served the other application's records.

On the stand-in API server, with the store on SQLite and on PostgreSQL; and the store on its
own: an application id is never handed out twice, also in a store made before ids were.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from sparkglass.crds.datasample import SPARKGLASS_API_VERSION
from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from sparkglass.service.store import open_store, repository
from sparkglass.service.store.db import make_engine, migrate
from tests.support import foreign_listing as fl
from tests.support.foreign_apps import ForeignOperator
from tests.support.foreign_apps import foreign as foreign  # the fixture, by name
from tests.support.kube_apiserver import StrictApiServer
from tests.support.store_fixtures import BACKENDS

pytestmark = [pytest.mark.timeout(180)]

#: What the other operator's driver samples: nobody who may not get its kind may read it.
CARD = "4111-1111-1111-1111"
SECRET = f'{{"card":"{CARD}"}}'
#: What sparkglass's own application's driver samples.
OWN = '{"n":1}'
URL = f"/api/v1/namespaces/{fl.NAMESPACE}/applications/flights/vertices/parse/data-sample"


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """On each store backend: SQLite hands out deleted ids again unless told not to."""
    return str(request.param)


def sampled(raw: dict[str, Any]) -> str:
    """The record data of a DataSample: the other operator's driver's, or sparkglass's."""
    return OWN if raw["spec"]["applicationRef"]["apiVersion"] == SPARKGLASS_API_VERSION else SECRET


async def records(client: TestClient, round_id: str, token: str) -> list[str]:
    r = await asyncio.to_thread(
        client.get,
        f"/api/v1/namespaces/{fl.NAMESPACE}/applications/flights/rounds/{round_id}",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    return [rec["data"] for sub in r.json()["samples"] for rec in sub["records"]]


@pytest.mark.kmock(cls=StrictApiServer)
async def test_a_sparkglass_application_replacing_another_kind_s_is_not_served_its_samples(
    kmock: kmock.KubernetesEmulator,
    tmp_path: Path,
    store_url: str,
    foreign: ForeignOperator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fl.install(kmock, foreign)
    app = await fl.application(kmock, foreign, "flights")
    await fl.publish(kmock, fl.published(foreign, app))
    fl.short_catalog_ttl(monkeypatch)
    service = create_app(Settings(**{**fl.settings(kmock, tmp_path), "database_url": store_url}))
    seen: list[dict[str, Any]] = []
    state = service.state.sparkglass
    operator = asyncio.create_task(fl.play_operator(kmock, state.sessions, seen, data=sampled))
    try:
        with TestClient(service) as client:
            # alice's team may get the other operator's applications: she samples its vertex,
            # and the service keeps the answer and its body in memory.
            theirs = await fl.poll_until_done(client, URL, "alice-token")
            assert theirs["status"] == "COMPLETE"
            assert {r["data"] for s in theirs["samples"] for r in s["records"]} == {SECRET}

            # A sparkglass SparkApplication of the same name: it wins the name, its row
            # replaces the other's once the catalog reads the namespace again (and the
            # service's row cache, 2 s, forgot the old row).
            await fl.sparkglass_application(kmock, "flights", ["flights", "parse"])
            await asyncio.sleep(2.5)

            # bob may read and sample sparkglass's applications, not the other kind.
            first = await asyncio.to_thread(
                client.get, URL, headers={"Authorization": "Bearer bob-token"}
            )
            assert first.status_code == 200, first.text
            assert CARD not in first.text
            assert first.json()["roundId"] != theirs["roundId"]
            ours = await fl.poll_until_done(client, URL, "bob-token")
            assert ours["roundId"] != theirs["roundId"]
            assert {r["data"] for s in ours["samples"] for r in s["records"]} == {OWN}
            assert await records(client, ours["roundId"], "bob-token") == [OWN, OWN]
            # The other application's round went with its row: not by its id either.
            r = await asyncio.to_thread(
                client.get,
                f"/api/v1/namespaces/{fl.NAMESPACE}/applications/flights/rounds/"
                f"{theirs['roundId']}",
                headers={"Authorization": "Bearer bob-token"},
            )
            assert r.status_code == 404 and CARD not in r.text
    finally:
        operator.cancel()
    refs = [s["spec"]["applicationRef"]["apiVersion"] for s in seen]
    assert refs == [foreign.rule.api_version, SPARKGLASS_API_VERSION]


def test_a_deleted_application_s_id_is_never_given_to_another(store_url: str) -> None:
    sessions = open_store(store_url)
    with sessions.begin() as session:
        for name in ("a", "b", "c"):
            repository.upsert_application(session, "team-a", name)
        highest = repository.get_application(session, "team-a", "c")
        assert highest is not None
        gone = highest.id
    with sessions.begin() as session:
        assert repository.delete_application(session, "team-a", "c")
    with sessions.begin() as session:
        # Replaced by another kind's application of its name, then a new name.
        repository.upsert_application(
            session, "team-a", "b", api_version="sparkoperator.k8s.io/v1beta2"
        )
        fresh = repository.upsert_application(session, "team-a", "d")
        replaced = repository.get_application(session, "team-a", "b")
        assert replaced is not None
        ids = {fresh.id, replaced.id}
    assert gone not in ids and min(ids) > gone
    sessions.kw["bind"].dispose()


@pytest.mark.parametrize("store_backend", ["sqlite"])
def test_a_store_made_before_ids_were_never_reused_never_reuses_them_after(
    store_url: str,
) -> None:
    """A SQLite store at the revision before: the upgrade keeps every row and id, and from
    then on a deleted id stays unused."""
    engine = make_engine(store_url)
    migrate(engine, "0013")
    with engine.begin() as connection:
        for name in ("a", "b"):
            connection.execute(
                text(
                    "INSERT INTO applications (namespace, name, edges, sampling, "
                    "registered_at, updated_at) VALUES ('team-a', :name, '[]', '{}', 1, 1)"
                ),
                {"name": name},
            )
    engine.dispose()
    sessions = open_store(store_url)
    with sessions.begin() as session:
        kept = {a.name: a.id for a in repository.list_applications(session, "team-a")}
        assert kept == {"a": 1, "b": 2}
        repository.delete_application(session, "team-a", "b")
    with sessions.begin() as session:
        assert repository.upsert_application(session, "team-a", "c").id == 3
    sessions.kw["bind"].dispose()

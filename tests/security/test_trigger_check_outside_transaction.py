"""Attack on the service's store through its permission check (``service/shared_rounds.py``).

In Kubernetes auth mode, whether a poll may start a round is a SubjectAccessReview: an HTTP
call to the API server, which can take seconds (a loaded API server, a slow webhook
authorizer behind it). It was asked inside the poll's database transaction, after the
round reads, so each poll that waited on it held a pooled connection ``idle in
transaction`` (on SQLite a read snapshot, then the write lock of the claim) for as long:
enough slow reviews, from any reader polling any vertex, exhaust the pool and stall every
other request of the service.

Against a uvicorn server in Kubernetes auth mode on a real PostgreSQL store, in front of the
Kubernetes API emulator (kmock) and the fake driver: while the API server answers the review
that decides the trigger, PostgreSQL shows no session of the service's database inside a
transaction, and the decision is the same (allowed: the round starts; refused: 403).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import kmock
import psycopg
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from tests.service.fake_driver import TOKEN, FakeDriver, ServerThread
from tests.service.kube_fixtures import ReviewingEmulator, subject_access_review, token_review
from tests.support.kube_fixtures import CRD_DIR

pytestmark = [
    pytest.mark.kmock(cls=ReviewingEmulator),
    pytest.mark.timeout(180),
    # Open transactions are read from PostgreSQL's pg_stat_activity.
    pytest.mark.parametrize("store_backend", ["postgresql"]),
]

SAMPLE = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
#: The poll's reads and claim name the rounds and vertex_leases tables; the audit writer's
#: flushes, which may run meanwhile, do not.
POLL_TABLES = re.compile(r"\b(rounds|vertex_leases)\b")


@pytest.fixture
def driver() -> Iterator[FakeDriver]:
    d = FakeDriver()
    with ServerThread(d.app()) as server:
        d.url = server.url
        yield d


def open_transactions(store_url: str) -> list[tuple[str, str]]:
    """(state, last query) of the sessions of the store's database inside a transaction."""
    database = store_url.rsplit("/", 1)[1]
    dsn = store_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT state, query FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'",
            (database,),
        ).fetchall()
    return [(str(state), str(query)) for state, query in rows]


def install(k: kmock.KubernetesEmulator, store_url: str, seen: list[dict[str, Any]]) -> None:
    """The reviews of ``tests/service/kube_fixtures.py``; each SubjectAccessReview also
    records the store's open transactions at the moment the API server answers it."""

    def reviewing(request: kmock.Request) -> dict[str, Any]:
        attrs = request.data["spec"]["resourceAttributes"]
        seen.append({"verb": attrs["verb"], "open": open_transactions(store_url)})
        return subject_access_review(request)

    k.resources.load_bundled()
    assert isinstance(k, ReviewingEmulator)
    k.declare_crds(sorted(CRD_DIR.glob("*.yaml")))
    for namespace in ("team-a", "team-b", "local"):
        k.namespaces.setdefault(namespace, {})
    k["post authentication.k8s.io/v1/tokenreviews"] << token_review
    k["post authorization.k8s.io/v1/subjectaccessreviews"] << reviewing


def poll_as(app: Any, driver: FakeDriver, tokens: list[str]) -> list[httpx.Response]:
    """One poll per token, in order, through one running server; waits (60 s at most) for
    the driver to see the round a poll started."""
    answers = []
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        for token in tokens:
            answers.append(http.get(SAMPLE, headers={"Authorization": f"Bearer {token}"}))
        deadline = time.monotonic() + 60
        while answers[-1].status_code == 200 and not driver.started.get("parse"):
            assert time.monotonic() < deadline, "the started round never reached the driver"
            http.get("/healthz")  # a request in between, not a sleep: the round runs meanwhile
        app.state.sparkglass.coordinator.wait_idle(30)
    return answers


async def test_the_trigger_review_runs_with_no_transaction_open(
    kmock: kmock.KubernetesEmulator, store_url: str, driver: FakeDriver
) -> None:
    seen: list[dict[str, Any]] = []
    install(kmock, store_url, seen)
    app = create_app(
        Settings(
            database_url=store_url,
            auth_mode="kubernetes",
            kube_api_url=str(kmock.url),
            kube_token="service-account-token",
            authn_cache_seconds=30,
            authz_allow_cache_seconds=30,
            authz_deny_cache_seconds=30,
            store_key=SecretStr(Fernet.generate_key().decode()),  # PostgreSQL needs one
        )
    )
    register_local_application(app.state.sparkglass.sessions, "flights", driver.url, TOKEN)
    # bob may read in namespace local but not create: no round, 403. alice may create
    # (through her group): the round starts.
    bob, alice = await asyncio.to_thread(poll_as, app, driver, ["bob-token", "alice-token"])
    assert bob.status_code == 403, bob.text
    assert alice.status_code == 200, alice.text
    assert alice.json()["status"] == "PENDING" and driver.started.get("parse") == 1
    # Both reviews of `create` were answered with no transaction of a poll open.
    creates = [s for s in seen if s["verb"] == "create"]
    assert len(creates) == 2, seen
    for review in creates:
        held = [(state, q) for state, q in review["open"] if POLL_TABLES.search(q)]
        assert held == [], held

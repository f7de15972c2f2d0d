"""Attacks on the fresh poll's fast path (``service/fresh_poll.py``), which answers a
conditional data-sample poll ``304`` from memory, before FastAPI's routing; each against the
real service over HTTP on 127.0.0.1. Principals and their namespaces come from a table
(standing in for TokenReview and SubjectAccessReview), except for revocation, which uses
local tokens issued and revoked in the store.

- No token, another scheme or a garbage token, sent with the ``ETag`` of a fresh result:
  401 as before, never 304, and the auth-failure limiter still counts each (429 past its
  limit), while the allowed principal's polls go on.
- A token of another principal, whose reading of the namespace is not cached as allowed
  (never asked, or denied), replaying the allowed principal's ``ETag``: 403, never 304.
- A principal allowed in namespace A polling namespace B with A's ``ETag``: 403, as the
  route answers.
- The ``ETag`` of one application or vertex replayed on another (another namespace's
  application of the same name included): that one's own answer, never 304.
- A revoked token: refused (401) within the same bound as the route (the route layer's
  one-second cache), however often it polls meanwhile: the fast path never extends it.
- Every fast 304 is audited, with the route's event; none asks the authenticator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from sparkglass.service.app import create_app
from sparkglass.service.auth import Permission, Principal
from sparkglass.service.catalog import register_local_application
from sparkglass.service.dependencies import DECISION_TTL_S
from sparkglass.service.settings import Settings
from sparkglass.service.state import ServiceState
from sparkglass.service.store.repository import AuditRecord, issue_token, revoke_token
from tests.service.fake_driver import TOKEN as DRIVER_TOKEN
from tests.service.fake_driver import FakeDriver, ServerThread
from tests.support.fresh_poll import long_decisions as long_decisions
from tests.support.fresh_poll import recorded_audit
from tests.support.fresh_poll import route_calls as route_calls

STORE_KEY = Fernet.generate_key().decode()
ALICE = "alice-token-0123456789"  # reads and samples in team-a
BOB = "bob-token-0123456789"  # reads and samples in team-b
#: Local mode's bootstrap admin (the revocation test).
ADMIN = "admin-bootstrap-token-0123456789"


def poll_url(namespace: str, application: str = "flights", vertex: str = "parse") -> str:
    return (
        f"/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/data-sample"
    )


@dataclass
class TableAuthenticator:
    """Tokens and permissions from a table; counts every question it is asked."""

    tokens: dict[str, Principal] = field(
        default_factory=lambda: {ALICE: Principal("alice"), BOB: Principal("bob")}
    )
    allowed: dict[tuple[str, str], frozenset[Permission]] = field(
        default_factory=lambda: {
            ("alice", "team-a"): frozenset({Permission.READ, Permission.TRIGGER}),
            ("bob", "team-b"): frozenset({Permission.READ, Permission.TRIGGER}),
        }
    )
    asked: int = 0

    def authenticate(self, token: str, audiences: tuple[str, ...] = ()) -> Principal | None:
        self.asked += 1
        return self.tokens.get(token)

    def authorize(self, principal: Principal, namespace: str, permission: Permission) -> bool:
        self.asked += 1
        return permission in self.allowed.get((principal.user, namespace), frozenset())


@dataclass
class Service:
    state: ServiceState
    http: httpx.Client
    authenticator: TableAuthenticator | None
    audited: list[AuditRecord]

    def get(self, path: str, token: str | None = None, etag: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if etag:
            headers["If-None-Match"] = etag
        return self.http.get(path, headers=headers)

    def sample(self, path: str, token: str) -> tuple[dict[str, Any], str]:
        """Poll until the result is final: its body and its ETag."""
        deadline = time.monotonic() + 60
        while True:
            r = self.get(path, token)
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            if body["status"] != "PENDING" and not body["stale"]:
                return body, r.headers["etag"]
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.fixture(scope="module")
def driver() -> Iterator[FakeDriver]:
    fake = FakeDriver()
    with ServerThread(fake.app()) as server:
        fake.url = server.url
        yield fake


@pytest.fixture
def start_service(tmp_path: Path, driver: FakeDriver) -> Iterator[Callable[..., Service]]:
    """The service under uvicorn with ``flights`` in ``team-a`` and ``team-b`` and
    ``other`` in ``team-a`` (``table=False``: local tokens, ``flights`` in ``local``)."""
    running: list[tuple[ServerThread, Service]] = []

    def factory(table: bool = True, **overrides: Any) -> Service:
        tokens_file = tmp_path / "tokens.csv"
        tokens_file.write_text(f"{ADMIN},root,admin\n")
        settings = Settings(
            database_url=f"sqlite:///{tmp_path / 'store.db'}",
            tokens_file=tokens_file,
            store_key=STORE_KEY,
            poll_interval_seconds=0.05,
            round_timeout_seconds=10.0,
            round_grace_seconds=0.0,
            refresh_interval_seconds=600.0,
            audit_flush_seconds=0.1,
            **overrides,
        )
        authenticator = TableAuthenticator() if table else None
        app = create_app(settings, authenticator=authenticator)
        state: ServiceState = app.state.sparkglass
        places = [("team-a", "flights"), ("team-b", "flights"), ("team-a", "other")]
        for namespace, name in places if table else [("local", "flights")]:
            register_local_application(
                state.sessions, name, driver.url, DRIVER_TOKEN, namespace=namespace
            )
        audited = recorded_audit(state)
        server = ServerThread(app).__enter__()
        service = Service(
            state, httpx.Client(base_url=server.url, timeout=30), authenticator, audited
        )
        running.append((server, service))
        return service

    yield factory
    for server, service in running:
        service.http.close()
        assert service.state.coordinator.wait_idle(10)
        server.__exit__(None, None, None)
        service.state.sessions.kw["bind"].dispose()


def _alice_fast_304(svc: Service, route_calls: list[str]) -> str:
    """Alice's fresh result in team-a, and proof that her conditional poll is the fast
    path's: its ETag."""
    _, etag = svc.sample(poll_url("team-a"), ALICE)
    route_calls.clear()
    assert svc.get(poll_url("team-a"), ALICE, etag).status_code == 304
    assert route_calls == []
    return etag


def test_no_token_or_garbage_never_gets_304_and_is_counted(
    start_service: Callable[..., Service], route_calls: list[str], long_decisions: None
) -> None:
    svc = start_service(
        auth_failure_limit=3,
        auth_failure_token_limit=3,
        auth_failure_window_seconds=600,
        auth_known_token_seconds=600,
    )
    etag = _alice_fast_304(svc, route_calls)
    url = poll_url("team-a")
    refused = [
        svc.http.get(url, headers={"If-None-Match": etag}),
        svc.http.get(url, headers={"If-None-Match": etag, "Authorization": f"Basic {ALICE}"}),
        svc.get(url, "garbage-0123456789", etag),
    ]
    for r in refused:
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    # The limiter counted the three: a fourth new garbage token is refused unchecked.
    r = svc.get(url, "garbage-9876543210", etag)
    assert r.status_code == 429 and "retry-after" in r.headers
    # The allowed principal is not refused with them, and still gets the fast 304.
    route_calls.clear()
    assert svc.get(url, ALICE, etag).status_code == 304 and route_calls == []


def test_another_principal_replaying_the_etag_gets_403(
    start_service: Callable[..., Service], route_calls: list[str], long_decisions: None
) -> None:
    svc = start_service()
    etag = _alice_fast_304(svc, route_calls)
    # Bob may read team-b only. His token is known (cached from a poll in team-b) but no
    # decision about team-a is cached: asked, 403; then denied in the cache: 403 again;
    # never the 304 of Alice's result.
    svc.sample(poll_url("team-b"), BOB)
    for _ in range(3):
        r = svc.get(poll_url("team-a"), BOB, etag)
        assert r.status_code == 403 and r.json() == {"detail": "forbidden"}
    # Decisions forgotten, the principals kept: still asked, still 403.
    svc.state.decision_cache.clear()
    assert svc.get(poll_url("team-a"), BOB, etag).status_code == 403
    # Alice, allowed in team-a, replaying team-a's tag in team-b: 403 as the route answers.
    for _ in range(3):
        r = svc.get(poll_url("team-b"), ALICE, etag)
        assert r.status_code == 403 and r.json() == {"detail": "forbidden"}
    assert svc.get(poll_url("team-a"), ALICE, etag).status_code == 304


def test_an_etag_never_answers_for_another_application_or_vertex(
    start_service: Callable[..., Service], route_calls: list[str], long_decisions: None
) -> None:
    svc = start_service()
    etag = _alice_fast_304(svc, route_calls)
    # The same application name and vertex in another namespace (Bob's), another
    # application of Alice's namespace, another vertex of the same application.
    others = [
        (poll_url("team-b"), BOB),
        (poll_url("team-a", "other"), ALICE),
        (poll_url("team-a", vertex="airlines"), ALICE),
    ]
    for url, token in others:
        body, own = svc.sample(url, token)
        assert own != etag
        r = svc.get(url, token, etag)
        assert r.status_code == 200 and r.json()["roundId"] == body["roundId"], url
        assert r.headers["etag"] == own
        # Its own tag is the fast path's 304 there.
        route_calls.clear()
        assert svc.get(url, token, own).status_code == 304 and route_calls == [], url


def test_every_fast_304_is_audited_and_asks_nothing(
    start_service: Callable[..., Service], route_calls: list[str], long_decisions: None
) -> None:
    svc = start_service()
    etag = _alice_fast_304(svc, route_calls)
    assert svc.authenticator is not None
    asked = svc.authenticator.asked
    seen = len(svc.audited)
    for _ in range(20):
        assert svc.get(poll_url("team-a"), ALICE, etag).status_code == 304
    assert route_calls == [] and svc.authenticator.asked == asked
    events = svc.audited[seen:]
    assert len(events) == 20
    for event in events:
        assert (event.actor, event.action, event.namespace, event.application) == (
            "alice",
            "read",
            "team-a",
            "flights",
        )
        assert event.vertex == "parse" and event.record_count == 0
        assert event.status == "COMPLETE" and event.round_id and event.client == "127.0.0.1"


def test_a_revoked_token_is_refused_within_the_routes_bound(
    start_service: Callable[..., Service], route_calls: list[str]
) -> None:
    svc = start_service(table=False)
    with svc.state.sessions.begin() as session:
        info, token = issue_token(session, "mallory", "sampler", expires_at=None)
    _, etag = svc.sample(poll_url("local"), token)
    # While cached, the fast path answers it (the route's cache filled by the poll above).
    deadline = time.monotonic() + 30
    while True:
        route_calls.clear()
        assert svc.get(poll_url("local"), token, etag).status_code == 304
        if not route_calls:
            break
        assert time.monotonic() < deadline, "the fast path never answered"
    with svc.state.sessions.begin() as session:
        assert revoke_token(session, info.id) is not None
    # Polling without pause (each fast 304 would extend a cache that renewed on use): 401
    # once the route layer's cache lapses, as on the route; the bound is DECISION_TTL_S,
    # not timed here to the millisecond (a busy machine's round trips take long).
    revoked_at = time.monotonic()
    while True:
        r = svc.get(poll_url("local"), token, etag)
        if r.status_code == 401:
            break
        assert r.status_code == 304
        assert time.monotonic() - revoked_at < DECISION_TTL_S + 10, "still answered"
    for _ in range(5):
        r = svc.get(poll_url("local"), token, etag)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"

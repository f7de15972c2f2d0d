"""Attack (review item A3): the failed-authentication limiter was keyed on the peer address
alone. Behind an Ingress every user shares the Ingress's address, so one client sending
garbage tokens (60 a minute) made the service answer 429 to everyone.

Now:

* a token that authenticated recently is never refused by the limiter (it is remembered by
  its SHA-256 for ``auth_known_token_seconds``; a 401 forgets it at once);
* failures are counted per (address, token) as well: one client retrying its one bad token
  is refused on its own, without using up the address's budget for everyone else;
* the per-address budget (``auth_failure_limit``) still bounds how many distinct unknown
  tokens one address gets checked (each may cost a TokenReview); concurrent requests hold
  a unit of it while they are checked, so a burst cannot overshoot it;
* ``trusted_proxies`` (default none) names the proxies whose ``X-Forwarded-For`` gives the
  client address; the client cannot pick it.

Against the real service over HTTP on 127.0.0.1 (``sparkglass serve``, local mode) and a
uvicorn server in Kubernetes mode in front of the API emulator (kmock).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread
from tests.service.kube_fixtures import ReviewingEmulator, install

LIST = "/api/v1/namespaces/local/applications"


def garbage() -> dict[str, str]:
    return {"Authorization": f"Bearer {secrets.token_hex(16)}"}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = FakeDriver()
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(
            tmp_path,
            server.url,
            # A long window: nothing refills while a test runs.
            SPARKGLASS_AUTH_FAILURE_LIMIT="10",
            SPARKGLASS_AUTH_FAILURE_WINDOW_SECONDS="600",
            SPARKGLASS_AUTH_FAILURE_TOKEN_LIMIT="3",
        ) as svc,
    ):
        yield svc


def test_garbage_tokens_do_not_lock_out_users_behind_the_same_address(
    service: ServiceProcess,
) -> None:
    with (
        httpx.Client(base_url=service.url, timeout=10) as user,
        httpx.Client(base_url=service.url, timeout=10) as attacker,
    ):
        assert user.get(LIST, headers=bearer("viewer")).status_code == 200
        codes = [attacker.get(LIST, headers=garbage()).status_code for _ in range(40)]
        assert codes.count(401) == 10 and codes.count(429) == 30, codes
        # The user, behind the same address, goes on being served.
        for _ in range(5):
            assert user.get(LIST, headers=bearer("viewer")).status_code == 200
        # What the limiter cannot do: a token it has never seen authenticate looks like the
        # attacker's garbage until it is checked, and checking it is what the budget bounds.
        late = user.get(LIST, headers=bearer("admin"))
        assert late.status_code == 429 and int(late.headers["retry-after"]) >= 1


def test_one_bad_token_retried_is_refused_alone(service: ServiceProcess) -> None:
    stale = garbage()  # e.g. an expired token in a client that retries for ever
    with httpx.Client(base_url=service.url, timeout=10) as http:
        codes = [http.get(LIST, headers=stale).status_code for _ in range(20)]
        assert codes == [401] * 3 + [429] * 17, codes
        refused = http.get(LIST, headers=stale)
        assert "this token" in refused.json()["detail"]
        # The address's budget is nearly whole: a user's first request is served.
        assert http.get(LIST, headers=bearer("sampler")).status_code == 200


def test_a_burst_of_garbage_cannot_overshoot_the_budget(service: ServiceProcess) -> None:
    def one(_: int) -> int:
        with httpx.Client(base_url=service.url, timeout=30) as http:
            return http.get(LIST, headers=garbage()).status_code

    with ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(one, range(64)))
    assert codes.count(401) <= 10, codes
    assert codes.count(401) + codes.count(429) == 64, codes


def test_a_known_token_that_stops_working_is_forgotten(tmp_path: Path) -> None:
    # A store token (revocable), used, then revoked: its next request is checked, fails,
    # and counts like any failure.
    from sparkglass.service.store import open_store, repository

    driver = FakeDriver()
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(
            tmp_path,
            server.url,
            SPARKGLASS_AUTH_FAILURE_LIMIT="10",
            SPARKGLASS_AUTH_FAILURE_WINDOW_SECONDS="600",
            SPARKGLASS_AUTH_FAILURE_TOKEN_LIMIT="2",
        ) as svc,
        httpx.Client(base_url=svc.url, timeout=10) as http,
    ):
        sessions = open_store(f"sqlite:///{tmp_path / 'service.db'}")
        with sessions.begin() as session:
            info, token = repository.issue_token(
                session, "carol", "viewer", expires_at=repository.now_ms() + 3_600_000
            )
        headers = {"Authorization": f"Bearer {token}"}
        assert http.get(LIST, headers=headers).status_code == 200
        with sessions.begin() as session:
            repository.revoke_token(session, info.id)
        sessions.kw["bind"].dispose()
        # Revocation applies within a second (the route layer's cache of principals).
        deadline = time.monotonic() + 10
        while (code := http.get(LIST, headers=headers).status_code) == 200:
            assert time.monotonic() < deadline, "the revoked token was still accepted"
            time.sleep(0.1)
        assert code == 401
        # From then on it is an unknown token like any other: its own budget (2) runs out.
        assert [http.get(LIST, headers=headers).status_code for _ in range(3)] == [401, 429, 429]


def test_forwarded_for_from_a_trusted_proxy_names_the_client(tmp_path: Path) -> None:
    driver = FakeDriver()
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(
            tmp_path,
            server.url,
            SPARKGLASS_AUTH_FAILURE_LIMIT="5",
            SPARKGLASS_AUTH_FAILURE_WINDOW_SECONDS="600",
            SPARKGLASS_TRUSTED_PROXIES="127.0.0.0/8, ::1",
        ) as svc,
        httpx.Client(base_url=svc.url, timeout=10) as http,
    ):
        attacker = "203.0.113.7"
        for i in range(20):
            # The attacker writes addresses of its own on the left; the proxy appends the
            # address it saw, which is the one that counts.
            xff = {"X-Forwarded-For": f"198.51.100.{i}, {attacker}"}
            http.get(LIST, headers={**garbage(), **xff})
        blocked = http.get(LIST, headers={**garbage(), "X-Forwarded-For": attacker})
        assert blocked.status_code == 429
        # Another client of the same proxy, with a token never seen before, is served.
        other = {"X-Forwarded-For": "203.0.113.8"}
        assert http.get(LIST, headers={**bearer("admin"), **other}).status_code == 200


def test_forwarded_for_is_ignored_without_trusted_proxies(service: ServiceProcess) -> None:
    # `sparkglass serve` as shipped: uvicorn's own X-Forwarded-For handling (which trusts
    # 127.0.0.1, where this client connects from, by default) must not name the client either.
    with httpx.Client(base_url=service.url, timeout=10) as http:
        codes = [
            http.get(LIST, headers={**garbage(), "X-Forwarded-For": f"198.51.100.{i}"}).status_code
            for i in range(20)
        ]
        assert codes.count(401) == 10 and codes.count(429) == 10, codes


def test_every_api_route_authenticates_before_it_answers(tmp_path: Path) -> None:
    # The limiter takes a 2xx, 3xx or 403 answer as proof that the token authenticated; an
    # /api/ route answering those without authenticating would let garbage past it.
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("admin-token-0123456789,admin-user,admin\n")
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'routes.db'}",
            tokens_file=tokens,
            auth_failure_limit=10_000,
            auth_failure_token_limit=10_000,
        )
    )
    # Every route the service documents (the OpenAPI description lists them all).
    routes = {p: ops for p, ops in app.openapi()["paths"].items() if p.startswith("/api/")}
    assert len(routes) >= 8
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        for template, operations in routes.items():
            path = re.sub(r"\{[^}]+\}", "x", template)
            for method in operations:
                for headers in (garbage(), {}):
                    r = http.request(method.upper(), path, headers=headers, json={})
                    assert r.status_code == 401, (method, template, r.status_code, r.text)


def _reviews(k: kmock.KubernetesEmulator) -> int:
    return sum(
        1 for r in k._requests if r.method == "POST" and str(r.url.path).endswith("tokenreviews")
    )


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_kubernetes_mode_users_stay_served_and_garbage_stays_cheap(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    install(kmock)
    settings: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "execution_mode": "kubernetes",
        "kube_api_url": str(kmock.url),
        "kube_token": "service-account-token",
        "auth_failure_limit": 10,
        "auth_failure_window_seconds": 600,
    }
    app = create_app(Settings(**settings))
    url = "/api/v1/namespaces/team-a/applications"

    def attack() -> tuple[int, list[int], list[int]]:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            bob = {"Authorization": "Bearer bob-token"}
            first = http.get(url, headers=bob).status_code
            codes = [http.get(url, headers=garbage()).status_code for _ in range(100)]
            during = [http.get(url, headers=bob).status_code for _ in range(5)]
            return first, codes, during

    before = _reviews(kmock)
    first, codes, during = await asyncio.to_thread(attack)
    assert first == 200
    assert codes.count(401) == 10 and codes.count(429) == 90, codes
    assert during == [200] * 5
    # bob's first review and the 10 garbage tokens within the budget, no more.
    assert _reviews(kmock) - before <= 11


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"trusted_proxies": "10.0.0.0/8, ingress"}, "trusted_proxies: 'ingress' is not an IP"),
        ({"auth_failure_token_limit": 0}, "auth_failure_token_limit"),
        ({"auth_known_token_seconds": -1}, "auth_known_token_seconds"),
    ],
)
def test_limiter_settings_are_checked_naming_the_setting(
    values: dict[str, Any], message: str
) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        Settings(**values)
    assert Settings(trusted_proxies="10.0.0.0/8, 192.0.2.10,::1").trusted_proxy_networks[1] == (
        ipaddress.ip_network("192.0.2.10/32")
    )

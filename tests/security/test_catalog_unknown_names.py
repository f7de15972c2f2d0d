"""Attack on the Kubernetes-mode catalog (``service/catalog.py``): a reader asks the service
for applications that do not exist, each under a new name. Every unknown name cost a read of
the SparkApplication from the API server (200 made-up names, 200 GETs), and once the
bounded memory of names read had moved on, the same names cost the same GETs again: the
service turned any reader into a load generator against the API server.

Against a uvicorn server in Kubernetes mode in front of the Kubernetes API emulator (kmock),
counting the requests the API server really received: repeated unknown names cost nothing
within the catalog's TTL, a flood of distinct ones costs at most
``UNKNOWN_GETS_BEFORE_LIST`` GETs and one LIST of the namespace, and an application that
exists is still found.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from sparkglass.service.app import create_app
from sparkglass.service.catalog import UNKNOWN_GETS_BEFORE_LIST
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread
from tests.service.kube_fixtures import ReviewingEmulator, install
from tests.support.kube_apiserver import StrictApiServer

pytestmark = [pytest.mark.kmock(cls=ReviewingEmulator), pytest.mark.timeout(180)]

APPS = "/apis/sparkglass.io/v1alpha1/namespaces/team-a/sparkapplications"
#: The catalog's TTL in the service (KubernetesCatalog's default).
CATALOG_TTL_S = 15.0
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
            ]
        },
    },
}


def api_reads(k: StrictApiServer) -> tuple[int, int]:
    """(GETs of one SparkApplication, LISTs of them) the API server answered in team-a."""
    gets = sum(n for (m, p), n in k.served.items() if m == "GET" and p.startswith(f"{APPS}/"))
    lists = sum(n for (m, p), n in k.served.items() if m == "GET" and p.rstrip("/") == APPS)
    return gets, lists


@pytest.fixture
def settings(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> Settings:
    install(kmock)
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "execution_mode": "kubernetes",
        "kube_api_url": str(kmock.url),
        "kube_token": "service-account-token",
        "authn_cache_seconds": 30,
        "authz_allow_cache_seconds": 30,
        "authz_deny_cache_seconds": 30,
        "catalog_max_names": 50,
    }
    return Settings(**values)


def ask(app: Any, names: list[str]) -> list[int]:
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        return [
            http.get(
                f"/api/v1/namespaces/team-a/applications/{name}",
                headers={"Authorization": "Bearer bob-token"},  # may read team-a
            ).status_code
            for name in names
        ]


async def test_a_flood_of_made_up_names_costs_a_bounded_number_of_reads(
    kmock: kmock.KubernetesEmulator, settings: Settings
) -> None:
    assert isinstance(kmock, StrictApiServer)
    async with httpx.AsyncClient(base_url=str(kmock.url)) as kube:
        r = await kube.post(APPS, json=SPARKAPP)
        assert r.status_code < 300, r.text
    app = create_app(settings)
    catalog = app.state.sparkglass.catalog
    assert catalog is not None
    made_up = [f"made-up-{i}" for i in range(200)]
    first = time.monotonic()
    codes = await asyncio.to_thread(ask, app, made_up)
    assert set(codes) == {404}, codes
    # The bound holds per TTL (15 s); a loaded machine may take longer than that for 200.
    windows = 1 + int((time.monotonic() - first) // CATALOG_TTL_S)
    gets, lists = api_reads(kmock)
    assert gets <= windows * UNKNOWN_GETS_BEFORE_LIST and lists <= windows, (gets, lists)
    # The same names again (past the bound of 50 names remembered): the listing answers
    # them, at no cost at all while it is fresh.
    second = time.monotonic()
    codes = await asyncio.to_thread(ask, app, made_up)
    assert set(codes) == {404}, codes
    now = time.monotonic()
    windows = 0 if now - first < CATALOG_TTL_S else 1 + int((now - second) // CATALOG_TTL_S)
    more_gets, more_lists = (a - b for a, b in zip(api_reads(kmock), (gets, lists), strict=True))
    assert more_gets <= windows * UNKNOWN_GETS_BEFORE_LIST and more_lists <= windows, windows
    # The application that exists is found all the same, and the memory stays bounded.
    assert await asyncio.to_thread(ask, app, ["flights"]) == [200]
    assert catalog.remembered() <= 2 * 50


async def test_one_unknown_name_asked_again_and_again_costs_one_read(
    kmock: kmock.KubernetesEmulator, settings: Settings
) -> None:
    assert isinstance(kmock, StrictApiServer)
    app = create_app(settings)
    codes = await asyncio.to_thread(ask, app, ["nope"] * 100)
    assert set(codes) == {404}, codes
    assert api_reads(kmock) == (1, 0)


async def test_an_application_created_after_a_listing_is_found_at_once(
    kmock: kmock.KubernetesEmulator, settings: Settings
) -> None:
    """The bound on unknown names must not hide a new application: a listing of the namespace
    (the page's dropdown) answered every name for the TTL, so one created just after it got a
    404 for 15 s."""
    assert isinstance(kmock, StrictApiServer)
    app = create_app(settings)
    auth = {"Authorization": "Bearer bob-token"}

    def list_create_get() -> tuple[httpx.Response, httpx.Response]:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            listed = http.get("/api/v1/namespaces/team-a/applications", headers=auth)
            r = httpx.post(f"{str(kmock.url).rstrip('/')}{APPS}", json=SPARKAPP)
            assert r.status_code < 300, r.text
            return listed, http.get("/api/v1/namespaces/team-a/applications/flights", headers=auth)

    listed, found = await asyncio.to_thread(list_create_get)
    assert listed.status_code == 200 and listed.json() == [], listed.text
    assert found.status_code == 200, found.text


async def test_a_concurrent_flood_keeps_the_bound(
    kmock: kmock.KubernetesEmulator, settings: Settings
) -> None:
    """Callers at once each passed the catalog's checks before any read counted: 300 made-up
    names from 32 threads cost 35 GETs and 8 LISTs where the bound allows 8 and 1 per 15 s.
    One read of a namespace at a time keeps it."""
    from concurrent.futures import ThreadPoolExecutor

    assert isinstance(kmock, StrictApiServer)
    app = create_app(settings)

    def flood() -> list[int]:
        with ServerThread(app) as server:

            def one(name: str) -> int:
                with httpx.Client(base_url=server.url, timeout=60) as http:
                    return http.get(
                        f"/api/v1/namespaces/team-a/applications/{name}",
                        headers={"Authorization": "Bearer bob-token"},
                    ).status_code

            one("warm-up")  # the token review is cached from here on
            with ThreadPoolExecutor(32) as pool:
                return list(pool.map(one, [f"made-up-{i}" for i in range(300)]))

    first = time.monotonic()
    codes = await asyncio.to_thread(flood)
    assert set(codes) == {404}, codes
    windows = 1 + int((time.monotonic() - first) // CATALOG_TTL_S)
    gets, lists = api_reads(kmock)
    assert gets <= windows * UNKNOWN_GETS_BEFORE_LIST and lists <= windows, (gets, lists, windows)

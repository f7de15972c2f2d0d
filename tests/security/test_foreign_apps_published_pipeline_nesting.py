"""Attack: a published pipeline nested deeply enough to break its parser, or naming a key
with a NUL in it, takes the whole namespace's listing down.

The service reads another operator's application's vertices from the ConfigMap
``<app>-sparkglass-pipeline``; whoever may write ConfigMaps in the namespace can write that
text. ``json.loads`` of a few tens of thousands of nested arrays (well under the 256 KiB
bound) raised ``RecursionError``, which escaped the catalog's read: every listing of the
namespace, and every application in it, answered 500.

A key with a NUL character came back in the parser's reason, stored with the application;
PostgreSQL's text columns refuse a NUL, which failed the namespace's whole catalog refresh.

On the stand-in API server, the ConfigMap carrying the operator's labels and owner reference
(as the operator's own would): only that application is shown without vertices, with the
reason; the others are listed and sampled as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock
import pytest
from fastapi.testclient import TestClient

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.support import foreign_listing as fl
from tests.support.foreign_apps import OPERATORS, ForeignOperator
from tests.support.foreign_apps import foreign as foreign  # the fixture, by name
from tests.support.foreign_listing import APPS
from tests.support.kube_apiserver import StrictApiServer
from tests.support.store_fixtures import BACKENDS

pytestmark = pytest.mark.kmock(cls=StrictApiServer)

DEPTH = 50_000
#: Valid JSON, a pipeline description but for one attribute nested DEPTH arrays deep.
NESTED = '{"name":"p","vertices":[{"name":"parse","attributes":' + "[" * DEPTH + "]" * DEPTH + "}]}"


async def get(client: TestClient, url: str) -> Any:
    r = await asyncio.to_thread(client.get, url, headers={"Authorization": "Bearer alice-token"})
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    return r.json()


@pytest.mark.parametrize("text", [NESTED, "[" * DEPTH], ids=["nested-attribute", "nested-array"])
async def test_a_deeply_nested_published_pipeline_affects_its_application_only(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator, text: str
) -> None:
    assert len(text.encode()) < 256 * 1024  # within the bound: refused by its parse, not size
    fl.install(kmock, foreign)
    good = await fl.application(kmock, foreign, "flights")
    await fl.publish(kmock, fl.published(foreign, good))
    bad = await fl.application(kmock, foreign, "nested")
    await fl.publish(kmock, fl.published(foreign, bad, text))
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        listed = {a["name"]: a["vertexCount"] for a in await get(client, APPS)}
        assert listed == {"flights": 3, "nested": 0}
        every = await get(client, "/api/v1/applications")
        assert {a["name"] for a in every} == {"flights", "nested"}

        detail = await get(client, f"{APPS}/nested")
        assert detail["vertices"] == []
        reason = detail["planError"]
        assert reason.startswith("pipeline not resolvable: ConfigMap nested-sparkglass-pipeline")
        assert "recursion limit exceeded" in reason, reason
        # The reason quotes no part of the text.
        assert "[[" not in reason and len(reason) < 400

        ok = await get(client, f"{APPS}/flights")
        assert [v["name"] for v in ok["vertices"]] == ["flights", "parse", "carriers"]
        assert ok["planError"] is None


#: A pipeline description whose vertex has an unknown key with a NUL in its name.
NUL_KEY = '{"name":"p","vertices":[{"name":"parse","evil\\u0000key":1}]}'


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """SQLite and PostgreSQL: only the latter refuses a NUL in text."""
    backend: str = request.param
    return backend


async def test_a_nul_in_a_published_pipeline_s_key_affects_its_application_only(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, store_url: str
) -> None:
    foreign = OPERATORS[0]
    fl.install(kmock, foreign)
    good = await fl.application(kmock, foreign, "flights")
    await fl.publish(kmock, fl.published(foreign, good))
    bad = await fl.application(kmock, foreign, "nul")
    await fl.publish(kmock, fl.published(foreign, bad, NUL_KEY))
    settings = {**fl.settings(kmock, tmp_path), "database_url": store_url}
    with TestClient(create_app(Settings(**settings))) as client:
        listed = {a["name"]: a["vertexCount"] for a in await get(client, APPS)}
        assert listed == {"flights": 3, "nul": 0}
        reason = (await get(client, f"{APPS}/nul"))["planError"]
        assert reason.startswith("pipeline not resolvable: ConfigMap nul-sparkglass-pipeline")
        assert "\x00" not in reason and "evil?key" in reason, reason
        ok = await get(client, f"{APPS}/flights")
        assert [v["name"] for v in ok["vertices"]] == ["flights", "parse", "carriers"]

"""Kubernetes mode lists the Kubeflow and Apache Spark operators' sampling-enabled
applications next to sparkglass's, each with its apiVersion; their vertices are the pipeline
the operator published; a round asked for one runs as a DataSample whose applicationRef names
that kind, and its result is served as for sparkglass's applications."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import kmock
import pytest
from fastapi.testclient import TestClient

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.support import foreign_listing as fl
from tests.support.foreign_apps import ForeignOperator
from tests.support.foreign_apps import foreign as foreign  # the fixture, by name
from tests.support.foreign_listing import APPS, bearer, call
from tests.support.kube_apiserver import StrictApiServer

pytestmark = pytest.mark.kmock(cls=StrictApiServer)


async def test_listed_with_kind_and_published_vertices_and_sampled_through_a_datasample(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator
) -> None:
    fl.install(kmock, foreign)
    app = await fl.application(kmock, foreign, "flights-x")
    await fl.publish(kmock, fl.published(foreign, app))
    # Not opted in: the operator does not serve it, the service does not list it.
    await fl.application(kmock, foreign, "quiet", sampling=False)
    # Opted in, its pipeline not published yet (or by someone else): listed, no vertices.
    other = await fl.application(kmock, foreign, "waiting")
    await fl.publish(kmock, fl.published(foreign, other, owned=False))

    service = create_app(Settings(**fl.settings(kmock, tmp_path)))
    seen: list[dict[str, Any]] = []
    operator = asyncio.create_task(fl.play_operator(kmock, service.state.sparkglass.sessions, seen))
    try:
        with TestClient(service) as client:
            r = await call(client, "GET", APPS, headers=bearer("alice-token"))
            assert r.status_code == 200, r.text
            listed = {a["name"]: a for a in r.json()}
            assert set(listed) == {"flights-x", "waiting"}
            assert listed["flights-x"]["apiVersion"] == foreign.rule.api_version
            assert listed["flights-x"]["vertexCount"] == 3
            assert listed["waiting"]["vertexCount"] == 0

            r = await call(client, "GET", f"{APPS}/flights-x", headers=bearer("alice-token"))
            detail = r.json()
            assert [v["name"] for v in detail["vertices"]] == ["flights", "parse", "carriers"]
            assert {(e["from"], e["to"]) for e in detail["edges"]} == {
                ("flights", "parse"),
                ("parse", "carriers"),
            }
            # Every namespace's listing marks the kind too.
            r = await call(client, "GET", "/api/v1/applications", headers=bearer("alice-token"))
            assert {a["name"]: a["apiVersion"] for a in r.json()}["flights-x"] == (
                foreign.rule.api_version
            )

            url = f"{APPS}/flights-x/vertices/parse/data-sample"
            first = await call(client, "GET", url, headers=bearer("alice-token"))
            assert first.status_code == 200 and first.json()["status"] == "PENDING"
            deadline = time.monotonic() + 60
            while True:
                r = await call(client, "GET", url, headers=bearer("alice-token"))
                assert r.status_code == 200, r.text
                if r.json()["status"] != "PENDING":
                    break
                assert time.monotonic() < deadline, "the round did not end"
                await asyncio.sleep(0.05)
            body = r.json()
            assert body["status"] == "COMPLETE" and body["totalRecordCount"] == 2
            assert body["roundId"] == first.json()["roundId"]
            r = await call(
                client,
                "GET",
                f"{APPS}/flights-x/rounds/{body['roundId']}",
                headers=bearer("alice-token"),
            )
            assert r.status_code == 200 and len(r.json()["samples"][0]["records"]) == 2
    finally:
        operator.cancel()
    assert len(seen) == 1
    assert seen[0]["spec"]["applicationRef"] == {
        "apiVersion": foreign.rule.api_version,
        "kind": "SparkApplication",
        "name": "flights-x",
    }


async def test_sparkglass_application_wins_a_shared_name(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator
) -> None:
    """One name, two applications: sparkglass's own is the one listed and sampled."""
    fl.install(kmock, foreign)
    await fl.application(kmock, foreign, "flights")
    await fl.create(
        kmock,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{fl.NAMESPACE}/sparkapplications",
        {
            "apiVersion": "sparkglass.io/v1alpha1",
            "kind": "SparkApplication",
            "metadata": {"name": "flights", "namespace": fl.NAMESPACE},
            "spec": {
                "type": "Python",
                "mode": "client",
                "image": "registry.example.com/flights:1",
                "mainApplicationFile": "local:///opt/flights_job.py",
                "pipeline": {"vertices": [{"name": "only", "kind": "source"}]},
            },
        },
    )
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        r = await call(client, "GET", APPS, headers=bearer("alice-token"))
        assert [(a["name"], a["apiVersion"]) for a in r.json()] == [
            ("flights", "sparkglass.io/v1alpha1")
        ]


@pytest.mark.parametrize(
    "pipeline",
    [
        "{not json",
        "x" * (256 * 1024 + 1),
        {"name": "p", "vertices": [{"name": "Not_A_Label"}, {"name": "ok", "inputs": ["gone"]}]},
    ],
    ids=["malformed", "over-the-bound", "bad-names"],
)
async def test_a_published_pipeline_is_bounded_and_checked(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator, pipeline: Any
) -> None:
    fl.install(kmock, foreign)
    app = await fl.application(kmock, foreign, "flights-x")
    await fl.publish(kmock, fl.published(foreign, app, pipeline))
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        r = await call(client, "GET", f"{APPS}/flights-x", headers=bearer("alice-token"))
        assert r.status_code == 200, r.text
        vertices = r.json()["vertices"]
        if isinstance(pipeline, dict):
            assert [(v["name"], v["inputs"]) for v in vertices] == [("ok", [])]
        else:
            assert vertices == []

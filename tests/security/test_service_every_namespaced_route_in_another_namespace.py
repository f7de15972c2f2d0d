"""Attack on namespace isolation in Kubernetes auth mode, on every route, new ones included.

A token that may read ``team-a`` asks every ``/api/v1/namespaces/{namespace}/...`` route the
service has (enumerated from the application, so a route added later, like ``GET
.../progress``, is covered without editing this test) for namespace ``team-b``, with every
method the route takes. Each answer must be 403 before anything of ``team-b`` is looked up:
not 200, not 404 (which would tell whether a name exists there), not 502 (which would mean
the service went to a driver on the caller's behalf). The same reads in ``team-a`` are not
403 (the token is good there; the audit trail aside, which needs more). Held on this main:
recorded so that a new route without the namespace check fails here. Against a uvicorn
server over HTTP in front of the Kubernetes API emulator answering TokenReview and
SubjectAccessReview.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread
from tests.service.kube_fixtures import ReviewingEmulator, install

PREFIX = "/api/v1/namespaces/{namespace}"


@pytest.fixture
def kube_settings(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> dict[str, Any]:
    install(kmock)
    return {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "execution_mode": "kubernetes",
        "kube_api_url": str(kmock.url),
        "kube_token": "service-account-token",
    }


def namespaced_requests(app: Any, namespace: str) -> list[tuple[str, str]]:
    """(method, path) of every namespaced API route (from the OpenAPI document, which lists
    every route), other path parameters filled in."""
    out = []
    for template, operations in app.openapi()["paths"].items():
        if not template.startswith(PREFIX):
            continue
        path = re.sub(r"\{[^}]+\}", "x1", template.replace("{namespace}", namespace))
        out += [(method.upper(), path) for method in sorted(operations)]
    return out


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_every_namespaced_route_refuses_another_namespace(
    kmock: kmock.KubernetesEmulator, kube_settings: dict[str, Any]
) -> None:
    app = create_app(Settings(**kube_settings))
    requests = namespaced_requests(app, "team-b")
    paths = {p for _, p in requests}
    assert any(p.endswith("/progress") for p in paths), paths  # the route under attack
    assert len(requests) >= 8, requests

    def attack() -> dict[tuple[str, str], int]:
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=20) as http:
            answers = {}
            for method, path in requests:
                answers[method, path] = http.request(
                    method, path, headers={"Authorization": "Bearer bob-token"}, json={}
                ).status_code
            for method, path in namespaced_requests(app, "team-a"):
                if method == "GET":
                    answers[method, path] = http.request(
                        method, path, headers={"Authorization": "Bearer bob-token"}
                    ).status_code
            return answers

    answers = await asyncio.to_thread(attack)
    other = {k: v for k, v in answers.items() if "/team-b/" in k[1]}
    # The operator's result route takes no user token at all: bob's is the API server's, not
    # of the service's audience, so it is refused before anything else (401), everywhere.
    results = {k: other.pop(k) for k in list(other) if k[1].endswith("/result")}
    assert set(results.values()) == {401}, results
    assert set(other.values()) == {403}, {k: v for k, v in other.items() if v != 403}
    # The audit trail needs more than reading samples (admin); every other read is open.
    own = {k: v for k, v in answers.items() if "/team-a/" in k[1] and "audit" not in k[1]}
    assert own and 403 not in own.values(), {k: v for k, v in own.items() if v == 403}

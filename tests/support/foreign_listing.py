"""The service in Kubernetes mode listing other operators' applications, on the stand-in API
server: the reviews answered from a table of grants that names API groups (the service asks
``get`` on the other operator's kind), the CRDs of sparkglass and of one other operator, an
application of it and the pipeline the operator publishes for it."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
from fastapi.testclient import TestClient

from sparkglass.crds.datasample import FOREIGN_PIPELINE_KEY
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service import app as service_app
from sparkglass.service.catalog import KubernetesCatalog
from sparkglass.service.store.repository import (
    round_of_datasample,
    save_datasample_result_retrying,
)
from tests.service.kube_fixtures import token_review
from tests.support.foreign_apps import ForeignOperator
from tests.support.kube_apiserver import StrictApiServer
from tests.support.kube_fixtures import CRD_DIR

NAMESPACE = "team-a"
#: The service's listing of :data:`NAMESPACE`.
APPS = f"/api/v1/namespaces/{NAMESPACE}/applications"
SPARKGLASS = "sparkglass.io"

#: The driver's pipeline as the operator publishes it.
PIPELINE: dict[str, Any] = {
    "name": "flights",
    "vertices": [
        {"name": "flights", "kind": "source", "bounded": False},
        {"name": "parse", "inputs": ["flights"], "bounded": False},
        {"name": "carriers", "inputs": ["parse"], "bounded": False},
    ],
}


def grants(op: ForeignOperator) -> set[tuple[str, str, str, str, str]]:
    """(user or group, namespace, verb, API group, resource) granted: the team may read,
    sample and get ``op``'s applications; bob may read and sample, but not get them."""
    return {
        ("team-a", NAMESPACE, "get", SPARKGLASS, "datasamples"),
        ("team-a", NAMESPACE, "create", SPARKGLASS, "datasamples"),
        ("team-a", NAMESPACE, "get", op.rule.group, op.rule.plural),
        ("bob", NAMESPACE, "get", SPARKGLASS, "datasamples"),
        ("bob", NAMESPACE, "create", SPARKGLASS, "datasamples"),
    }


def install(k: kmock.KubernetesEmulator, op: ForeignOperator) -> list[dict[str, Any]]:
    """The CRDs (sparkglass's and ``op``'s), the namespaces and the reviews on ``k``.
    Returns the list every SubjectAccessReview's ``resourceAttributes`` is appended to."""
    assert isinstance(k, StrictApiServer)
    k.resources.load_bundled()
    k.declare_crds(sorted(CRD_DIR.glob("*.yaml")))
    k.register_crd(copy.deepcopy(op.crd))
    for namespace in (NAMESPACE, "team-b"):
        k.namespaces.setdefault(namespace, {})
    granted = grants(op)
    asked: list[dict[str, Any]] = []

    def review(request: kmock.Request) -> dict[str, Any]:
        spec = request.data["spec"]
        attrs = spec["resourceAttributes"]
        asked.append(attrs)
        subjects = [spec.get("user"), *(spec.get("groups") or [])]
        key = (attrs["namespace"], attrs["verb"], attrs["group"], attrs["resource"])
        allowed = any((s, *key) in granted for s in subjects)
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
            "status": {"allowed": allowed},
        }

    k["post authentication.k8s.io/v1/tokenreviews"] << token_review
    k["post authorization.k8s.io/v1/subjectaccessreviews"] << review
    return asked


def settings(k: kmock.KubernetesEmulator, tmp_path: Path) -> dict[str, Any]:
    """Service settings: Kubernetes auth and execution, both other operators listed."""
    return {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "execution_mode": "kubernetes",
        "kube_api_url": str(k.url),
        "kube_token": "service-account-token",
        "refresh_interval_seconds": 60,
        "round_timeout_seconds": 30,
        "round_grace_seconds": 0,
        "poll_interval_seconds": 0.05,
        "kubeflow_applications": True,
        "apache_spark_applications": True,
    }


async def create(k: kmock.KubernetesEmulator, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to ``path``; the stored object."""
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        r = await kube.post(path, json=body)
        assert r.status_code < 300, r.text
        stored: dict[str, Any] = r.json()
        return stored


async def application(
    k: kmock.KubernetesEmulator, op: ForeignOperator, name: str, *, sampling: bool = True
) -> dict[str, Any]:
    """``op``'s example application ``name`` in :data:`NAMESPACE`."""
    body = op.example_app(name, sampling=sampling)
    body["metadata"]["namespace"] = NAMESPACE
    return await create(k, op.apps_path(NAMESPACE), body)


def published(
    op: ForeignOperator, app: dict[str, Any], pipeline: Any = None, *, owned: bool = True
) -> dict[str, Any]:
    """The ConfigMap the operator publishes ``pipeline`` (:data:`PIPELINE`) in for ``app``;
    ``owned=False``: the same without the owner reference (someone else's)."""
    meta = app["metadata"]
    text = pipeline if isinstance(pipeline, str) else json.dumps(pipeline or PIPELINE)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-sparkglass-pipeline",
            "namespace": NAMESPACE,
            "labels": {
                "sparkglass.io/application": meta["name"],
                "sparkglass.io/role": "pipeline",
                "app.kubernetes.io/managed-by": "sparkglass-operator",
            },
            "ownerReferences": [op.rule.owner_reference(app)] if owned else [],
        },
        "data": {FOREIGN_PIPELINE_KEY: text},
    }


async def publish(k: kmock.KubernetesEmulator, body: dict[str, Any]) -> None:
    """Create the ConfigMap ``body`` (as the operator would)."""
    await create(k, f"/api/v1/namespaces/{NAMESPACE}/configmaps", body)


#: How long :func:`play_operator` waits for the service to bind a DataSample, s.
UNBOUND_AFTER_S = 2.0


def bound(sessions: Any, uid: str) -> bool:
    """Whether the store binds a round to the DataSample of ``uid``."""
    with sessions() as session:
        return round_of_datasample(session, uid) is not None


async def play_operator(
    k: kmock.KubernetesEmulator,
    sessions: Any,
    seen: list[dict[str, Any]],
    data: Callable[[dict[str, Any]], str] | None = None,
) -> None:
    """Finishes each new DataSample as the operator does: the full result saved in the round
    bound to the DataSample's uid, at the kind its applicationRef names, then the status
    written (the service learns it by watch). ``data``: each record's ``data`` for a
    DataSample (by default ``{"n": i}``).

    As the operator takes at least a driver's round to answer, the service has bound its
    round to the DataSample's uid by then: a result saved first would be a round of its own
    and the service's binding would fail. So a DataSample is answered once the service bound
    it, or after :data:`UNBOUND_AFTER_S` (one the service did not create)."""
    first_seen: dict[str, float] = {}
    while True:
        for key, obj in list(k.objects.items()):
            if key[0].plural != "datasamples" or (obj.get("status") or {}).get("phase"):
                continue
            raw = dict(obj.raw)
            uid = raw["metadata"]["uid"]
            if any(s["metadata"]["uid"] == uid for s in seen):
                continue
            waited = time.monotonic() - first_seen.setdefault(uid, time.monotonic())
            if waited < UNBOUND_AFTER_S and not await asyncio.to_thread(bound, sessions, uid):
                continue
            seen.append(raw)
            ref = raw["spec"]["applicationRef"]
            result = DataSampleResult.model_validate(
                {
                    "status": "COMPLETE",
                    "totalRecordCount": 2,
                    "samples": [
                        {
                            "subtaskIndex": 0,
                            "records": [
                                {
                                    "sampleTimestamp": i,
                                    "data": data(raw) if data else f'{{"n":{i}}}',
                                    "dataType": "x",
                                }
                                for i in range(2)
                            ],
                        }
                    ],
                }
            )
            round_id = await asyncio.to_thread(
                save_datasample_result_retrying,
                sessions,
                namespace=raw["metadata"]["namespace"],
                application=ref["name"],
                vertex=raw["spec"]["vertex"],
                result=result,
                uid=raw["metadata"]["uid"],
                name=raw["metadata"]["name"],
                started_at_ms=None,
                request_key="",
                api_version=ref.get("apiVersion"),
            )
            meta = raw["metadata"]
            async with httpx.AsyncClient(base_url=str(k.url)) as kube:
                r = await kube.patch(
                    f"/apis/sparkglass.io/v1alpha1/namespaces/{meta['namespace']}/datasamples/"
                    f"{meta['name']}/status",
                    json={"status": {"phase": "Complete", "roundId": round_id}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert r.status_code < 300, r.text
        await asyncio.sleep(0.05)


def short_catalog_ttl(monkeypatch: pytest.MonkeyPatch, seconds: float = 0.2) -> None:
    """Services created from now on in the test re-read the API server after ``seconds``
    instead of the catalog's 15 s: a test sees a change there without waiting for it."""
    monkeypatch.setattr(
        service_app, "KubernetesCatalog", functools.partial(KubernetesCatalog, ttl_s=seconds)
    )


async def sparkglass_application(
    k: kmock.KubernetesEmulator, name: str, vertices: list[str]
) -> dict[str, Any]:
    """sparkglass's own SparkApplication ``name`` in :data:`NAMESPACE`, a chain of
    ``vertices`` (the first its source)."""
    chain = [
        {"name": v, "kind": "source"} if i == 0 else {"name": v, "inputs": [vertices[i - 1]]}
        for i, v in enumerate(vertices)
    ]
    return await create(
        k,
        f"/apis/{SPARKGLASS}/v1alpha1/namespaces/{NAMESPACE}/sparkapplications",
        {
            "apiVersion": f"{SPARKGLASS}/v1alpha1",
            "kind": "SparkApplication",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "type": "Python",
                "mode": "client",
                "image": "registry.example.com/flights:1",
                "mainApplicationFile": "local:///opt/flights_job.py",
                "pipeline": {"vertices": chain},
            },
        },
    )


async def poll_until_done(
    client: TestClient, url: str, token: str, timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll the data-sample ``url`` as ``token``'s holder until its round ended; its body."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = await asyncio.to_thread(client.get, url, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["status"] != "PENDING":
            return body
        assert time.monotonic() < deadline, "the round did not end"
        await asyncio.sleep(0.05)


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


async def call(client: TestClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """``client.request`` from a thread: the stand-in API server runs on the test's loop."""
    return await asyncio.to_thread(client.request, method, url, **kw)

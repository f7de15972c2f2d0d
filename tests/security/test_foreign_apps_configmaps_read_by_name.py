"""Attack: ConfigMaps made to look like published pipelines, for the service to read them all.

To list another operator's applications with their vertices, the service listed every
ConfigMap of the namespace labelled ``sparkglass.io/role=pipeline`` (the chart granted it
``get`` and ``list`` on all ConfigMaps), whole, before looking at any against the 256 KiB
bound. Whoever may create ConfigMaps in the namespace (most of its users) chose how many and
how large: each listing, every 15 s per namespace, read them all into the service.

On the stand-in API server, counting the requests it served: the service reads only the
ConfigMap named after each application it lists, by name, never a list; decoys are never read
and change nothing. The chart's side (``get`` only on ConfigMaps) is
``tests/chart/test_service_foreign_apps_rbac.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import kmock
import pytest
from fastapi.testclient import TestClient

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.support import foreign_listing as fl
from tests.support.foreign_apps import ForeignOperator
from tests.support.foreign_apps import foreign as foreign  # the fixture, by name
from tests.support.foreign_listing import APPS
from tests.support.kube_apiserver import StrictApiServer

pytestmark = pytest.mark.kmock(cls=StrictApiServer)

CONFIGMAPS = f"/api/v1/namespaces/{fl.NAMESPACE}/configmaps"
DECOYS = 12
#: A decoy's pipeline text: large, but each ConfigMap stays within what etcd stores.
DECOY_BYTES = 200 * 1024


async def test_the_service_gets_each_listed_application_s_configmap_and_lists_none(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator
) -> None:
    assert isinstance(kmock, StrictApiServer)
    fl.install(kmock, foreign)
    app = await fl.application(kmock, foreign, "flights")
    await fl.publish(kmock, fl.published(foreign, app))
    # Decoys with the operator's labels, owned by the application: as close to the real one
    # as anyone but the operator can make them, under names no listed application has.
    for i in range(DECOYS):
        decoy = fl.published(foreign, app, "x" * DECOY_BYTES)
        decoy["metadata"]["name"] = f"decoy-{i}-sparkglass-pipeline"
        await fl.publish(kmock, decoy)
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        for url in (APPS, "/api/v1/applications", f"{APPS}/flights"):
            r = await asyncio.to_thread(
                client.get, url, headers={"Authorization": "Bearer alice-token"}
            )
            assert r.status_code == 200, r.text
        listed = r.json()
        assert [v["name"] for v in listed["vertices"]] == ["flights", "parse", "carriers"]

    # The service's reads (the test's own requests are its creations, POSTs).
    reads = {
        path: n
        for (method, path), n in kmock.served.items()
        if method == "GET" and "/configmaps" in path
    }
    assert CONFIGMAPS not in reads, "the service listed the namespace's ConfigMaps"
    assert set(reads) == {f"{CONFIGMAPS}/flights-sparkglass-pipeline"}, reads

"""Attack: reading or sampling another operator's application through the service without
the right to ``get`` it in Kubernetes.

bob may read and sample in the namespace (``get``/``create`` datasamples) but may not
``get`` the Kubeflow or Apache Spark operator's SparkApplications there. To him such an
application does not exist: not in a listing, not in a 404's list of names, not by its URL
(detail, data-sample poll, which would create a DataSample, rounds, progress). The service
asks the API server about exactly that kind."""

from __future__ import annotations

from pathlib import Path

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


async def test_a_user_who_may_not_get_the_kind_does_not_see_the_application(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator
) -> None:
    asked = fl.install(kmock, foreign)
    app = await fl.application(kmock, foreign, "secret-etl")
    await fl.publish(kmock, fl.published(foreign, app))
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        # alice's team may get the kind: she sees it (the application exists and is listed).
        r = await call(client, "GET", APPS, headers=bearer("alice-token"))
        assert [a["name"] for a in r.json()] == ["secret-etl"]

        r = await call(client, "GET", APPS, headers=bearer("bob-token"))
        assert (r.status_code, r.json()) == (200, [])
        r = await call(client, "GET", "/api/v1/applications", headers=bearer("bob-token"))
        assert (r.status_code, r.json()) == (200, [])
        base = f"{APPS}/secret-etl"
        for url in (
            base,
            f"{base}/vertices/parse/data-sample",
            f"{base}/vertices/parse/rounds",
            f"{base}/progress",
            f"{base}/expectations",
            f"{APPS}/no-such-app",
        ):
            r = await call(client, "GET", url, headers=bearer("bob-token"))
            assert r.status_code == 404, (url, r.status_code, r.text)
            # Answered as for a name that does not exist: no vertex list, no names listed.
            assert r.json()["detail"].endswith("applications: none"), (url, r.text)
        # Even answered as absent: his poll created no DataSample.
        assert not [key for key in kmock.objects if key[0].plural == "datasamples"]
        # eve may not even read in the namespace: 403, as for any application.
        r = await call(client, "GET", base, headers=bearer("eve-token"))
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})

    # The review asked was for that kind, in that namespace.
    kinds = {(a["group"], a["resource"], a["verb"], a["namespace"]) for a in asked}
    assert (foreign.rule.group, foreign.rule.plural, "get", fl.NAMESPACE) in kinds


async def test_another_namespace_where_the_user_may_read_shows_nothing_of_team_a(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, foreign: ForeignOperator
) -> None:
    """alice may get the kind in team-a only: asking for team-a's application in team-b
    reads team-b (403: she may not read there), never team-a's object."""
    fl.install(kmock, foreign)
    await fl.application(kmock, foreign, "secret-etl")
    with TestClient(create_app(Settings(**fl.settings(kmock, tmp_path)))) as client:
        r = await call(
            client,
            "GET",
            "/api/v1/namespaces/team-b/applications/secret-etl",
            headers=bearer("alice-token"),
        )
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})

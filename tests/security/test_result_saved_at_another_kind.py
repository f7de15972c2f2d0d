"""Attack: a DataSample of another operator's application hands its result to the service, which
saves it in the sparkglass application of the same name (or the other way round).

The result route matched a result to the store's application by name only, and the store
created the row, when there was none, as sparkglass's own. Whoever may create DataSamples
(``kubectl``) can name a Kubeflow or Apache Spark operator application that shares its name
with a sparkglass SparkApplication; the operator samples that driver and the service saved
its records as a round of the sparkglass application, shown to everyone who may read
sparkglass's applications, who need not be allowed to ``get`` the other kind.

Against the service over HTTP on 127.0.0.1 (uvicorn) in Kubernetes mode, the operator's own
token, DataSamples stored by the API server stand-in, the store on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

import httpx
import kmock
import pytest

from sparkglass.crds.datasample import KUBEFLOW_API_VERSION, SPARKGLASS_API_VERSION
from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.service.store import open_store, repository
from tests.service.kube_fixtures import ReviewingEmulator
from tests.support.result_service import serve_results_in_kubernetes
from tests.support.store_fixtures import BACKENDS

pytestmark = [pytest.mark.timeout(120), pytest.mark.kmock(cls=ReviewingEmulator)]

DATASAMPLES = "/apis/sparkglass.io/v1alpha1/namespaces/team-a/datasamples"
RECORD = '{"card":"4111-1111-1111-1111"}'


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """On each store backend."""
    return str(request.param)


class Service(NamedTuple):
    url: str
    store: str


@pytest.fixture()
async def service(kmock: kmock.KubernetesEmulator, store_url: str) -> AsyncIterator[Service]:
    """The service (Kubernetes modes, the operator its only result writer) on ``store_url``."""
    with serve_results_in_kubernetes(kmock, store_url) as url:
        yield Service(url, store_url)


@pytest.fixture()
def store(service: Service) -> Iterator[Any]:
    sessions = open_store(service.store)
    yield sessions
    sessions.kw["bind"].dispose()


def application(sessions: Any, api_version: str | None) -> None:
    """The store's application team-a/flights (vertex parse), of ``api_version``'s kind."""
    with sessions.begin() as session:
        repository.upsert_application(
            session,
            "team-a",
            "flights",
            description=PipelineDescription.model_validate(
                {"name": "flights", "vertices": [{"name": "parse", "kind": "source"}]}
            ),
            api_version=api_version,
        )


async def datasample(k: kmock.KubernetesEmulator, name: str, api_version: str) -> str:
    """Create DataSample ``team-a/name`` of flights/parse, ``applicationRef`` of
    ``api_version``; its uid."""
    ref: dict[str, Any] = {"name": "flights", "apiVersion": api_version}
    if api_version != SPARKGLASS_API_VERSION:
        ref["kind"] = "SparkApplication"
    body = {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"applicationRef": ref, "vertex": "parse"},
    }
    async with httpx.AsyncClient(base_url=str(k.url)) as kube:
        r = await kube.post(DATASAMPLES, json=body)
        assert r.status_code < 300, r.text
        return str(r.json()["metadata"]["uid"])


async def put_result(url: str, name: str, uid: str) -> httpx.Response:
    """The operator's PUT of DataSample ``name``'s result (from the test's event loop, which
    serves the API server stand-in meanwhile)."""
    body = {
        "uid": uid,
        "application": "flights",
        "vertex": "parse",
        "requestKey": "",
        "maxRecordLength": 100,
        "result": {
            "status": "COMPLETE",
            "totalRecordCount": 1,
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [{"sampleTimestamp": 1, "data": RECORD, "dataType": "x"}],
                }
            ],
        },
    }
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.put(
            f"{url}/api/v1/namespaces/team-a/datasamples/{name}/result",
            json=body,
            headers={"Authorization": "Bearer operator-token"},
        )


def rounds_of_flights(sessions: Any) -> tuple[str | None, int]:
    """(the kind of the store's team-a/flights, its rounds)."""
    with sessions() as session:
        app = repository.get_application(session, "team-a", "flights")
        assert app is not None
        return app.api_version, repository.count_rounds(session, app.id)


@pytest.mark.parametrize(
    ("stored", "named"),
    [
        (None, KUBEFLOW_API_VERSION),
        (KUBEFLOW_API_VERSION, SPARKGLASS_API_VERSION),
    ],
    ids=["kubeflow-result-into-sparkglass-row", "sparkglass-result-into-kubeflow-row"],
)
async def test_a_result_is_never_saved_in_another_kind_s_application_of_its_name(
    kmock: kmock.KubernetesEmulator,
    service: Service,
    store: Any,
    stored: str | None,
    named: str,
) -> None:
    application(store, stored)
    uid = await datasample(kmock, "ds-other-kind", named)
    answer = await put_result(service.url, "ds-other-kind", uid)
    assert answer.status_code == 409, answer.text
    assert "flights" in answer.json()["detail"]
    assert rounds_of_flights(store) == (stored, 0)


async def test_a_result_of_an_application_the_store_does_not_know_makes_a_row_of_its_kind(
    kmock: kmock.KubernetesEmulator, service: Service, store: Any
) -> None:
    """A DataSample made before the catalog read its application: the row made for its
    result is of the kind it names, never listed as sparkglass's."""
    uid = await datasample(kmock, "ds-first", KUBEFLOW_API_VERSION)
    answer = await put_result(service.url, "ds-first", uid)
    assert answer.status_code == 200, answer.text
    assert rounds_of_flights(store) == (KUBEFLOW_API_VERSION, 1)
    # A sparkglass DataSample of the same name is then refused, not saved next to it.
    uid = await datasample(kmock, "ds-second", SPARKGLASS_API_VERSION)
    answer = await put_result(service.url, "ds-second", uid)
    assert answer.status_code == 409, answer.text
    assert rounds_of_flights(store) == (KUBEFLOW_API_VERSION, 1)


@pytest.mark.parametrize("kind", [None, KUBEFLOW_API_VERSION], ids=["sparkglass", "kubeflow"])
async def test_a_result_of_the_same_kind_is_saved(
    kmock: kmock.KubernetesEmulator, service: Service, store: Any, kind: str | None
) -> None:
    application(store, kind)
    uid = await datasample(kmock, "ds-same", kind or SPARKGLASS_API_VERSION)
    answer = await put_result(service.url, "ds-same", uid)
    assert answer.status_code == 200, answer.text
    assert rounds_of_flights(store) == (kind, 1)

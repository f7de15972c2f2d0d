"""DataSamples run by the real operator process against a scripted driver control endpoint.

The scripted driver (:class:`tests.support.scripted_driver.ScriptedDriver`: the real control
endpoint over scripted executors; ``serve_driver``, the ``driver`` fixture) serves HTTPS only,
with the certificate the operator put in each application's Secret; the result service
(saving into the ``store_url`` of ``tests.support.store_fixtures``) and operator-argument
fixtures; the example application running
(``running_app``), DataSample bodies, their status, phases and events.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.operator.conftest import (
    EXAMPLES_DIR,
    NAMESPACE,
    OperatorProcess,
    StrictApiServer,
    eventually,
)
from tests.support.result_service import ResultService, serve_results
from tests.support.scripted_driver import ScriptedDriver, serve_driver

__all__ = ["ScriptedDriver", "serve_driver"]

APPS = "sparkglass.io/v1alpha1/sparkapplications"
SAMPLES = "sparkglass.io/v1alpha1/datasamples"
SERVICE_URL = "http://sparkglass.example:8000"


@pytest.fixture()
async def driver() -> AsyncIterator[ScriptedDriver]:
    d = ScriptedDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


def secret_entry(secret: dict[str, Any], key: str) -> str:
    """A decoded ``data`` entry of a Secret."""
    return base64.b64decode(secret["data"][key]).decode()


@pytest.fixture()
def result_service(store_url: str, tmp_path: Path) -> Iterator[ResultService]:
    """The service the operator hands results to, saving them in ``store_url``."""
    with serve_results(store_url, tmp_path) as service:
        yield service


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    return operator_arguments(result_service)


def operator_arguments(result_service: ResultService) -> list[str]:
    """The DataSample tests' operator command line, handing results to ``result_service``."""
    return [
        "--max-status-bytes",
        "4096",
        "--service-url",
        SERVICE_URL,
        *result_service.operator_args(),
        # The records' preview in status is opt-in; these tests read it.
        "--records-in-status",
        "--progress-seconds",
        "1",
    ]


def example(kind_file: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / kind_file).read_text())


async def post(kube: StrictApiServer, plural: str, body: dict[str, Any]) -> None:
    group = "/apis/sparkglass.io/v1alpha1"
    resp = await kube.post(f"{group}/namespaces/{NAMESPACE}/{plural}", json=body)
    assert resp.status in (200, 201), await resp.text()


async def patch_status(kube: StrictApiServer, path: str, status: dict[str, Any]) -> None:
    resp = await kube.patch(
        path, json={"status": status}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert resp.status == 200, await resp.text()


async def running_app(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    name: str = "flights",
    *,
    sampling: bool = True,
) -> None:
    """The example application, its driver Pod 'Running' at 127.0.0.1 (the scripted driver)."""
    body = example("flights-sparkapplication.yaml")
    body["metadata"]["name"] = name
    body["spec"]["sampling"]["controlPort"] = driver.port
    body["spec"]["sampling"]["enabled"] = sampling
    await post(kube, "sparkapplications", body)
    await eventually(lambda: kube.stored("v1/pods", NAMESPACE, f"{name}-driver"), operator=operator)
    await patch_status(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}-driver/status",
        {"phase": "Running", "podIP": "127.0.0.1"},
    )
    await eventually(
        lambda: state(kube, name) == "RUNNING", what=f"{name} RUNNING", operator=operator
    )
    secret = kube.stored("v1/secrets", NAMESPACE, f"{name}-control-token")
    assert secret is not None
    driver.tokens.add(secret_entry(secret, "token"))
    # What the driver Pod mounts: the certificate and key of the application's Secret.
    driver.serve_certificate(
        f"{name}-driver.{NAMESPACE}.svc",
        secret_entry(secret, "tls.crt"),
        secret_entry(secret, "tls.key"),
    )
    driver.vertices = {
        v["name"] for v in body["spec"]["pipeline"]["vertices"] if v.get("kind") != "sink"
    }


def state(kube: StrictApiServer, name: str) -> str | None:
    obj = kube.stored(APPS, NAMESPACE, name) or {}
    return ((obj.get("status") or {}).get("applicationState") or {}).get("state")


def sample_body(name: str, vertex: str, app: str = "flights", **spec: Any) -> dict[str, Any]:
    body = example("flights-datasample.yaml")
    body["metadata"]["name"] = name
    body["spec"].pop("ttlSecondsAfterFinished", None)
    body["spec"].update(applicationRef={"name": app}, vertex=vertex, **spec)
    return body


def status(kube: StrictApiServer, name: str) -> dict[str, Any]:
    return (kube.stored(SAMPLES, NAMESPACE, name) or {}).get("status") or {}


def phase(kube: StrictApiServer, name: str) -> str | None:
    return status(kube, name).get("phase")


def events_for(kube: StrictApiServer, name: str) -> list[dict[str, Any]]:
    found = []
    for n in kube.names("v1/events", NAMESPACE):
        event = kube.stored("v1/events", NAMESPACE, n) or {}
        if (event.get("involvedObject") or {}).get("name") == name:
            found.append(event)
    return found


FINAL = {"Complete", "Partial", "NoData", "Failed", "Disabled", "Abandoned"}


async def wait_final(kube: StrictApiServer, name: str, operator: OperatorProcess) -> str:
    return await eventually(
        lambda: phase(kube, name) if phase(kube, name) in FINAL else None,
        what=f"{name} to finish",
        operator=operator,
    )

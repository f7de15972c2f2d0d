"""The DataSample admission webhook of the real operator process (``operator/admission.py``).

The operator runs as in ``test_datasample.py`` (kmock API server, scripted driver over the
pinned HTTPS of the application's Secret) with ``--webhook-port``; each test sends the
``admission.k8s.io/v1`` AdmissionReview an API server would send, over HTTPS to that port,
and reads the verdict. kmock runs no admission chain (it never calls a webhook), so these
tests play the API server's part of that call; what the API server does with the verdict
(refuse the create with the message, print the warnings) is Kubernetes' own. The driver
side of the check (Spark's parser and analyzer) is tested on a real local Spark in
``tests/security/test_round_requests.py`` and ``test_real_driver.py``.
"""

from __future__ import annotations

import socket
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.operator.admission import PATH
from sparkglass.operator.certificates import issue_control_certificate

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from .test_datasample import ScriptedDriver, running_app, sample_body
from .test_datasample import driver as driver  # the fixture, by name

pytestmark = pytest.mark.timeout(180)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class WebhookTLS:
    port: int
    cert_file: Path
    key_file: Path
    cert_pem: str


@pytest.fixture()
def webhook_tls(tmp_path: Path) -> WebhookTLS:
    """A certificate for 127.0.0.1 (as the chart's for the webhook Service) and a port."""
    issued = issue_control_certificate("sparkglass-webhook", "sparkglass-system")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text(issued.cert_pem)
    key.write_text(issued.key_pem)
    return WebhookTLS(free_port(), cert, key, issued.cert_pem)


@pytest.fixture()
def operator_args(webhook_tls: WebhookTLS) -> list[str]:
    return [
        "--webhook-port",
        str(webhook_tls.port),
        "--webhook-cert-file",
        str(webhook_tls.cert_file),
        "--webhook-key-file",
        str(webhook_tls.key_file),
        "--bind",
        "127.0.0.1",
    ]


class Webhook:
    """The API server's side of the call: POST an AdmissionReview, read the response."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def review(
        self,
        obj: dict[str, Any],
        *,
        namespace: str = NAMESPACE,
        operation: str = "CREATE",
        kind: str = "DataSample",
    ) -> dict[str, Any]:
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "sparkglass.io", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "sparkglass.io", "version": "v1alpha1", "resource": "x"},
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "alice"},
                "object": obj,
            },
        }
        answer = await self.client.post(PATH, json=review)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
        response: dict[str, Any] = body["response"]
        assert response["uid"] == uid
        return response


@pytest.fixture()
async def webhook(operator: OperatorProcess, webhook_tls: WebhookTLS) -> AsyncIterator[Webhook]:
    """A client of the operator's webhook, trusting only its certificate, once it listens."""
    context = ssl.create_default_context(cadata=webhook_tls.cert_pem)
    async with httpx.AsyncClient(
        base_url=f"https://127.0.0.1:{webhook_tls.port}", verify=context, timeout=30
    ) as client:

        async def listening() -> bool:
            try:
                await client.post(PATH, content=b"{}", headers={"Content-Type": "text/plain"})
            except httpx.TransportError:
                return False
            return True

        await eventually(listening, what="the webhook to listen", operator=operator)
        yield Webhook(client)


def denied(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    assert response["status"]["code"] == 403
    return message


def allowed(response: dict[str, Any]) -> list[str]:
    assert response["allowed"] is True, response
    warnings: list[str] = response.get("warnings", [])
    return warnings


async def test_a_filter_the_driver_refuses_is_denied_naming_the_field_and_opens_nothing(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "reject-filter"
    message = denied(await webhook.review(sample_body("typo", "parse", filter="carier = 'UA'")))
    # The driver's words, without its list of the vertex's columns (a review cannot be told
    # from a forged one: tests/security/test_admission_webhook.py).
    assert message == "spec.filter: unknown column 'carier' at vertex 'parse'", message
    assert driver.calls["check:parse"] == 1
    assert driver.calls["open:parse"] == 0  # a review opens no round
    assert kube.stored("sparkglass.io/v1alpha1/datasamples", NAMESPACE, "typo") is None


async def test_a_request_the_driver_takes_is_admitted_without_warnings(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver)
    body = sample_body("ok", "parse", filter="carrier = 'UA'", columns=["carrier", "dep_delay"])
    assert allowed(await webhook.review(body)) == []
    assert driver.calls["check:parse"] == 1
    # Only what the CREATE carries is checked: the spec is immutable, so an UPDATE (status,
    # finalizers) is admitted without asking anyone, even with the driver refusing now.
    driver.behaviour["parse"] = "reject-filter"
    assert allowed(await webhook.review(body, operation="UPDATE")) == []
    assert driver.calls["check:parse"] == 1


async def test_a_vertex_or_window_the_application_does_not_allow_is_denied_from_its_spec(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """The application declares its vertices and window: no driver call is needed."""
    await running_app(kube, operator, driver)
    message = denied(await webhook.review(sample_body("nope", "prase")))
    assert message.startswith("spec.vertex: vertex 'prase' is not in application 'flights'")
    assert "schedule" not in message  # no list of the application's vertices
    message = denied(await webhook.review(sample_body("wide", "parse", samplingWindow="20s")))
    assert message.startswith("spec.samplingWindow: 20s exceeds the application's 3s"), message
    # A plain round at a declared vertex needs nothing only the driver knows.
    assert allowed(await webhook.review(sample_body("plain", "parse"))) == []
    assert sum(n for k, n in driver.calls.items() if k.startswith("check:")) == 0


async def test_what_cannot_be_checked_is_admitted_with_a_warning_saying_so(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """No application yet, a driver without the check, a driver that does not answer in
    time: admitted (the driver checks the round when it opens), with a warning saying what
    was not checked."""
    (warning,) = allowed(
        await webhook.review(sample_body("early", "parse", app="later", filter="x = 1"))
    )
    assert "'later' is not in namespace" in warning, warning
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "old"
    (warning,) = allowed(await webhook.review(sample_body("old", "parse", filter="x = 1")))
    assert "not checked yet" in warning and "older" in warning, warning
    driver.behaviour["parse"] = "slow"
    (warning,) = allowed(await webhook.review(sample_body("slow", "parse", filter="x = 1")))
    assert "did not answer" in warning, warning
    driver.check_gate.set()
    driver.behaviour["parse"] = "disabled"
    (warning,) = allowed(await webhook.review(sample_body("off", "parse", filter="x = 1")))
    assert "end Disabled" in warning, warning


async def test_an_application_with_sampling_off_is_admitted_with_a_warning(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver, sampling=False)
    (warning,) = allowed(await webhook.review(sample_body("off", "parse", filter="x = 1")))
    assert "sampling is disabled for 'flights'" in warning, warning
    assert driver.calls["check:parse"] == 0

"""The operator's DataSample admission webhook as the API server calls it: a certificate and
port for it (``webhook_tls``), the operator's arguments to serve it (``operator_args``), a
client posting AdmissionReviews (``webhook``, :class:`Webhook`) and the verdict readers
``allowed`` and ``denied``.
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
from tests.operator.conftest import NAMESPACE, OperatorProcess, eventually


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

"""Attacks on the DataSample admission webhook (``operator/admission.py``), against the real
operator process (kmock API server, scripted driver over pinned HTTPS; see
``tests/operator/test_admission.py``).

Any Pod that reaches the webhook's port can call it: the API server presents no client
certificate by default, so a review cannot be told from a forged one. What a caller must not
get from it: a body read without bound, a flood of calls to drivers, the control token sent
anywhere but the driver Pod the operator created, or a verdict on a namespace the operator
does not watch.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from aiohttp.test_utils import TestServer

from sparkglass.operator.admission import (
    MAX_CONCURRENT_DRIVER_CHECKS,
    MAX_REVIEW_BYTES,
    MAX_REVIEWS_IN_FLIGHT,
    PATH,
    REVIEW_READ_SECONDS,
    AdmissionRequest,
    DataSampleReviewer,
    Verdict,
    build_app,
)
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer
from tests.support import admission_webhook
from tests.support.admission_webhook import Webhook, allowed, denied
from tests.support.datasamples import (
    APPS,
    ScriptedDriver,
    patch_status,
    running_app,
    sample_body,
    secret_entry,
)
from tests.support.datasamples import driver as driver  # the fixture, by name
from tests.support.http_listener import Listener
from tests.support.http_listener import listener as listener  # the fixture, by name

pytestmark = pytest.mark.timeout(180)

# The operator tests' fixtures, bound here by name so that pytest finds them in this module.
operator = operator_tests.operator
webhook_tls = admission_webhook.webhook_tls
operator_args = admission_webhook.operator_args
webhook = admission_webhook.webhook


async def test_a_body_past_the_bound_is_refused_unread(webhook: Webhook) -> None:
    client = webhook.client
    big = b"{" + b" " * MAX_REVIEW_BYTES + b"}"
    answer = await client.post(PATH, content=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    # Without a Content-Length (chunked), the same bound holds while reading.

    async def chunks() -> Any:
        for _ in range(MAX_REVIEW_BYTES // 65536 + 2):
            yield b" " * 65536

    answer = await client.post(PATH, content=chunks(), headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
    for content_type, body, status in (
        ("text/plain", b"{}", 415),
        ("application/json", b"not json", 400),
        ("application/json", b'{"apiVersion": "admission.k8s.io/v1beta1"}', 400),
        ("application/json", b"[" * 100_000 + b"]" * 100_000, 400),  # deep nesting
    ):
        answer = await client.post(PATH, content=body, headers={"Content-Type": content_type})
        assert answer.status_code == status, (content_type, body[:40], answer.text)
    # Still serving.
    assert allowed(await webhook.review({"spec": {}}, operation="UPDATE")) == []


async def test_a_status_pointing_elsewhere_gets_no_request_and_no_token(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    webhook: Webhook,
    listener: Listener,
) -> None:
    """Whoever may patch ``sparkapplications/status`` points ``driverInfo`` at a listener
    of theirs: the webhook asks only the driver Pod the operator created."""
    await running_app(kube, operator, driver)
    await patch_status(
        kube,
        f"/apis/{APPS.rsplit('/', 1)[0]}/namespaces/{NAMESPACE}/sparkapplications/flights/status",
        {
            "driverInfo": {
                "controlEndpoint": listener.url,
                "controlSecretName": "someone-elses-secret",
            }
        },
    )
    driver.behaviour["parse"] = "reject-filter"
    message = denied(await webhook.review(sample_body("s", "parse", filter="carier = 'UA'")))
    assert message.startswith("spec.filter:")
    assert driver.calls["check:parse"] == 1
    assert listener.requests == []
    secret = kube.stored("v1/secrets", NAMESPACE, "flights-control-token") or {}
    token = secret_entry(secret, "token")
    assert token not in message and token not in operator.output()


async def test_a_review_for_a_namespace_not_watched_asks_nobody(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """A forged review naming another namespace gets no verdict on it: the operator does not
    read applications there, nor ask their drivers (no probing of others' schemas)."""
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "reject-filter"
    forged = sample_body("probe", "parse", filter="carier = 'UA'")
    forged["metadata"]["namespace"] = "kube-system"
    assert allowed(await webhook.review(forged, namespace="kube-system")) == []
    # An object claiming a watched namespace in a review for another: no genuine review
    # looks like that (the API server sets the object's namespace to the request's).
    forged["metadata"]["namespace"] = NAMESPACE
    message = denied(await webhook.review(forged, namespace="team-b"))
    assert message.startswith("metadata.namespace"), message
    assert driver.calls["check:parse"] == 0


async def test_a_refusal_relays_no_list_of_columns_vertices_or_expectations(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    """A caller on the Pod network forging reviews learns whether a name it guessed exists,
    not the vertex's columns, the application's vertices or its expectations."""
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "reject-filter"  # its message ends "; columns: carrier, ..."
    message = denied(await webhook.review(sample_body("p1", "parse", filter="carier = 'UA'")))
    assert "columns" not in message and "flight" not in message, message
    message = denied(await webhook.review(sample_body("p2", "nope")))
    assert "parse" not in message and "schedule" not in message, message


async def test_a_flood_of_reviews_does_not_become_a_flood_of_driver_calls(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, webhook: Webhook
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "slow"  # every check waits until check_gate is set
    flood = MAX_CONCURRENT_DRIVER_CHECKS + 6
    reviews = [
        asyncio.create_task(
            webhook.review(sample_body(f"f{i}", "parse", filter=f"dep_delay > {i}"))
        )
        for i in range(flood)
    ]
    # Those past the bound are answered at once, admitted with a warning (not checked here,
    # checked by the driver when the round opens); the others wait for the driver.
    done: set[asyncio.Task[dict[str, Any]]] = set()
    deadline = asyncio.get_running_loop().time() + 60
    while len(done) < flood - MAX_CONCURRENT_DRIVER_CHECKS:
        assert asyncio.get_running_loop().time() < deadline, len(done)
        finished, _ = await asyncio.wait(reviews, timeout=1)
        done = set(finished)
    for task in done:
        (warning,) = allowed(task.result())
        assert "many DataSamples at once" in warning, warning
    assert driver.calls["check:parse"] <= MAX_CONCURRENT_DRIVER_CHECKS
    driver.check_gate.set()
    answers = await asyncio.gather(*reviews)
    assert driver.calls["check:parse"] == MAX_CONCURRENT_DRIVER_CHECKS
    # The driver compiles one check at a time and answers the others at once with a 503
    # (busy): those are admitted, checked when their round opens; every review is admitted.
    assert all(a["allowed"] for a in answers), answers
    checked = [a for a in answers if not a.get("warnings")]
    assert 1 <= len(checked) <= MAX_CONCURRENT_DRIVER_CHECKS, answers


async def test_a_malformed_review_is_refused_and_a_bad_spec_denied_naming_it(
    webhook: Webhook,
) -> None:
    """A review's uid is echoed as given (the API server matches it): an over-long one is
    refused as malformed; a spec that is no DataSample spec is denied, not a 500."""
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "x" * 129,
            "kind": {"group": "sparkglass.io", "version": "v1alpha1", "kind": "DataSample"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "object": {},
        },
    }
    answer = await webhook.client.post(
        PATH, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400
    body["request"]["uid"] = str(uuid.uuid4())  # type: ignore[index]
    answer = await webhook.client.post(PATH, json=body)
    assert answer.status_code == 200
    verdict = answer.json()["response"]
    assert verdict["allowed"] is False and verdict["status"]["message"].startswith("spec")


class _HeldReviewer(DataSampleReviewer):
    """Answers every review only once ``release`` is set (a driver that takes its time)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def review(self, request: AdmissionRequest) -> Verdict:
        self.entered += 1
        await self.release.wait()
        return Verdict()


def _review_body(uid: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "sparkglass.io", "version": "v1alpha1", "kind": "DataSample"},
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "object": {},
            },
        }
    ).encode()


async def test_reviews_in_flight_and_slow_bodies_are_bounded() -> None:
    """The webhook's own server (in this process, on 127.0.0.1): past
    ``MAX_REVIEWS_IN_FLIGHT`` reviews at once a caller gets 503 at once, and a body that does
    not arrive within ``REVIEW_READ_SECONDS`` gets 408; neither holds a buffer for long."""
    reviewer = _HeldReviewer()
    server = TestServer(build_app(reviewer), host="127.0.0.1")
    await server.start_server()
    try:
        async with httpx.AsyncClient(base_url=str(server.make_url("")), timeout=60) as client:
            held = [
                asyncio.create_task(
                    client.post(
                        PATH,
                        content=_review_body(f"u{i}"),
                        headers={"Content-Type": "application/json"},
                    )
                )
                for i in range(MAX_REVIEWS_IN_FLIGHT)
            ]
            deadline = asyncio.get_running_loop().time() + 30
            while reviewer.entered < MAX_REVIEWS_IN_FLIGHT:
                assert asyncio.get_running_loop().time() < deadline, reviewer.entered
                await asyncio.sleep(0.05)
            extra = await client.post(
                PATH, content=_review_body("extra"), headers={"Content-Type": "application/json"}
            )
            assert extra.status_code == 503
            reviewer.release.set()
            answers = await asyncio.gather(*held)
            assert [a.status_code for a in answers] == [200] * MAX_REVIEWS_IN_FLIGHT
        # Headers announcing 1000 bytes, then 10, then nothing.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            (
                f"POST {PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 1000\r\n\r\n" + "{" * 10
            ).encode()
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), REVIEW_READ_SECONDS + 30)
        assert status_line.startswith(b"HTTP/1.1 408"), status_line
        writer.close()
    finally:
        await server.close()

"""Attacks on the control traffic between the operator and a driver.

The operator (a real process against the kmock API server) talks to the driver's control
endpoint over HTTPS, pinning the per-application certificate it put in the application's
Secret. The driver is the operator tests' scripted driver on 127.0.0.1, serving TLS like a
real one.

a. A listener at the driver's address presenting another certificate, even one valid for
   the same name from another CA, receives no request and so no token: the handshake fails
   and the DataSample says why (``DriverUntrusted``).
b. The Secret's key material (and the token) never appears in the operator's logs (DEBUG),
   the DataSample or SparkApplication status, or Events.
c. A driver started by an operator older than control TLS (no certificate mounted, plain
   HTTP) does not get the token in clear text: the DataSample fails and says to restart the
   application; restarting gives the new driver the certificate. Only
   ``--allow-cleartext-control`` sends the token to such a driver.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from sparkglass.operator import children
from sparkglass.operator.certificates import issue_control_certificate
from sparkglass.operator.spark_conf import DriverEnvironment
from sparkglass.operator.specs import SparkApplicationSpec
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.security.impostor_certificates import other_ca_certificate
from tests.support import datasamples, http_listener
from tests.support.datasamples import (
    APPS,
    SAMPLES,
    ScriptedDriver,
    events_for,
    example,
    patch_status,
    post,
    running_app,
    sample_body,
    secret_entry,
    status,
    wait_final,
)
from tests.support.http_listener import Listener

pytestmark = pytest.mark.timeout(240)

# The operator tests' fixtures, bound here by name so that pytest finds them in this module.
operator = operator_tests.operator
driver = datasamples.driver
listener = http_listener.listener  # a plain-HTTP listener recording every request
SERVER_NAME = f"flights-driver.{NAMESPACE}.svc"


@pytest.fixture()
def operator_args() -> list[str]:
    # DEBUG: whatever the operator would log about Secrets and requests is in the output.
    return ["--log-level", "DEBUG"]


def key_lines(secret: dict[str, Any]) -> list[str]:
    """The base64 lines of the Secret's private key (what a leak would contain)."""
    return [
        line
        for line in secret_entry(secret, "tls.key").splitlines()
        if line and not line.startswith("-----")
    ]


# --------------------------------------------------------------------------- a
@pytest.mark.parametrize("impostor", ["self-signed-same-name", "other-ca-same-name"])
async def test_a_listener_with_another_certificate_gets_no_token(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, impostor: str
) -> None:
    await running_app(kube, operator, driver)
    if impostor == "self-signed-same-name":
        fake = issue_control_certificate("flights-driver", NAMESPACE)
        chain, key = fake.cert_pem, fake.key_pem
    else:
        chain, key = other_ca_certificate(SERVER_NAME)
    # The attacker now answers at the driver's address, for the driver's name.
    driver.serve_certificate(SERVER_NAME, chain, key)
    # What reached the driver before the swap (the application's own progress read may
    # have): every call from now on meets the impostor's certificate.
    before, handshakes = sum(driver.calls.values()), driver.handshakes[SERVER_NAME]
    await post(kube, "datasamples", sample_body("impostor", "parse", backoffLimit=0))
    assert await wait_final(kube, "impostor", operator) == "Failed"
    # The operator did connect (a handshake for the driver's name) but sent no request.
    assert driver.handshakes[SERVER_NAME] > handshakes
    assert sum(driver.calls.values()) == before and driver.auth_failures == 0, driver.calls
    st = status(kube, "impostor")
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert ready["reason"] == "DriverUntrusted", st
    assert "TLS certificate failed verification against the pinned certificate" in st["message"]
    assert "CERTIFICATE_VERIFY_FAILED" in st["message"] or "certificate" in st["message"]
    # The real certificate back: the next DataSample completes over the same connection path.
    secret = kube.stored("v1/secrets", NAMESPACE, "flights-control-token")
    assert secret is not None
    driver.serve_certificate(
        SERVER_NAME, secret_entry(secret, "tls.crt"), secret_entry(secret, "tls.key")
    )
    await post(kube, "datasamples", sample_body("genuine", "parse"))
    assert await wait_final(kube, "genuine", operator) == "Complete"
    assert driver.calls["open:parse"] == 1


# --------------------------------------------------------------------------- b
async def test_b_key_material_never_reaches_logs_status_or_events(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    await post(kube, "datasamples", sample_body("fine", "parse"))
    assert await wait_final(kube, "fine", operator) == "Complete"
    # A failing handshake too (its error text is what lands in status and Events).
    fake = issue_control_certificate("flights-driver", NAMESPACE)
    driver.serve_certificate(SERVER_NAME, fake.cert_pem, fake.key_pem)
    await post(kube, "datasamples", sample_body("refused", "parse", backoffLimit=0))
    assert await wait_final(kube, "refused", operator) == "Failed"
    await eventually(
        lambda: events_for(kube, "fine") and events_for(kube, "refused"),
        what="events",
        operator=operator,
    )
    secret = kube.stored("v1/secrets", NAMESPACE, "flights-control-token")
    assert secret is not None
    secrets = [*key_lines(secret), secret_entry(secret, "token")]
    assert len(secrets) >= 3
    blobs = {
        "operator log": operator.output(),
        "SparkApplication": json.dumps(kube.stored(APPS, NAMESPACE, "flights")),
        "DataSamples": json.dumps(
            [kube.stored(SAMPLES, NAMESPACE, n) for n in kube.names(SAMPLES, NAMESPACE)]
        ),
        "Events": json.dumps(
            [kube.stored("v1/events", NAMESPACE, n) for n in kube.names("v1/events", NAMESPACE)]
        ),
    }
    assert "control certificate issued" in blobs["operator log"]  # the log does talk about it
    for where, blob in blobs.items():
        for secret_text in secrets:
            assert secret_text not in blob, f"key material or token in the {where}"
        assert "PRIVATE KEY" not in blob, where


# --------------------------------------------------------------------------- c
async def seed_legacy_application(kube: StrictApiServer, port: int) -> tuple[dict[str, Any], str]:
    """What an operator older than control TLS left running: the application, its Secret
    with a token only, and a driver Pod without the certificate volume, Running at
    127.0.0.1:``port``. Returns (the application, the token)."""
    body = example("flights-sparkapplication.yaml")
    body["metadata"] = {"name": "flights", "namespace": NAMESPACE}
    body["spec"]["sampling"]["controlPort"] = port
    await post(kube, "sparkapplications", body)
    app = kube.stored(APPS, NAMESPACE, "flights")
    assert app is not None
    uid = app["metadata"]["uid"]  # the API server's own
    token = "legacy-token-0123456789abcdef0123456789abcdef"
    old = children.secret(
        "flights", NAMESPACE, uid, token, issue_control_certificate("flights-driver", NAMESPACE)
    )
    old["data"] = {"token": base64.b64encode(token.encode()).decode()}
    resp = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=old)
    assert resp.status in (200, 201), await resp.text()
    spec = SparkApplicationSpec.parse(app["spec"])
    pod = children.driver_pod(
        "flights",
        NAMESPACE,
        uid,
        spec,
        hash=children.spec_hash(app["spec"]),
        attempt=1,
        env=DriverEnvironment(),
    )
    # Its Pod security context stays: the namespace's Pod Security admitted it then too.
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "secret" not in v]
    (container,) = pod["spec"]["containers"]
    container["volumeMounts"] = container["volumeMounts"][:1]
    resp = await kube.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=pod)
    assert resp.status in (200, 201), await resp.text()
    await patch_status(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/flights-driver/status",
        {"phase": "Running", "podIP": "127.0.0.1"},
    )
    return app, token


def listener_port(listener: Listener) -> int:
    return int(listener.url.rsplit(":", 1)[1])


async def test_c_a_driver_started_without_tls_gets_no_token_until_restarted(
    kube: StrictApiServer,
    kubeconfig: Path,
    crds_applied: None,
    tmp_path: Path,
    listener: Listener,
) -> None:
    _, token = await seed_legacy_application(kube, listener_port(listener))
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", [])
    proc.start()
    try:
        await post(kube, "datasamples", sample_body("legacy", "parse"))
        assert await wait_final(kube, "legacy", proc) == "Failed"
        st = status(kube, "legacy")
        ready = {c["type"]: c for c in st["conditions"]}["Ready"]
        assert ready["reason"] == "ControlNotEncrypted", st
        assert "was started without TLS" in st["message"]
        assert "restart the application" in st["message"]
        assert listener.requests == [], listener.requests  # not a byte of HTTP, no token
        assert not listener.saw_secret(token)
        # Restart (a spec change): the new driver Pod mounts a certificate the operator now
        # issued into the same Secret; the token stays.
        resp = await kube.patch(
            f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/flights",
            json={"spec": {"arguments": ["--days", "7"]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert resp.status == 200, await resp.text()

        def restarted() -> dict[str, Any] | None:
            pod = kube.stored("v1/pods", NAMESPACE, "flights-driver")
            volumes = {v["name"] for v in (pod or {}).get("spec", {}).get("volumes", [])}
            return pod if "sparkglass-control-tls" in volumes else None

        await eventually(restarted, what="a driver Pod with the certificate", operator=proc)
        secret = kube.stored("v1/secrets", NAMESPACE, "flights-control-token")
        assert secret is not None and secret_entry(secret, "token") == token
        assert "BEGIN CERTIFICATE" in secret_entry(secret, "tls.crt")
        assert "PRIVATE KEY" in secret_entry(secret, "tls.key")
        assert "no certificate yet" in proc.output()  # why it was issued, in the log
    finally:
        proc.stop()


async def test_c_cleartext_only_when_the_operator_allows_it(
    kube: StrictApiServer,
    kubeconfig: Path,
    crds_applied: None,
    tmp_path: Path,
    listener: Listener,
) -> None:
    _, token = await seed_legacy_application(kube, listener_port(listener))
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", ["--allow-cleartext-control"])
    proc.start()
    try:
        await post(kube, "datasamples", sample_body("cleartext", "parse"))
        await eventually(
            lambda: status(kube, "cleartext").get("phase") == "InProgress",
            what="the round open over plain HTTP",
            operator=proc,
        )
        # The plain-HTTP driver got the request, with the token: what the setting allows.
        assert listener.saw_secret(token)
    finally:
        proc.stop()

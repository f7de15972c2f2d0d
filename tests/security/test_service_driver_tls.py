"""Attack on the service's control traffic in local mode.

The service (a real ``sparkglass serve`` process on 127.0.0.1) calls the driver control
endpoint itself in local mode. An admin registers an ``https://`` driver with the driver's
own certificate (``driverCaPem``, e.g. the operator's per-application one). A listener at
that URL with another certificate, even one valid for the same name from another CA, must
receive no request and so no token; without ``driverCaPem`` an ``https://`` driver is
verified against the system's CAs, which do not vouch for a self-signed one either.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkglass.operator.certificates import ControlCertificate, issue_control_certificate
from tests.security.impostor_certificates import other_ca_certificate
from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import TOKEN, FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(180)

APP = "/api/v1/namespaces/local/applications/flights"
SAMPLE = f"{APP}/vertices/parse/data-sample"


def https_driver(tmp: Path, name: str, chain: str, key: str) -> tuple[FakeDriver, ServerThread]:
    (tmp / f"{name}.crt").write_text(chain)
    (tmp / f"{name}.key").write_text(key)
    driver = FakeDriver(pending_seconds=0.1)
    server = ServerThread(
        driver.app(), ssl_certfile=str(tmp / f"{name}.crt"), ssl_keyfile=str(tmp / f"{name}.key")
    )
    driver.url = server.url
    return driver, server


@pytest.fixture
def genuine_certificate() -> ControlCertificate:
    return issue_control_certificate("flights-driver", "local")  # SANs include 127.0.0.1


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    with ServiceProcess(tmp_path, None) as svc:
        yield svc


def register(
    http: httpx.Client, url: str, ca_pem: str | None = None, token: str = TOKEN
) -> httpx.Response:
    body = {"driverUrl": url, "driverToken": token}
    if ca_pem is not None:
        body["driverCaPem"] = ca_pem
    return http.put(APP, json=body, headers=bearer("admin"))


@pytest.mark.parametrize("impostor", ["self-signed-same-name", "other-ca-same-name"])
def test_a_driver_with_another_certificate_gets_no_token(
    service: ServiceProcess,
    tmp_path: Path,
    genuine_certificate: ControlCertificate,
    impostor: str,
) -> None:
    if impostor == "self-signed-same-name":
        fake = issue_control_certificate("flights-driver", "local")
        chain, key = fake.cert_pem, fake.key_pem
    else:
        chain, key = other_ca_certificate("127.0.0.1")
    driver, server = https_driver(tmp_path, "impostor", chain, key)
    with server, httpx.Client(base_url=service.url, timeout=30) as http:
        pinned = register(http, driver.url, genuine_certificate.cert_pem)
        unpinned = register(http, driver.url)  # verified against the system's CAs
        assert pinned.status_code == unpinned.status_code == 502, (pinned.text, unpinned.text)
        assert "failed verification against the pinned certificate" in pinned.json()["detail"]
        assert "failed verification against the system's CAs" in unpinned.json()["detail"]
        assert http.get(APP, headers=bearer("viewer")).status_code == 404  # nothing registered
    # Not one request reached the listener: no token, not even a path.
    assert driver.authorizations == []


def test_the_pinned_driver_is_registered_and_sampled_over_https(
    service: ServiceProcess, tmp_path: Path, genuine_certificate: ControlCertificate
) -> None:
    c = genuine_certificate
    driver, server = https_driver(tmp_path, "genuine", c.cert_pem, c.key_pem)
    with server, httpx.Client(base_url=service.url, timeout=30) as http:
        r = register(http, driver.url, c.cert_pem)
        assert r.status_code == 200, r.text
        assert "parse" in {v["name"] for v in r.json()["vertices"]}
        # A round through the service's own connection, which pins the same certificate.
        deadline = time.monotonic() + 60
        while True:
            sample = http.get(SAMPLE, headers=bearer("sampler"))
            assert sample.status_code == 200, sample.text
            if sample.json()["status"] != "PENDING":
                break
            assert time.monotonic() < deadline, "no result within 60 s"
            http.get("/healthz")  # a request in between, not a sleep: the round runs meanwhile
        assert sample.json()["status"] == "COMPLETE", sample.json()
        assert driver.started.get("parse") == 1
    assert set(driver.authorizations) == {f"Bearer {TOKEN}"}


def test_a_driver_certificate_is_checked_when_registering(
    service: ServiceProcess, genuine_certificate: ControlCertificate
) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        # With plain HTTP the certificate would protect nothing: refused, naming the field.
        r = register(http, "http://127.0.0.1:9", genuine_certificate.cert_pem)
        assert r.status_code == 422 and "driverCaPem" in r.text and "https://" in r.text
        r = register(http, "https://127.0.0.1:9", "not a certificate")
        assert r.status_code == 422 and "driverCaPem" in r.text
        assert "BEGIN CERTIFICATE" in r.text
        broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        r = register(http, "https://127.0.0.1:9", broken)
        assert r.status_code == 422 and "driverCaPem" in r.text
        r = register(http, "https://127.0.0.1:9", "x" * 70000)
        assert r.status_code == 422 and "driverCaPem" in r.text

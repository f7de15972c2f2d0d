"""Local mode over HTTPS: the executor pins each registered driver's certificate.

The fake driver served by uvicorn with TLS on 127.0.0.1; the certificates are the operator's
per-application ones (``issue_control_certificate``, which lists 127.0.0.1).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkglass.operator.certificates import ControlCertificate, issue_control_certificate
from sparkglass.runtime.contract.sample_result import ErrorCode, SampleStatus
from sparkglass.service.driver_trust import DriverTrust, driver_tls
from sparkglass.service.execution.base import RoundRequest
from sparkglass.service.execution.local import LocalDriverExecutor

from .fake_driver import TOKEN, FakeDriver, ServerThread


@pytest.fixture
def served() -> ControlCertificate:
    return issue_control_certificate("flights-driver", "local")


@pytest.fixture
def https_driver(tmp_path: Path, served: ControlCertificate) -> Iterator[FakeDriver]:
    (tmp_path / "tls.crt").write_text(served.cert_pem)
    (tmp_path / "tls.key").write_text(served.key_pem)
    driver = FakeDriver(pending_seconds=0.1)
    server = ServerThread(
        driver.app(),
        ssl_certfile=str(tmp_path / "tls.crt"),
        ssl_keyfile=str(tmp_path / "tls.key"),
    )
    with server:
        driver.url = server.url
        yield driver


def request(driver: FakeDriver) -> RoundRequest:
    return RoundRequest(
        round_id="r-1",
        namespace="local",
        application="flights",
        vertex="parse",
        sampling_window=None,
        timeout_s=30,
        poll_interval_s=0.05,
        requested_by="test",
        driver_url=driver.url,
        driver_token=TOKEN,
    )


def test_a_pinned_driver_runs_rounds_and_another_certificate_gets_no_token(
    https_driver: FakeDriver, served: ControlCertificate
) -> None:
    trust = DriverTrust()
    executor = LocalDriverExecutor(trust=trust)
    try:
        # No anchor: verified against the system's CAs, which do not vouch for it.
        outcome = executor.run(request(https_driver))
        assert outcome.result.status is SampleStatus.FAILED
        assert outcome.result.error_code is ErrorCode.INTERNAL_ERROR
        # Another certificate for the same names pinned: refused before any request.
        other = issue_control_certificate("flights-driver", "local")
        trust.set("local", "flights", driver_tls("driverCaPem", https_driver.url, other.cert_pem))
        assert executor.run(request(https_driver)).result.status is SampleStatus.FAILED
        assert https_driver.authorizations == []
        # The driver's own certificate pinned: the round completes over HTTPS.
        trust.set("local", "flights", driver_tls("driverCaPem", https_driver.url, served.cert_pem))
        outcome = executor.run(request(https_driver))
        assert outcome.result.status is SampleStatus.COMPLETE, outcome.result
        assert set(https_driver.authorizations) == {f"Bearer {TOKEN}"}
        # Forgotten with the application: back to the system's CAs.
        trust.forget("local", "flights")
        assert trust.get("local", "flights") is None
    finally:
        executor.close()


def test_driver_tls_names_the_field() -> None:
    pem = issue_control_certificate("d", "local").cert_pem
    assert driver_tls("f", "https://x:1", None) is None
    with pytest.raises(ValueError, match=r"^f: a driver certificate needs an https:// driverUrl"):
        driver_tls("f", "http://x:1", pem)
    with pytest.raises(ValueError, match=r"^f: ControlTLS.ca_pem: expected a PEM certificate"):
        driver_tls("f", "https://x:1", "nope")

"""Unit tests of the control-TLS wiring in the operator's pure parts (no API server).

The certificate in the control Secret (when it is re-issued, how it is read), the driver
Pod's mount, the Spark properties only the operator sets, and the endpoint's scheme.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator import children, spark_conf
from sparkglass.operator.certificates import (
    issue_control_certificate,
    read_stored_certificate,
    reissue_reason,
    server_name,
)
from sparkglass.operator.driver_access import control_endpoint, serves_tls
from sparkglass.operator.specs import SparkApplicationSpec

CERT_FILE = "spark.sparkglass.control.tls.cert-file"
KEY_FILE = "spark.sparkglass.control.tls.key-file"


def app_spec(**extra: Any) -> SparkApplicationSpec:
    return SparkApplicationSpec.parse(
        {"image": "img:1", "mainApplicationFile": "local:///job.py", **extra}
    )


def pod(**extra: Any) -> dict[str, Any]:
    body = children.driver_pod(
        "a", "ns", "uid", app_spec(), hash="h", attempt=1, env=spark_conf.DriverEnvironment()
    )
    body["status"] = {"phase": "Running", "podIP": "10.0.0.5", **extra}
    return body


def test_secret_holds_token_certificate_and_key_and_they_read_back() -> None:
    issued = issue_control_certificate("a-driver", "ns")
    secret = children.secret("a", "ns", "uid", "tok", issued)
    assert set(secret["data"]) == {"token", "tls.crt", "tls.key", "redaction-key"}
    assert children.secret_token(secret) == "tok"
    data = children.secret_tls_data(secret)
    assert data == {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem}
    stored = read_stored_certificate(data)
    assert stored is not None and stored.has_key
    assert stored.fingerprint_sha256 == issued.fingerprint_sha256
    assert server_name("a-driver", "ns") == "a-driver.ns.svc" in stored.dns_names
    # stringData (a Secret written by hand) reads the same; garbage base64 reads as absent.
    assert children.secret_value({"stringData": {"tls.crt": "x"}}, "tls.crt") == "x"
    assert children.secret_value({"data": {"tls.crt": "%%%"}}, "tls.crt") is None


def test_reissue_only_when_missing_unreadable_foreign_or_expiring() -> None:
    now = datetime.now(UTC)
    good = issue_control_certificate("a-driver", "ns")
    fresh = {"tls.crt": good.cert_pem, "tls.key": good.key_pem}
    assert reissue_reason(fresh, "a-driver", "ns", now=now) is None  # kept as it is
    assert reissue_reason({}, "a-driver", "ns") == "no certificate yet"
    assert "no tls.key" in (reissue_reason({"tls.crt": good.cert_pem}, "a-driver", "ns") or "")
    garbage = {"tls.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
    assert "unreadable" in (reissue_reason(garbage, "a-driver", "ns") or "")
    assert "not for b-driver.ns.svc" in (reissue_reason(fresh, "b-driver", "ns") or "")
    # Within the 30-day margin, or past the expiry: replaced before the next driver starts.
    assert "expires at" in (
        reissue_reason(fresh, "a-driver", "ns", now=now + timedelta(days=340)) or ""
    )
    old = issue_control_certificate(
        "a-driver", "ns", validity=timedelta(hours=1), now=now - timedelta(hours=2)
    )
    expired = {"tls.crt": old.cert_pem, "tls.key": old.key_pem}
    assert "expires at" in (reissue_reason(expired, "a-driver", "ns") or "")


def test_driver_pod_mounts_only_cert_and_key_read_only_and_serves_https() -> None:
    body = pod()
    assert serves_tls(body)
    assert control_endpoint(body) == "https://10.0.0.5:4045"
    (volume,) = [v for v in body["spec"]["volumes"] if "secret" in v]
    assert [i["key"] for i in volume["secret"]["items"]] == ["tls.crt", "tls.key"]
    assert volume["secret"]["defaultMode"] == 0o440
    (container,) = body["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    # The token still comes from the environment, never a file or a literal.
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARKGLASS_CONTROL_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "token"
    # A Pod an older operator created (no certificate volume) speaks plain HTTP.
    body["spec"]["volumes"] = [v for v in body["spec"]["volumes"] if "secret" not in v]
    assert not serves_tls(body) and control_endpoint(body) == "http://10.0.0.5:4045"


def test_spark_conf_points_the_endpoint_at_the_mounted_files() -> None:
    conf = spark_conf.spark_properties(
        app_spec(), app="a", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    assert conf[CERT_FILE] == "/etc/sparkglass-control-tls/tls.crt"
    assert conf[KEY_FILE] == "/etc/sparkglass-control-tls/tls.key"


@pytest.mark.parametrize("key", [CERT_FILE, KEY_FILE, "spark.sparkglass.control.tls.other"])
def test_user_spark_conf_cannot_set_the_tls_files(key: str) -> None:
    with pytest.raises(ValidationError, match=rf"sparkConf: {key} is set by the operator"):
        app_spec(sparkConf={key: "/tmp/mine.pem"})
    # Even a spec that skipped validation (model_construct) cannot override them.
    spec = app_spec().model_copy(update={"spark_conf": {key: "/tmp/mine.pem"}})
    conf = spark_conf.spark_properties(
        spec, app="a", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    assert "/tmp/mine.pem" not in conf.values()
    assert conf[CERT_FILE].startswith("/etc/sparkglass-control-tls/")


def test_secret_data_is_base64_of_the_pem() -> None:
    issued = issue_control_certificate("a-driver", "ns")
    data = children.certificate_data(issued)
    assert base64.b64decode(data["tls.crt"]).decode() == issued.cert_pem

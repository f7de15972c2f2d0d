"""The driver control endpoint over real HTTP on loopback (scripted transport behind it)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from sparkglass.runtime.contract.sampling_settings import SamplingSettings, SamplingSettingsError
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling.rounds import RoundCoordinator, TapInfo

TOKEN = "s3cret-token"


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class FakeSpark:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = Conf(values)


@pytest.fixture
def settings_box():
    return {"s": SamplingSettings(enabled=True, sampling_window_ms=1000)}


@pytest.fixture
def endpoint(transport, settings_box):
    c = RoundCoordinator(
        transport, lambda: settings_box["s"], round_prefix="42", check_interval_s=0.01
    )
    for v in ("parse", "v1", "v2", "v3", "v4", "v5"):
        c.register_tap(TapInfo(v, f"k/{v}", "struct<a:int>"))
    ep = ControlEndpoint(c, ControlSettings(token=TOKEN))
    ep.start()
    yield ep
    ep.stop()
    c.close()


def client(ep: ControlEndpoint, token: str | None = TOKEN) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=ep.url, headers=headers, timeout=10)


def test_healthz_needs_no_token_everything_else_does(endpoint):
    assert client(endpoint, None).get("/healthz").json() == {"status": "ok"}
    for token in (None, "wrong", TOKEN + "x"):
        r = client(endpoint, token).get("/api/v1/vertices")
        assert r.status_code == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    r = httpx.get(endpoint.url + "/api/v1/vertices", headers={"Authorization": f"Basic {TOKEN}"})
    assert r.status_code == 401
    assert client(endpoint).get("/api/v1/vertices").json()["vertices"][0] == "parse"


def test_settings_route(endpoint):
    body = client(endpoint).get("/api/v1/settings").json()
    assert body["enabled"] is True and body["maxSampleRate"] == 100


def test_round_lifecycle(endpoint, transport, make_partition):
    http = client(endpoint)
    r = http.post("/api/v1/vertices/parse/rounds", params={"samplingWindow": "1s"})
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "PENDING" and body["roundId"] == "42-1"
    assert http.get("/api/v1/rounds/42-1").json()["status"] == "PENDING"
    transport.report("42-1", "1", [make_partition(0, 3), make_partition(1, 2)])
    transport.report("42-1", "2", [])
    deadline = time.monotonic() + 60
    while http.get("/api/v1/rounds/42-1").json()["status"] == "PENDING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    done = http.get("/api/v1/rounds/42-1").json()
    assert done["status"] == "COMPLETE" and done["totalRecordCount"] == 5
    assert done["samples"][0]["records"][0]["dataType"] == "struct<a:int>"
    only = http.get("/api/v1/rounds/42-1", params={"subtaskIndex": 1, "maxRecords": 1}).json()
    assert only["totalRecordCount"] == 1 and only["samples"][0]["subtaskIndex"] == 1


def test_too_many_rounds_is_429(endpoint):
    http = client(endpoint)
    for v in ("v1", "v2", "v3", "v4", "v5"):
        assert http.post(f"/api/v1/vertices/{v}/rounds").status_code == 202
    r = http.post("/api/v1/vertices/parse/rounds")
    assert r.status_code == 429
    assert r.json()["status"] == "FAILED"
    assert r.json()["errorCode"] == "TOO_MANY_CONCURRENT_ROUNDS"


def test_disabled_is_200_disabled(endpoint, settings_box):
    settings_box["s"] = SamplingSettings(enabled=False)
    http = client(endpoint)
    r = http.post("/api/v1/vertices/parse/rounds")
    assert r.status_code == 200 and r.json()["status"] == "DISABLED"
    assert http.get("/api/v1/vertices/parse/data-sample").json()["status"] == "DISABLED"


@pytest.mark.parametrize(
    ("method", "path", "params", "field", "allowed"),
    [
        ("GET", "/api/v1/vertices/parse/data-sample", {"maxRecords": "0"}, "maxRecords", "1–5000"),
        (
            "GET",
            "/api/v1/vertices/parse/data-sample",
            {"maxRecords": "9999"},
            "maxRecords",
            "1–5000",
        ),
        (
            "GET",
            "/api/v1/vertices/parse/data-sample",
            {"maxRecords": "ten"},
            "maxRecords",
            "1–5000",
        ),
        (
            "GET",
            "/api/v1/vertices/parse/data-sample",
            {"subtaskIndex": "-1"},
            "subtaskIndex",
            "0 or more",
        ),
        ("GET", "/api/v1/rounds/42-9", {"subtaskIndex": "x"}, "subtaskIndex", "0 or more"),
        (
            "POST",
            "/api/v1/vertices/parse/rounds",
            {"samplingWindow": "45s"},
            "samplingWindow",
            "1s–1s",
        ),
        (
            "POST",
            "/api/v1/vertices/parse/rounds",
            {"samplingWindow": "abc"},
            "samplingWindow",
            "duration",
        ),
    ],
)
def test_bad_parameters_are_400_naming_field_and_range(
    endpoint, method, path, params, field, allowed
):
    r = client(endpoint).request(method, path, params=params)
    assert r.status_code == 400
    assert r.json()["field"] == field
    assert field in r.json()["error"] and allowed in r.json()["error"]


def test_unknown_names_are_404(endpoint):
    http = client(endpoint)
    r = http.get("/api/v1/vertices/nope/data-sample")
    assert r.status_code == 404 and "parse" in r.json()["vertices"]
    assert http.post("/api/v1/vertices/nope/rounds").status_code == 404
    assert http.get("/api/v1/rounds/1-1").status_code == 404
    assert http.get("/api/v1/pipeline").status_code == 404  # no pipeline attached
    assert http.get("/api/v1/elsewhere").status_code == 404


def test_data_sample_polling(endpoint, transport, make_partition):
    http = client(endpoint)
    first = http.get("/api/v1/vertices/parse/data-sample").json()
    assert first["status"] == "PENDING"
    transport.report(first["roundId"], "1", [make_partition(0, 2)])
    transport.report(first["roundId"], "2", [])
    deadline = time.monotonic() + 60
    while (body := http.get("/api/v1/vertices/parse/data-sample").json())["status"] == "PENDING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert body["status"] == "COMPLETE" and body["roundId"] == first["roundId"]
    assert body["stale"] is False


def test_settings_from_conf_port_host_token(monkeypatch):
    monkeypatch.delenv("SPARKGLASS_CONTROL_TOKEN", raising=False)
    s = ControlSettings.from_spark(
        FakeSpark({"spark.sparkglass.control.port": "4045", "spark.sparkglass.control.token": "t"})
    )
    assert (s.host, s.port, s.token) == ("127.0.0.1", 4045, "t")
    monkeypatch.setenv("SPARKGLASS_CONTROL_TOKEN", "from-env")
    assert ControlSettings.from_spark(FakeSpark({})).token == "from-env"
    monkeypatch.delenv("SPARKGLASS_CONTROL_TOKEN")
    assert len(ControlSettings.from_spark(FakeSpark({})).token) >= 32  # generated
    with pytest.raises(SamplingSettingsError, match=r"port=70000 is out of range: allowed 0–65535"):
        ControlSettings.from_spark(FakeSpark({"spark.sparkglass.control.port": "70000"}))


def test_configured_port_is_used(transport):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = RoundCoordinator(transport, lambda: SamplingSettings(), round_prefix="1")
    ep = ControlEndpoint(c, ControlSettings(port=port, token=TOKEN))
    ep.start()
    try:
        assert ep.port == port
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        ep.stop()


def test_hardening_confs_defaults_and_values(monkeypatch):
    monkeypatch.setenv("SPARKGLASS_CONTROL_TOKEN", "t")
    s = ControlSettings.from_spark(FakeSpark({}))
    assert (s.max_body_bytes, s.connection_timeout_s, s.max_connections) == (1024, 10.0, 64)
    assert (s.tls_cert_file, s.tls_key_file, s.tls) == (None, None, False)
    s = ControlSettings.from_spark(
        FakeSpark(
            {
                "spark.sparkglass.control.max-body-bytes": "0",
                "spark.sparkglass.control.connection-timeout": "1m30s",
                "spark.sparkglass.control.max-connections": "8",
                "spark.sparkglass.control.tls.cert-file": "/etc/control/tls.crt",
                "spark.sparkglass.control.tls.key-file": "/etc/control/tls.key",
            }
        )
    )
    assert (s.max_body_bytes, s.connection_timeout_s, s.max_connections) == (0, 90.0, 8)
    assert s.tls and s.tls_key_file == "/etc/control/tls.key"
    # One peer address gets half of max-connections unless told otherwise.
    assert (s.max_connections_per_address, s.per_address_limit) == (None, 4)
    s = ControlSettings.from_spark(
        FakeSpark({"spark.sparkglass.control.max-connections-per-address": "3"})
    )
    assert (s.max_connections_per_address, s.per_address_limit) == (3, 3)
    assert ControlSettings(token="t", max_connections=1).per_address_limit == 1


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max-body-bytes", "65537", r"max-body-bytes=65537 is out of range: allowed 0–65536"),
        ("max-body-bytes", "-1", r"max-body-bytes=-1 is out of range: allowed 0–65536"),
        ("max-body-bytes", "1kb", r"max-body-bytes: expected an integer in 0–65536, got '1kb'"),
        ("max-connections", "0", r"max-connections=0 is out of range: allowed 1–1024"),
        ("max-connections", "5000", r"max-connections=5000 is out of range: allowed 1–1024"),
        (
            "max-connections-per-address",
            "0",
            r"max-connections-per-address=0 is out of range: allowed 1–1024",
        ),
        (
            "max-connections-per-address",
            "many",
            r"max-connections-per-address: expected an integer in 1–1024, got 'many'",
        ),
        ("connection-timeout", "500ms", r"connection-timeout=0.5s is out of range: allowed 1s–10m"),
        ("connection-timeout", "11m", r"connection-timeout=660.0s is out of range: allowed 1s–10m"),
        ("connection-timeout", "soon", r"connection-timeout: expected a duration"),
        ("tls.cert-file", "/c.pem", r"tls.key-file is required when .*tls.cert-file is set"),
        ("tls.key-file", "/k.pem", r"tls.cert-file is required when .*tls.key-file is set"),
    ],
)
def test_hardening_confs_out_of_range_name_key_and_range(key, value, message):
    with pytest.raises(SamplingSettingsError, match=message) as caught:
        ControlSettings.from_spark(FakeSpark({f"spark.sparkglass.control.{key}": value}))
    assert caught.value.field.startswith("spark.sparkglass.control.")


def test_unreadable_tls_files_fail_at_start_naming_the_conf(transport, tmp_path):
    c = RoundCoordinator(transport, lambda: SamplingSettings(), round_prefix="1")
    missing = str(tmp_path / "missing.pem")
    settings = ControlSettings(token=TOKEN, tls_cert_file=missing, tls_key_file=missing)
    ep = ControlEndpoint(c, settings)
    with pytest.raises(SamplingSettingsError, match=r"tls.cert-file=.*missing.pem.*cannot load"):
        ep.start()


def test_same_idempotency_key_answers_the_same_round_running_or_finished(
    endpoint, transport, make_partition
):
    """A caller that crashed between opening a round and recording its id asks again with the
    same key (the operator: the DataSample's uid) and gets that round, never a second one."""
    from sparkglass.runtime.control.client import ControlClient, ControlRejected

    with ControlClient(endpoint.url, TOKEN, timeout_s=10) as cc:
        first = cc.open_round("parse", idempotency_key="uid-1")
        assert first.status.value == "PENDING" and first.round_id == "42-1"
        assert cc.open_round("parse", idempotency_key="uid-1").round_id == "42-1"
        transport.report("42-1", "1", [make_partition(0, 2)])
        transport.report("42-1", "2", [])
        deadline = time.monotonic() + 60
        while cc.get_round("42-1").status.value == "PENDING":
            assert time.monotonic() < deadline, "round 42-1 never ended"
            time.sleep(0.05)
        # Finished: the same key still answers round 42-1, which is readable; nothing new opened.
        again = cc.open_round("parse", idempotency_key="uid-1")
        assert (again.status.value, again.round_id) == ("PENDING", "42-1")
        assert cc.get_round("42-1").status.value == "COMPLETE"
        # Another key (another DataSample) opens a new round once the vertex is free.
        assert cc.open_round("parse", idempotency_key="uid-2").round_id == "42-2"
        assert cc.open_round("parse").round_id == "42-2"  # no key: joins the running round
        with pytest.raises(ControlRejected) as bad:
            cc.open_round("parse", idempotency_key="x" * 129)
        assert bad.value.status == 400 and "idempotencyKey" in str(bad.value)
        with pytest.raises(ControlRejected):
            cc.open_round("parse", idempotency_key="has space")

"""The control endpoint's client, sync and async, against the real endpoint on loopback
(a scripted round transport behind it, no Spark)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics, QueryState, VertexMetrics
from sparkglass.runtime.contract.sample_result import DataSampleResult, ErrorCode, SampleStatus
from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from sparkglass.runtime.control.client import (
    AsyncControlClient,
    ControlClient,
    ControlRejected,
    ControlTLS,
    ControlUnavailable,
)
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling.rounds import RoundCoordinator, TapInfo

TOKEN = "client-test-token-5f2c9a"
WRONG_TOKEN = "wrong-token-77d1e0"
VERTICES = ("parse", "v1", "v2", "v3", "v4", "v5")

FLAVOURS = pytest.mark.parametrize("flavour", ["sync", "async"])


@pytest.fixture
def endpoint(transport) -> Iterator[ControlEndpoint]:
    coordinator = RoundCoordinator(
        transport,
        lambda: SamplingSettings(enabled=True, sampling_window_ms=1000),
        round_prefix="42",
        check_interval_s=0.01,
    )
    for v in VERTICES:
        coordinator.register_tap(TapInfo(v, f"k/{v}", "struct<a:int>"))

    ep = ControlEndpoint(coordinator, ControlSettings(token=TOKEN))
    ep.start()
    yield ep
    ep.stop()
    coordinator.close()


def attach_pipeline(endpoint: ControlEndpoint, describe: Callable[[], Any]) -> None:
    endpoint.coordinator.describe = describe


async def call(flavour: str, url: str, name: str, *args: Any, token: str = TOKEN, **kw: Any):
    """``name(*args, **kw)`` through a fresh client of ``flavour``."""
    if flavour == "sync":
        with ControlClient(url, token, timeout_s=5) as client:
            return getattr(client, name)(*args, **kw)
    async with AsyncControlClient(url, token, timeout_s=5) as aclient:
        return await getattr(aclient, name)(*args, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------- a round's life
def test_round_life_sync(endpoint, transport, make_partition):
    with ControlClient(endpoint.url + "/", TOKEN) as client:
        opened = client.open_round("parse", "1s")
        assert (opened.status, opened.round_id) == (SampleStatus.PENDING, "42-1")
        assert client.get_round("42-1").status is SampleStatus.PENDING
        transport.report("42-1", "1", [make_partition(0, 3), make_partition(1, 2)])
        transport.report("42-1", "2", [])
        done = client.wait_for_round("42-1", timeout_s=10, poll_interval_s=0.02)
        assert done.status is SampleStatus.COMPLETE and done.total_record_count == 5
        assert done.samples[0].records[0].data_type == "struct<a:int>"
        only = client.get_round("42-1", subtask_index=1, max_records=1)
        assert only.total_record_count == 1 and only.samples[0].subtask_index == 1


async def test_round_life_async(endpoint, transport, make_partition):
    async with AsyncControlClient(endpoint.url, TOKEN) as client:
        opened = await client.open_round("parse", sampling_window="1s")
        assert (opened.status, opened.round_id) == (SampleStatus.PENDING, "42-1")
        transport.report("42-1", "1", [make_partition(0, 3), make_partition(1, 2)])
        transport.report("42-1", "2", [])
        deadline = time.monotonic() + 10
        while (done := await client.get_round("42-1")).status is SampleStatus.PENDING:
            assert time.monotonic() < deadline, "the round never ended"
            await asyncio.sleep(0.02)
        assert done.status is SampleStatus.COMPLETE and done.total_record_count == 5
        only = await client.get_round("42-1", subtask_index=0, max_records=2)
        assert only.total_record_count == 2 and only.samples[0].subtask_index == 0


def test_data_sample_waits_for_the_round_it_triggers(endpoint, transport, make_partition):
    with ControlClient(endpoint.url, TOKEN) as client:
        first = client.data_sample("parse")
        assert first.status is SampleStatus.PENDING and first.round_id
        transport.report(first.round_id, "1", [make_partition(0, 2)])
        transport.report(first.round_id, "2", [])
        body = client.wait_for_data_sample("parse", timeout_s=10, poll_interval_s=0.02)
        assert body.status is SampleStatus.COMPLETE and body.round_id == first.round_id
        assert body.stale is False and body.total_record_count == 2


def test_wait_gives_up_at_its_deadline_with_the_pending_answer(endpoint):
    with ControlClient(endpoint.url, TOKEN) as client:
        round_id = client.open_round("parse").round_id
        assert round_id
        start = time.monotonic()
        last = client.wait_for_round(round_id, timeout_s=0.3, poll_interval_s=0.05)
        took = time.monotonic() - start
        assert last.status is SampleStatus.PENDING
        assert 0.3 <= took < 3.0
        with pytest.raises(ValueError, match=r"poll_interval_s: expected seconds > 0, got 0"):
            client.wait_for_round(round_id, timeout_s=1, poll_interval_s=0)
        with pytest.raises(ValueError, match=r"timeout_s: expected seconds >= 0, got -1"):
            client.wait_for_data_sample("parse", timeout_s=-1, poll_interval_s=0.1)


@FLAVOURS
async def test_pipeline_settings_and_vertices(flavour, endpoint):
    description = PipelineDescription.model_validate(
        {"name": "flights", "vertices": [{"name": "src", "kind": "source"}]}
    )
    attach_pipeline(endpoint, lambda: description)
    assert await call(flavour, endpoint.url, "pipeline") == description
    settings = await call(flavour, endpoint.url, "settings")
    assert settings["enabled"] is True and settings["samplingWindowMs"] == 1000
    assert SamplingSettings.model_validate(settings).sampling_window_ms == 1000
    assert await call(flavour, endpoint.url, "vertices") == list(VERTICES)


@FLAVOURS
async def test_progress_is_the_attached_pipelines_metrics(flavour, endpoint):
    with pytest.raises(ControlRejected) as none_yet:
        await call(flavour, endpoint.url, "progress")
    assert none_yet.value.status == 404 and "no pipeline attached" in str(none_yet.value)
    batches = iter(range(1, 100))

    def metrics() -> PipelineMetrics:  # a new snapshot per request, like Pipeline.metrics
        n = next(batches)
        return PipelineMetrics(
            state=QueryState.ACTIVE,
            active_queries=1,
            micro_batches=n,
            last_micro_batch_timestamp=1_700_000_000_000 + n,
            vertices={"parse": VertexMetrics(rows_last_micro_batch=7, rows_per_second=3.5)},
        )

    endpoint.coordinator.progress = metrics
    first = await call(flavour, endpoint.url, "progress")
    second = await call(flavour, endpoint.url, "progress")
    assert (first.micro_batches, second.micro_batches) == (1, 2)
    assert second.state is QueryState.ACTIVE and second.last_micro_batch_timestamp == (
        1_700_000_000_002
    )
    assert second.vertices["parse"] == VertexMetrics(rows_last_micro_batch=7, rows_per_second=3.5)
    raw = httpx.get(f"{endpoint.url}/api/v1/progress", headers={"Authorization": f"Bearer {TOKEN}"})
    assert raw.json()["vertices"]["parse"]["rowsLastMicroBatch"] == 7  # camelCase on the wire
    assert httpx.get(f"{endpoint.url}/api/v1/progress").status_code == 401


@FLAVOURS
async def test_disabled_round_is_an_answer_not_an_error(flavour, transport):
    coordinator = RoundCoordinator(
        transport, lambda: SamplingSettings(enabled=False), round_prefix="7"
    )
    coordinator.register_tap(TapInfo("parse", "k/parse", "struct<a:int>"))
    ep = ControlEndpoint(coordinator, ControlSettings(token=TOKEN))
    ep.start()
    try:
        result = await call(flavour, ep.url, "open_round", "parse")
        assert isinstance(result, DataSampleResult) and result.status is SampleStatus.DISABLED
    finally:
        ep.stop()
        coordinator.close()


# ------------------------------------------------------------------------- failures
@FLAVOURS
async def test_wrong_token_is_rejected_401_without_the_token_in_the_message(flavour, endpoint):
    with pytest.raises(ControlRejected) as caught:
        await call(flavour, endpoint.url, "vertices", token=WRONG_TOKEN)
    exc = caught.value
    assert exc.status == 401 and "bearer token" in str(exc)
    for token in (WRONG_TOKEN, TOKEN):
        assert token not in str(exc) and token not in repr(exc) and token not in str(exc.detail)


@FLAVOURS
async def test_unknown_vertex_and_round_are_rejected_404(flavour, endpoint):
    with pytest.raises(ControlRejected) as caught:
        await call(flavour, endpoint.url, "open_round", "nope")
    assert caught.value.status == 404
    assert "no vertex 'nope'" in str(caught.value) and "parse" in str(caught.value)
    # A name with a slash and a space stays one path segment.
    with pytest.raises(ControlRejected, match=r"no vertex 'no pe/x'"):
        await call(flavour, endpoint.url, "data_sample", "no pe/x")
    with pytest.raises(ControlRejected) as lost:
        await call(flavour, endpoint.url, "get_round", "1-1")
    assert lost.value.status == 404 and "no round '1-1'" in str(lost.value)
    with pytest.raises(ControlRejected) as no_pipeline:
        await call(flavour, endpoint.url, "pipeline")
    assert no_pipeline.value.status == 404


@FLAVOURS
async def test_too_many_rounds_is_transient_with_its_error_code(flavour, endpoint):
    for v in ("v1", "v2", "v3", "v4", "v5"):
        assert (await call(flavour, endpoint.url, "open_round", v)).status is SampleStatus.PENDING
    with pytest.raises(ControlUnavailable) as caught:
        await call(flavour, endpoint.url, "open_round", "parse")
    exc = caught.value
    assert exc.error_code is ErrorCode.TOO_MANY_CONCURRENT_ROUNDS and exc.status == 429
    assert exc.detail == "TOO_MANY_CONCURRENT_ROUNDS"
    assert "maximum of concurrent rounds" in str(exc)


@FLAVOURS
@pytest.mark.parametrize(
    ("name", "args", "kwargs", "field", "allowed"),
    [
        ("get_round", ("42-9",), {"max_records": 0}, "maxRecords", "1–5000"),
        ("data_sample", ("parse",), {"max_records": 9999}, "maxRecords", "1–5000"),
        ("data_sample", ("parse",), {"subtask_index": -1}, "subtaskIndex", "0 or more"),
        ("open_round", ("parse", "45s"), {}, "samplingWindow", "1s–1s"),
        ("open_round", ("parse", "abc"), {}, "samplingWindow", "duration"),
    ],
)
async def test_bad_parameter_is_rejected_400_naming_the_field(
    flavour, endpoint, name, args, kwargs, field, allowed
):
    with pytest.raises(ControlRejected) as caught:
        await call(flavour, endpoint.url, name, *args, **kwargs)
    exc = caught.value
    assert exc.status == 400 and exc.field == field
    assert field in str(exc) and allowed in str(exc)


@FLAVOURS
async def test_server_error_is_transient_with_the_drivers_words(flavour, endpoint):
    def broken() -> Any:
        raise RuntimeError("describing the pipeline broke")

    attach_pipeline(endpoint, broken)
    with pytest.raises(ControlUnavailable) as caught:
        await call(flavour, endpoint.url, "pipeline")
    exc = caught.value
    assert exc.status == 500 and exc.error_code is None
    assert exc.detail == "describing the pipeline broke"
    assert "HTTP 500: describing the pipeline broke" in str(exc)


@FLAVOURS
async def test_unreachable_port_is_transient(flavour):
    with pytest.raises(ControlUnavailable) as caught:
        await call(flavour, f"http://127.0.0.1:{free_port()}", "vertices")
    exc = caught.value
    assert exc.status is None and exc.detail is None and exc.error_code is None
    assert "unreachable: ConnectError" in str(exc)


@FLAVOURS
async def test_malformed_url_is_unreachable_not_a_crash(flavour):
    with pytest.raises(ControlUnavailable, match="unreachable"):
        await call(flavour, "", "vertices")
    with pytest.raises(ControlUnavailable, match="unreachable"):
        await call(flavour, "http://[::1", "vertices")


@FLAVOURS
async def test_timeout_is_per_request_and_transient(flavour):
    # Listening but never accepting: the connection is queued, the answer never comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ControlUnavailable, match="unreachable: ReadTimeout"):
            if flavour == "sync":
                with ControlClient(url, TOKEN, timeout_s=0.3) as client:
                    client.vertices()
            else:
                async with AsyncControlClient(url, TOKEN, timeout_s=0.3) as aclient:
                    await aclient.vertices()
        assert time.monotonic() - start < 5


class _NotTheContract(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = b'{"unexpected": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def not_the_contract() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotTheContract)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@FLAVOURS
@pytest.mark.parametrize("name", ["get_round", "pipeline", "vertices"])
async def test_a_body_outside_the_contract_is_transient(flavour, name, not_the_contract):
    args = ("42-1",) if name == "get_round" else ()
    with pytest.raises(ControlUnavailable, match="unexpected body") as caught:
        await call(flavour, not_the_contract, name, *args)
    assert caught.value.status == 200 and caught.value.detail is None


# ------------------------------------------------------------------------- construction
def test_a_given_pool_is_shared_and_left_open(endpoint):
    with httpx.Client() as pool:
        for _ in range(2):
            with ControlClient(endpoint.url, TOKEN, http=pool) as client:
                assert client.vertices()[0] == "parse"
        assert not pool.is_closed
    with ControlClient(endpoint.url, TOKEN) as owned:
        owned.vertices()
    assert owned._http.is_closed


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"connect_timeout_s": -1.0}])
def test_timeouts_must_be_positive(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=rf"{name}: expected seconds > 0"):
        ControlClient("http://127.0.0.1:1", TOKEN, **kwargs)
    with pytest.raises(ValueError, match=rf"{name}: expected seconds > 0"):
        AsyncControlClient("http://127.0.0.1:1", TOKEN, **kwargs)


def test_client_imports_without_pyspark():
    code = (
        "import sys, sparkglass.runtime.control.client; "
        "assert 'pyspark' not in sys.modules, 'pyspark was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------- TLS options
def test_tls_options_need_exactly_one_loadable_anchor(tmp_path):
    with pytest.raises(ValueError, match="exactly one of ca_file"):
        ControlTLS()
    with pytest.raises(ValueError, match="exactly one of ca_file"):
        ControlTLS(ca_file="/a.pem", ca_pem="-----BEGIN CERTIFICATE-----")
    with pytest.raises(ValueError, match=r"ControlTLS.ca_pem: expected a PEM certificate"):
        ControlTLS(ca_pem="not a certificate")
    with pytest.raises(ValueError, match=r"ControlTLS.ca_file: cannot load CA file .*nope.pem"):
        ControlTLS(ca_file=tmp_path / "nope.pem").ssl_context()
    garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    with pytest.raises(ValueError, match=r"ControlTLS.ca_pem: cannot load the pinned"):
        ControlTLS(ca_pem=garbage).ssl_context()


def test_tls_refuses_plain_urls_and_shared_pools(tmp_path):
    pem = tmp_path / "ca.pem"
    tls = ControlTLS(ca_file=pem)
    with pytest.raises(ValueError, match=r"base_url: expected an https:// URL .*'http://d:1'"):
        ControlClient("http://d:1", TOKEN, tls=tls)
    with httpx.Client() as pool, pytest.raises(ValueError, match="tls and http are exclusive"):
        ControlClient("https://d:1", TOKEN, tls=tls, http=pool)
    with pytest.raises(ValueError, match=r"base_url: expected an https:// URL"):
        AsyncControlClient("http://d:1", TOKEN, tls=tls)


def test_default_trust_is_one_verifying_context_shared_by_every_client() -> None:
    """Building httpx's default context costs ~50 ms of CPU; the operator makes a client per
    reconcile step, so all clients without a TLS anchor share one that still verifies."""
    import ssl

    from sparkglass.runtime.control.client import AsyncControlClient, ControlClient

    first = AsyncControlClient("https://driver.example:4045", "t")._protocol.verify()
    second = ControlClient("https://driver.example:4045", "t")._protocol.verify()
    assert first is second and isinstance(first, ssl.SSLContext)
    assert first.verify_mode is ssl.CERT_REQUIRED and first.check_hostname


def test_waiting_for_a_data_sample_never_ends_on_the_previous_rounds_answer() -> None:
    """``sparkglass sample`` printed the previous round (``stale``) and exited 0 when the
    driver answered with it while the new round ran. The wait for a data sample goes on
    past stale answers until a fresh one, or the deadline (then the stale one, marked)."""
    from sparkglass.runtime.control.client import _poll

    previous = DataSampleResult(status=SampleStatus.COMPLETE, round_id="r1", stale=True)
    fresh = DataSampleResult(status=SampleStatus.COMPLETE, round_id="r2")
    answers = iter([previous, previous, fresh])
    got = _poll(lambda: next(answers), 10, 0.01, fresh=True)
    assert got.round_id == "r2" and not got.stale
    start = time.monotonic()
    last = _poll(lambda: previous, 0.2, 0.02, fresh=True)
    assert last.stale and last.round_id == "r1" and time.monotonic() - start >= 0.2
    # A named round is waited for while PENDING only (stale does not apply to it).
    assert _poll(lambda: previous, 10, 0.01).round_id == "r1"

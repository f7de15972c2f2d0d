"""Attack on idempotent rounds: a key replayed for another vertex.

The driver answers a repeated ``POST .../vertices/{v}/rounds?idempotencyKey=K`` with the round
``K`` opened. It used to answer that round whatever vertex the repeat named, so a repeat for
vertex ``b`` got the round of vertex ``a``: whoever saved it (the operator, keyed by the
DataSample) would have stored and shown ``a``'s records as the sample of ``b``. Now a key is
bound to its vertex: a repeat for another vertex is refused with 400 naming
``idempotencyKey``, and opens nothing.

What held: the key the operator sends is the DataSample's uid (set by the API server, never
by a user; the spec, hence the vertex, is immutable), the service never forwards a key from a
REST request, and only holders of the control token reach the endpoint at all. The keys kept
are bounded (the last 1000). Real control endpoint over HTTP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from sparkglass.runtime.control.client import ControlClient, ControlRejected
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling import rounds
from sparkglass.runtime.sampling.rounds import RoundCoordinator, TapInfo

TOKEN = "control-token-of-the-application"


@pytest.fixture
def endpoint(transport) -> Iterator[ControlEndpoint]:
    settings = SamplingSettings(enabled=True, sampling_window_ms=1000)
    coordinator = RoundCoordinator(
        transport, lambda: settings, round_prefix="7", check_interval_s=0.01
    )
    for v in ("a", "b"):
        coordinator.register_tap(TapInfo(v, f"k/{v}", "struct<x:int>"))
    ep = ControlEndpoint(coordinator, ControlSettings(token=TOKEN))
    ep.start()
    yield ep
    ep.stop()
    coordinator.close()


def test_a_key_of_a_round_on_one_vertex_does_not_answer_for_another(endpoint):
    with ControlClient(endpoint.url, TOKEN, timeout_s=10) as cc:
        opened = cc.open_round("a", idempotency_key="uid-of-datasample-1")
        assert (opened.status.value, opened.round_id) == ("PENDING", "7-1")
        with pytest.raises(ControlRejected) as refused:
            cc.open_round("b", idempotency_key="uid-of-datasample-1")
        assert refused.value.status == 400
        assert "idempotencyKey" in str(refused.value) and "'a'" in str(refused.value)
        # Still the same round for the vertex it was opened on, and nothing opened on b.
        assert cc.open_round("a", idempotency_key="uid-of-datasample-1").round_id == "7-1"
        assert cc.open_round("b", idempotency_key="uid-of-datasample-2").round_id == "7-2"


def test_the_keys_kept_are_bounded(endpoint, monkeypatch):
    monkeypatch.setattr(rounds, "KEPT_IDEMPOTENCY_KEYS", 5)
    with ControlClient(endpoint.url, TOKEN, timeout_s=10) as cc:
        first = cc.open_round("a", idempotency_key="k-0").round_id
        for n in range(1, 8):  # join the running round of a: nothing new opened, keys kept
            assert cc.open_round("a", idempotency_key=f"k-{n}").round_id == first
        # k-7..k-3 are remembered (bound to a: refused for b); k-0 was forgotten, so it is a
        # new key for b and opens a round there.
        with pytest.raises(ControlRejected):
            cc.open_round("b", idempotency_key="k-3")
        assert cc.open_round("b", idempotency_key="k-0").round_id not in (None, first)

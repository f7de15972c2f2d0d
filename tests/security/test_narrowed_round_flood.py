"""Attack on the service's narrowed rounds: one sampler asks for many distinct filters of one
application. Each distinct request has its own rounds and lease, so before the cap every
filter started a round: one client could take every round thread of the replica
(``round_workers``) and delay every application's rounds, and the replica's per-request
end counters grew with each filter ever asked.

Against a real service over HTTP on 127.0.0.1, a scriptable driver whose rounds stay pending
for a while, and a SQLite store: past ``narrowed_rounds_per_application`` a new filter is
answered 429 with ``Retry-After`` while plain rounds still start; once a round ends its slot
is free again; and the end counters of requests nobody polls are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sparkglass.service import shared_rounds
from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from tests.service.fake_driver import TOKEN, FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(180)

URL = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
SAMPLER = "sampler-token-0123456789"
CAP = 2
#: How long the driver keeps each round pending, s: long enough for the cap to be reached.
PENDING_S = 4.0


@pytest.fixture
def driver() -> Iterator[FakeDriver]:
    fake = FakeDriver(pending_seconds=PENDING_S)
    with ServerThread(fake.app()) as server:
        fake.url = server.url
        yield fake


@pytest.fixture
def service(tmp_path: Path, driver: FakeDriver) -> Iterator[tuple[str, object]]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text(f"{SAMPLER},sampler-user,sampler\n")
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'store.db'}",
            tokens_file=tokens,
            refresh_interval_seconds=60,
            round_timeout_seconds=60,
            round_grace_seconds=0,
            poll_interval_seconds=0.05,
            narrowed_rounds_per_application=CAP,
        )
    )
    register_local_application(app.state.sparkglass.sessions, "flights", driver.url, TOKEN)
    with ServerThread(app) as server:
        yield server.url, app.state.sparkglass.coordinator
    app.state.sparkglass.sessions.kw["bind"].dispose()


def _poll(base: str, params: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as c:
        return c.get(URL, headers={"Authorization": f"Bearer {SAMPLER}"}, params=params)


def test_distinct_filters_past_the_cap_are_answered_429(
    service: tuple[str, object], driver: FakeDriver
) -> None:
    base, coordinator = service
    started = [_poll(base, {"filter": f"dep_delay > {i}"}) for i in range(CAP)]
    assert [r.status_code for r in started] == [200] * CAP
    assert all(r.json()["status"] == "PENDING" for r in started)
    refused = _poll(base, {"filter": "dep_delay > 99"})
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == "2"
    assert "narrowed_rounds_per_application" in refused.json()["detail"]
    assert len(driver.opened) == CAP  # the refused filter never reached the driver
    # Plain rounds are not narrowed ones: one per vertex and interval, never capped.
    assert _poll(base, {}).status_code == 200
    # A poll of a request already running is an answer, not a new round.
    assert _poll(base, {"filter": "dep_delay > 0"}).status_code == 200
    # Once a round ended its slot is free: the refused filter starts.
    deadline = time.monotonic() + 60
    while (again := _poll(base, {"filter": "dep_delay > 99"})).status_code == 429:
        assert time.monotonic() < deadline, "no slot came free"
        time.sleep(0.2)
    assert again.status_code == 200 and again.json()["status"] == "PENDING"
    assert coordinator.wait_idle(60)  # type: ignore[attr-defined]


def test_end_counters_of_requests_nobody_polls_are_dropped(
    service: tuple[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, coordinator = service
    for i in range(CAP):
        assert _poll(base, {"filter": f"dep_delay > {i}"}).status_code == 200
    assert coordinator.wait_idle(60)  # type: ignore[attr-defined]
    ended = coordinator._rounds_ended  # type: ignore[attr-defined]
    assert len(ended) == CAP  # one per request this replica saw end
    # Nothing holds an answer of them once their answers expired; the next sweep drops them.
    monkeypatch.setattr(shared_rounds, "ENDED_SWEEP_S", 0.0)
    coordinator._fresh.clear()  # type: ignore[attr-defined]
    assert _poll(base, {"filter": "dep_delay > 50"}).status_code == 200
    assert ended == {}, ended
    assert coordinator.wait_idle(60)  # type: ignore[attr-defined]
    assert len(ended) == 1  # only the request that ran since

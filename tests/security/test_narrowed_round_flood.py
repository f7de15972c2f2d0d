"""Attack on the service's narrowed rounds: one sampler asks for many distinct filters of one
application. Each distinct request has its own rounds and lease, so before the cap every
filter started a round: one client could take every round thread of the replica
(``round_workers``) and delay every application's rounds, and the replica's per-request
end counters grew with each filter ever asked.

Against a real service over HTTP on 127.0.0.1, a scriptable driver whose rounds stay pending
for a while, and a SQLite store: past ``narrowed_rounds_per_application`` a new filter is
answered 429 with ``Retry-After`` while plain rounds still start; once a round ends its slot
is free again; and the end counters of requests nobody polls are dropped. Many applications
together stop at ``narrowed_rounds_per_replica``, so their narrowed rounds never take every
round thread; and a request with an older result gets it stale, not 429.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.runtime.contract.round_request import round_request
from sparkglass.service import shared_rounds
from sparkglass.service.app import create_app
from sparkglass.service.auth import Principal
from sparkglass.service.catalog import register_local_application
from sparkglass.service.lookups import application_or_404
from sparkglass.service.settings import Settings
from tests.service.fake_driver import TOKEN, FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(180)

URL = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
SAMPLER = "sampler-token-0123456789"
CAP = 2
#: How long the driver keeps each round pending, s: long enough for the cap to be reached.
PENDING_S = 4.0

#: Who reads the application in the white-box calls below (a local one: any reader).
ADMIN = Principal(user="admin", role="admin")


@pytest.fixture
def driver() -> Iterator[FakeDriver]:
    fake = FakeDriver(pending_seconds=PENDING_S)
    with ServerThread(fake.app()) as server:
        fake.url = server.url
        yield fake


Service = tuple[str, Any]


@pytest.fixture
def start_service(tmp_path: Path, driver: FakeDriver) -> Iterator[Callable[..., Service]]:
    """Starts the service (its URL and state) with the test's settings, and two more
    applications on the same driver (``flights-2``, ``flights-3``); stops it at the end."""
    stack = contextlib.ExitStack()

    def start(**overrides: Any) -> Service:
        tokens = tmp_path / "tokens.csv"
        tokens.write_text(f"{SAMPLER},sampler-user,sampler\n")
        settings: dict[str, Any] = {
            "database_url": f"sqlite:///{tmp_path / 'store.db'}",
            "tokens_file": tokens,
            "refresh_interval_seconds": 60,
            "round_timeout_seconds": 60,
            "round_grace_seconds": 0,
            "poll_interval_seconds": 0.05,
            "narrowed_rounds_per_application": CAP,
            **overrides,
        }
        app = create_app(Settings(**settings))
        for name in ("flights", "flights-2", "flights-3"):
            register_local_application(app.state.sparkglass.sessions, name, driver.url, TOKEN)
        stack.callback(app.state.sparkglass.sessions.kw["bind"].dispose)
        server = stack.enter_context(ServerThread(app))
        return server.url, app.state.sparkglass

    with stack:
        yield start


@pytest.fixture
def service(start_service: Callable[..., Service]) -> Service:
    return start_service()


def _poll(base: str, params: dict[str, str], app: str = "flights") -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as c:
        return c.get(
            URL.replace("/flights/", f"/{app}/"),
            headers={"Authorization": f"Bearer {SAMPLER}"},
            params=params,
        )


def test_distinct_filters_past_the_cap_are_answered_429(
    service: Service, driver: FakeDriver
) -> None:
    base, state = service
    coordinator = state.coordinator
    started = [_poll(base, {"filter": f"dep_delay > {i}"}) for i in range(CAP)]
    assert [r.status_code for r in started] == [200] * CAP
    assert all(r.json()["status"] == "PENDING" for r in started)
    refused = _poll(base, {"filter": "dep_delay > 99"})
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"] == "2"
    assert "narrowed_rounds_per_application" in refused.json()["detail"]
    assert len(driver.opened) == CAP  # the refused filter never reached the driver
    assert len(driver.checked) == CAP  # nor was it checked there: it could not start
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
    assert coordinator.wait_idle(60)


def test_end_counters_of_requests_nobody_polls_are_dropped(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, state = service
    coordinator = state.coordinator
    for i in range(CAP):
        assert _poll(base, {"filter": f"dep_delay > {i}"}).status_code == 200
    assert coordinator.wait_idle(60)
    ended = coordinator._rounds_ended
    assert len(ended) == CAP  # one per request this replica saw end
    # Nothing holds an answer of them once their answers expired; the next sweep drops them.
    monkeypatch.setattr(shared_rounds, "ENDED_SWEEP_S", 0.0)
    coordinator._fresh.clear()
    assert _poll(base, {"filter": "dep_delay > 50"}).status_code == 200
    assert ended == {}, ended
    assert coordinator.wait_idle(60)
    assert len(ended) == 1  # only the request that ran since


def test_applications_together_stop_at_the_replica_s_cap(
    start_service: Callable[..., Service], driver: FakeDriver
) -> None:
    """Each application under its own cap, yet together they would take every round thread:
    past ``narrowed_rounds_per_replica`` any application's new filter is answered 429,
    naming that cap, and plain rounds still start."""
    base, state = start_service(narrowed_rounds_per_replica=3)
    coordinator = state.coordinator
    assert [_poll(base, {"filter": f"dep_delay > {i}"}).status_code for i in range(2)] == [200] * 2
    assert _poll(base, {"filter": "dep_delay > 0"}, app="flights-2").status_code == 200
    refused = _poll(base, {"filter": "dep_delay > 1"}, app="flights-3")
    assert refused.status_code == 429, refused.text
    assert "narrowed_rounds_per_replica" in refused.json()["detail"]
    assert refused.headers["Retry-After"] == "2"
    assert len(driver.opened) == 3
    assert _poll(base, {}, app="flights-3").status_code == 200
    assert coordinator.wait_idle(60)


def test_a_request_with_an_older_result_gets_it_stale_when_no_slot_is_free(
    start_service: Callable[..., Service], driver: FakeDriver
) -> None:
    """A sampler whose request has a result older than the refresh interval is answered with
    it (``stale``), as a viewer is, when the cap is reached; the service does not ask whether
    it may start a round it could not start (in Kubernetes mode that is a
    SubjectAccessReview)."""
    # The service's refresh interval rules only when the driver leaves its own out (a real
    # driver states it: see FakeDriver.states_every_setting).
    driver.states_every_setting = False
    base, state = start_service(refresh_interval_seconds=1)
    coordinator = state.coordinator
    driver.pending_seconds = 0.05
    older = {"filter": "dep_delay > 99"}
    assert _poll(base, older).status_code == 200
    assert coordinator.wait_idle(60)
    driver.pending_seconds = PENDING_S
    assert [_poll(base, {"filter": f"dep_delay > {i}"}).status_code for i in range(CAP)] == [
        200
    ] * CAP
    deadline = time.monotonic() + 30
    while (answer := _poll(base, older)).status_code == 200 and not answer.json().get("stale"):
        assert time.monotonic() < deadline, "the older result did not age past the interval"
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "COMPLETE" and answer.json()["stale"] is True
    assert len(driver.opened) == 1 + CAP  # no round started for it
    # Behind the route: with no slot free, whether the caller may trigger is never asked.
    asked: list[str] = []

    def may_trigger() -> bool:
        asked.append("asked")
        return True

    app = application_or_404(state, "local", "flights", principal=ADMIN)
    direct = coordinator.poll(
        app,
        "parse",
        actor="sampler-user",
        may_trigger=may_trigger,
        narrowing=round_request(None, older["filter"], None, None),
    )
    assert direct.result.stale is True and direct.started_round is None
    assert asked == []
    assert coordinator.wait_idle(60)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"narrowed_rounds_per_application": 5, "narrowed_rounds_per_replica": 4},
            "narrowed_rounds_per_application=5 is out of range: allowed 1 to "
            "narrowed_rounds_per_replica \\(4\\)",
        ),
        (
            {"narrowed_rounds_per_replica": 8, "round_workers": 8},
            "narrowed_rounds_per_replica=8 is out of range: allowed 1 to round_workers - 1 \\(7\\)",
        ),
    ],
)
def test_caps_that_would_let_one_application_or_narrowed_rounds_take_everything_are_refused(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """One application may not hold every narrowed slot, nor narrowed rounds every round
    thread: such settings are refused at start, naming the field and its range."""
    with pytest.raises(ValueError, match=message):
        Settings(database_url=f"sqlite:///{tmp_path / 'store.db'}", **settings)

"""One run is one run: an application registered again with another
driver (a restart) begins a new run, whose polls never answer with a round of the earlier
run; applications whose driver does not answer are marked in the listings, which probe
drivers cheaply (cached, bounded) and never on a poll's path. On SQLite and PostgreSQL."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, update

from sparkglass.service.catalog import register_local_application
from sparkglass.service.driver_liveness import DriverLiveness
from sparkglass.service.store import make_engine, migrate, open_store
from sparkglass.service.store.orm import Application
from sparkglass.service.store.repository import get_application, latest_finished_round
from tests.support.data_sample_api import BASE, poll_until_done, sample_url

from .conftest import ServiceFactory, auth
from .fake_driver import PIPELINE, TOKEN, FakeDriver, ServerThread

APPS = "/api/v1/namespaces/local/applications"


@pytest.fixture
def second_driver() -> Iterator[FakeDriver]:
    """Another driver of the same pipeline (another port): ``flights`` restarted."""
    driver = FakeDriver()
    with ServerThread(driver.app()) as server:
        driver.url = server.url
        yield driver


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a driver that ended): connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def register(client: TestClient, url: str, **extra: Any) -> dict[str, Any]:
    r = client.put(
        BASE, json={"driverUrl": url, "driverToken": TOKEN, **extra}, headers=auth("admin")
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def history(client: TestClient, vertex: str) -> list[dict[str, Any]]:
    r = client.get(f"{BASE}/vertices/{vertex}/rounds", headers=auth("viewer"))
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def age_driver_sighting(client: TestClient, name: str, by_ms: int = 600_000) -> None:
    """Make the store say ``name``'s driver was last seen ``by_ms`` ago (an application an
    earlier run registered), so that the next listing probes it."""
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    with state.sessions.begin() as session:
        session.execute(
            update(Application)
            .where(Application.name == name)
            .values(driver_seen_at=Application.driver_seen_at - by_ms)
        )
    state.applications.invalidate()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def listing(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get(APPS, headers=auth("viewer"))
    assert r.status_code == 200, r.text
    return {a["name"]: a for a in r.json()}


# ------------------------------------------------------------------------------- runs


def test_a_restarted_driver_never_answers_with_the_earlier_run_s_round(
    second_driver: FakeDriver, make_service: ServiceFactory
) -> None:
    client = make_service()
    first = poll_until_done(client, "parse")
    assert first["status"] == "COMPLETE"

    detail = register(client, second_driver.url)  # the application restarted elsewhere

    # Within the refresh interval (60 s) the earlier round would have been the answer: the
    # new run has no round yet, so the first poll starts one and answers PENDING.
    answer = client.get(sample_url("parse"), headers=auth("sampler")).json()
    assert answer["roundId"] != first["roundId"]
    assert answer["status"] == "PENDING" and answer["stale"] is False
    assert detail["run"] == 2 and detail["driverState"] == "live"
    done = poll_until_done(client, "parse")
    assert done["roundId"] not in (None, first["roundId"])
    assert second_driver.started.get("parse") == 1  # asked of the new driver

    rounds = {r["roundId"]: r for r in history(client, "parse")}
    assert rounds[first["roundId"]]["run"] == 1 and rounds[first["roundId"]]["earlierRun"]
    assert rounds[done["roundId"]]["run"] == 2 and not rounds[done["roundId"]]["earlierRun"]


def test_a_round_the_earlier_driver_left_running_is_not_waited_for(
    second_driver: FakeDriver, make_service: ServiceFactory
) -> None:
    # "stuck" rounds never end: the earlier run's would be the running round (and hold the
    # vertex's lease) until it times out.
    client = make_service(round_timeout_seconds=2.0)  # the fixture waits them out
    stuck = client.get(sample_url("stuck"), headers=auth("sampler")).json()
    assert stuck["status"] == "PENDING" and stuck["roundId"]
    register(client, second_driver.url)
    again = client.get(sample_url("stuck"), headers=auth("sampler")).json()
    assert again["status"] == "PENDING" and again["roundId"] not in (None, stuck["roundId"])
    wait_for(lambda: second_driver.started.get("stuck") == 1, "the new driver was asked")


def test_the_same_driver_registered_again_is_the_same_run(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    first = poll_until_done(client, "parse")
    assert register(client, fake_driver.url)["run"] == 1  # e.g. `sparkglass serve` restarted
    again = client.get(sample_url("parse"), headers=auth("viewer")).json()
    assert again["roundId"] == first["roundId"] and again["stale"] is False
    # Its start stated now, and the same again: still the same run.
    assert register(client, fake_driver.url, driverStartedAt=1_700_000_000_000)["run"] == 1
    assert register(client, fake_driver.url, driverStartedAt=1_700_000_000_000)["run"] == 1


def test_a_driver_with_the_same_address_and_token_but_another_start_is_a_new_run(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    # A driver with a configured port and token listens where the earlier one did.
    client = make_service()
    first = poll_until_done(client, "parse")
    detail = register(client, fake_driver.url, driverStartedAt=1_700_000_000_000)
    assert detail["run"] == 1 and detail["runStartedAt"] is not None
    restarted = register(client, fake_driver.url, driverStartedAt=1_700_000_999_000)
    assert restarted["run"] == 2 and restarted["runStartedAt"] == 1_700_000_999_000
    answer = client.get(sample_url("parse"), headers=auth("sampler")).json()
    assert answer["roundId"] != first["roundId"] and answer["status"] == "PENDING"


def test_driver_started_at_is_checked_naming_the_field(make_service: ServiceFactory) -> None:
    client = make_service()
    r = client.put(
        BASE,
        json={"driverUrl": "http://127.0.0.1:9", "driverToken": TOKEN, "driverStartedAt": -1},
        headers=auth("admin"),
    )
    assert r.status_code == 422 and "driverStartedAt" in r.json()["detail"]


def test_another_replica_drops_its_cached_answer_of_the_earlier_run(
    second_driver: FakeDriver, make_service: ServiceFactory
) -> None:
    # Two service processes on one store: the one that did not see the registration holds
    # the earlier run's fresh answer in memory, and must not serve it to the new run.
    client = make_service()
    other = make_service(register=False)
    first = poll_until_done(other, "parse")
    cached = other.get(sample_url("parse"), headers=auth("viewer")).json()
    assert cached["roundId"] == first["roundId"]
    register(client, second_driver.url)
    other.app.state.sparkglass.applications.invalidate()  # type: ignore[attr-defined]
    answer = other.get(sample_url("parse"), headers=auth("sampler")).json()
    assert answer["roundId"] != first["roundId"]


# ------------------------------------------------------------------------------- liveness


def test_applications_whose_driver_ended_are_marked_with_when_last_seen(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    register_local_application(
        state.sessions, "gone", closed_port_url(), TOKEN, description=PIPELINE, sampling={}
    )
    age_driver_sighting(client, "gone")
    age_driver_sighting(client, "flights")
    with state.sessions() as session:
        gone = get_application(session, "local", "gone")
        assert gone is not None and gone.driver_seen_at is not None
        seen = gone.driver_seen_at
    apps = listing(client)
    assert apps["gone"]["driverState"] == "ended" and apps["gone"]["live"] is False
    assert apps["gone"]["lastSeenAt"] == seen
    assert apps["flights"]["driverState"] == "live" and apps["flights"]["live"] is True
    # The listing of all namespaces says the same; the detail says what is known, unprobed.
    everywhere = client.get("/api/v1/applications", headers=auth("viewer")).json()
    assert {a["name"]: a["driverState"] for a in everywhere} == {"flights": "live", "gone": "ended"}
    detail = client.get(f"{APPS}/gone", headers=auth("viewer")).json()
    assert detail["driverState"] == "ended" and detail["lastSeenAt"] == seen


def test_probes_are_cached_and_never_made_by_a_poll(
    make_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_service()
    drivers = client.app.state.sparkglass.coordinator.drivers  # type: ignore[attr-defined]
    probed: list[str] = []
    real = DriverLiveness._probe

    def counted(self: DriverLiveness, target: Any, *args: Any) -> None:
        probed.append(target.name)
        real(self, target, *args)

    monkeypatch.setattr(DriverLiveness, "_probe", counted)
    age_driver_sighting(client, "flights")
    poll_until_done(client, "parse")
    for _ in range(5):
        assert client.get(sample_url("parse"), headers=auth("viewer")).status_code == 200
    assert probed == []  # polls never probe
    for _ in range(3):
        assert listing(client)["flights"]["driverState"] == "live"
    assert probed == ["flights"]  # one probe per TTL (10 s), however many listings
    assert drivers.known(_app(client, "flights")).state.value == "live"


def _app(client: TestClient, name: str) -> Application:
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    with state.sessions() as session:
        app = get_application(session, "local", name)
        assert app is not None
        return app


def test_a_driver_that_does_not_answer_delays_a_listing_a_bounded_time(
    make_service: ServiceFactory,
) -> None:
    # A socket that accepts connections (the kernel does) but never answers them.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        client = make_service()
        state = client.app.state.sparkglass  # type: ignore[attr-defined]
        state.coordinator.drivers = DriverLiveness(state.sessions, probe_timeout_s=1.0, wait_s=0.2)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        register_local_application(
            state.sessions, "silent", url, TOKEN, description=PIPELINE, sampling={}
        )
        age_driver_sighting(client, "silent")
        started = time.monotonic()
        assert listing(client)["silent"]["driverState"] == "unknown"  # probe under way
        assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + 10
        while (state_now := listing(client)["silent"]["driverState"]) == "unknown":
            assert time.monotonic() < deadline, "the probe never timed out"
            time.sleep(0.1)
        assert state_now == "ended"
    finally:
        silent.close()


def test_a_new_registration_makes_an_ended_application_live_again(
    second_driver: FakeDriver, make_service: ServiceFactory
) -> None:
    client = make_service()
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    register_local_application(
        state.sessions, "flights", closed_port_url(), TOKEN, description=PIPELINE, sampling={}
    )
    age_driver_sighting(client, "flights")
    assert listing(client)["flights"]["driverState"] == "ended"
    register(client, second_driver.url)
    assert listing(client)["flights"]["driverState"] == "live"


# ------------------------------------------------------------------------------- the store


def test_migration_0009_puts_every_earlier_round_in_the_first_run(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine, "0008")
    assert "run" not in {c["name"] for c in inspect(engine).get_columns("rounds")}
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO applications (namespace, name, driver_url, edges, sampling, "
            "registered_at, updated_at) VALUES ('local', 'flights', 'http://127.0.0.1:4041', "
            "'[]', '{}', 1000, 2000)"
        )
        conn.exec_driver_sql(
            "INSERT INTO applications (namespace, name, edges, sampling, registered_at, "
            "updated_at) VALUES ('team-a', 'etl', '[]', '{}', 3000, 4000)"
        )
        conn.exec_driver_sql(
            "INSERT INTO rounds (id, application_id, vertex, status, started_at, end_timestamp,"
            " total_record_count, total_truncated, dropped_by_contention, dropped_by_rate_limit,"
            " failed_subtasks, request_key) VALUES ('r1', 1, 'parse', 'COMPLETE', 5, 6, 0, "
            "false, 0, 0, '[]', '')"
        )
    engine.dispose()
    sessions = open_store(db_url)  # migrates to head
    try:
        with sessions() as session:
            local = get_application(session, "local", "flights")
            etl = get_application(session, "team-a", "etl")
            assert local is not None and etl is not None
            assert (local.run, local.run_started_at, local.driver_seen_at) == (1, 1000, 2000)
            assert (etl.run, etl.run_started_at, etl.driver_seen_at) == (1, None, None)
            latest = latest_finished_round(session, local.id, "parse", run=local.run)
            assert latest is not None and (latest.id, latest.run) == ("r1", 1)
    finally:
        sessions.kw["bind"].dispose()

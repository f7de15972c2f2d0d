"""Rounds with a kind, filter, columns or expectation go through the service's shared rounds:
stored, shared across replicas, one per request per refresh interval, apart from plain
rounds; the driver checks a request before a round starts (a bad filter is a 422 at once)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from sparkglass.runtime.contract.round_request import round_request
from sparkglass.service.store import get_application, list_rounds
from tests.support.service_replicas import replicas

from .conftest import TOKENS
from .fake_driver import FakeDriver, ServerThread

URL = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"
FILTER = "carrier = 'UA' AND dep_delay > 30"


def _get(base: str, role: str, params: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as c:
        return c.get(URL, headers={"Authorization": f"Bearer {TOKENS[role]}"}, params=params)


def _until_done(base: str, params: dict[str, str]) -> dict[str, Any]:
    """Poll as a sampler until the answer is a finished, current round (60 s at most)."""
    deadline = time.monotonic() + 60
    while True:
        answer = _get(base, "sampler", params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        if body["status"] != "PENDING" and not body.get("stale"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def test_a_filtered_round_is_stored_and_shared_across_replicas(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    params = {"filter": FILTER, "columns": "carrier,dep_delay"}
    apps = replicas(db_url, tokens_file, fake_driver, refresh=60)
    opened_before = len(fake_driver.opened)
    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        first = _until_done(a.url, params)
        assert first["status"] == "COMPLETE", first
        # The round reached the driver with the request, once.
        opened = fake_driver.opened[opened_before:]
        assert opened == [{"filter": FILTER, "columns": "carrier,dep_delay"}], opened
        # The other replica answers the same round from the shared store: no second round.
        second = _get(b.url, "sampler", params).json()
        assert second["roundId"] == first["roundId"] and not second.get("stale"), second
        # A viewer may read it too, as a plain round's result: it is fresh.
        assert _get(b.url, "viewer", params).json()["roundId"] == first["roundId"]
        # The plain poll is another request: its own round, not the filtered one.
        plain = _until_done(b.url, {})
        assert plain["roundId"] != first["roundId"]
        # Another filter is another request again.
        other = _until_done(a.url, {"filter": "dep_delay > 60"})
        assert other["roundId"] not in (first["roundId"], plain["roundId"])
        for app in apps:
            assert app.state.sparkglass.coordinator.wait_idle(15)
    assert len(fake_driver.opened) - opened_before == 3
    key = round_request(None, FILTER, "carrier,dep_delay", None).key()
    with apps[0].state.sparkglass.sessions() as s:
        flights = get_application(s, "local", "flights")
        assert flights is not None
        by_id = {r.id: r for r in list_rounds(s, flights.id, "parse")}
    assert by_id[first["roundId"]].request_key == key
    assert by_id[plain["roundId"]].request_key == ""
    for app in apps:
        app.state.sparkglass.sessions.kw["bind"].dispose()


def test_a_bad_filter_is_refused_before_any_round_starts(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    apps = replicas(db_url, tokens_file, fake_driver, refresh=60)
    opened_before = len(fake_driver.opened)
    with ServerThread(apps[0]) as a:
        bad = _get(a.url, "sampler", {"filter": "no_such_column > 1"})
        assert bad.status_code == 422, bad.text
        assert "filter" in bad.text and "no_such_column" in bad.text
        # A viewer may not start one: 403, and the driver is not even asked.
        checked_before = len(fake_driver.checked)
        refused = _get(a.url, "viewer", {"filter": "dep_delay > 5"})
        assert refused.status_code == 403, refused.text
        assert len(fake_driver.checked) == checked_before
        assert apps[0].state.sparkglass.coordinator.wait_idle(15)
    assert len(fake_driver.opened) == opened_before
    with apps[0].state.sparkglass.sessions() as s:
        flights = get_application(s, "local", "flights")
        assert flights is not None
        assert list_rounds(s, flights.id, "parse") == []
    for app in apps:
        app.state.sparkglass.sessions.kw["bind"].dispose()


def test_a_check_that_breaks_does_not_refuse_the_sampler(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    """Only the driver's 400 refuses a request: a check that breaks (a 5xx, no answer) lets
    the round start, so a sampler gets what a viewer would, never a 502 from the check."""
    apps = replicas(db_url, tokens_file, fake_driver, refresh=60)
    params = {"filter": "dep_delay > 1 OR 'check_breaks' = ''"}
    with ServerThread(apps[0]) as a:
        first = _get(a.url, "sampler", params)
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "PENDING"
        assert _until_done(a.url, params)["status"] == "COMPLETE"
        assert apps[0].state.sparkglass.coordinator.wait_idle(15)
    for app in apps:
        app.state.sparkglass.sessions.kw["bind"].dispose()

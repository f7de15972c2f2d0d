"""A round turning over under many open pages: polls while a round runs are answered from
memory, the round's end is seen at once by the replica that ran it, and a new body is built
once however many pages ask for it at the same moment."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from sparkglass.service import shared_rounds
from sparkglass.service.auth import Principal
from sparkglass.service.lookups import application_or_404
from sparkglass.service.shared_rounds import INTERIM_ANSWER_S, answer_key
from sparkglass.service.store import repository
from tests.support.data_sample_api import poll_until_done, sample_url
from tests.support.service_replicas import replicas

from .conftest import ServiceFactory, auth
from .fake_driver import FakeDriver, ServerThread

#: Who reads the application in the white-box calls below (a local one: any reader).
ADMIN = Principal(user="admin", role="admin")


@contextmanager
def statements(engine: Engine, *needles: str) -> Iterator[list[str]]:
    """SQL statements run on ``engine`` meanwhile that contain every one of ``needles``."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if all(n in statement for n in needles):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_polls_during_a_round_are_answered_from_memory_and_its_end_is_seen_at_once(
    make_service: ServiceFactory, settings_left_to_the_service: FakeDriver
) -> None:
    client = make_service(refresh_interval_seconds=1.0)
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    first = poll_until_done(client, "slow")  # rounds of "slow" stay PENDING for 2 s
    deadline = time.monotonic() + 60
    while True:  # the result expires after 1 s; the next poll starts a round
        body = client.get(sample_url("slow"), headers=auth("sampler")).json()
        if body["stale"]:
            break
        assert time.monotonic() < deadline, "no round started after the refresh interval"
        time.sleep(0.05)
    assert body["roundId"] == first["roundId"]
    engine = state.sessions.kw["bind"]
    with statements(engine, "FROM rounds") as reads:
        started = time.monotonic()
        answers = [client.get(sample_url("slow"), headers=auth("viewer")).json() for _ in range(30)]
        elapsed = time.monotonic() - started
    # Without the interim answer every one of the 30 polls reads two round queries.
    assert len(reads) <= 2 * (elapsed / INTERIM_ANSWER_S + 2), (len(reads), elapsed)
    running = [a for a in answers if a["stale"]]
    assert running and all(a["roundId"] == first["roundId"] for a in running)
    # The replica that ran the round drops the interim answer when it ends: the poll right
    # after has the new result, without waiting out INTERIM_ANSWER_S. Pages keep polling
    # meanwhile, so an interim answer is always fresh when the round ends.
    stop = threading.Event()

    def page() -> None:
        while not stop.is_set():
            client.get(sample_url("slow"), headers=auth("viewer"))
            time.sleep(0.05)

    poller = threading.Thread(target=page)
    poller.start()
    try:
        assert state.coordinator.wait_idle(60)
    finally:
        stop.set()
        poller.join()
    after = client.get(sample_url("slow"), headers=auth("viewer")).json()
    assert after["roundId"] != first["roundId"] and after["status"] == "COMPLETE", after


def test_a_stale_answer_read_before_the_round_ended_is_not_kept_after_it(
    make_service: ServiceFactory,
    monkeypatch: pytest.MonkeyPatch,
    settings_left_to_the_service: FakeDriver,
) -> None:
    # The interleaving a loaded replica can produce: a poll reads "round running" from the
    # store, the round ends (and drops the interim answer), then the poll would cache what
    # it read. White-box: only a stand-in store read can put the round's end in between.
    # 5 s: the round is still running for the two polls below (milliseconds apart), and it
    # times out before the fixture's teardown stops waiting for rounds (10 s).
    client = make_service(round_timeout_seconds=5.0)
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    coordinator = state.coordinator
    app = application_or_404(state, "local", "flights", principal=ADMIN)
    key = answer_key(app, "stuck", "")  # a plain round of "stuck": it runs until it times out
    real_running_round = repository.running_round

    def running_then_ended(*args: Any, **kwargs: Any) -> Any:
        row = real_running_round(*args, **kwargs)
        coordinator._drop_interim(key)  # the round ends right after this read
        return row

    monkeypatch.setattr(shared_rounds.repository, "running_round", running_then_ended)
    answer = coordinator.poll(app, "stuck", actor="sampler-user", may_trigger=lambda: True)
    assert answer.started_round and answer.result.status.value == "PENDING"
    assert coordinator.fresh_answer(app, "stuck") is None  # nothing kept past the end
    monkeypatch.undo()
    # The same poll without the round ending in between keeps its answer.
    again = coordinator.poll(app, "stuck", actor="viewer-user", may_trigger=lambda: False)
    assert again.result.round_id == answer.started_round
    kept = coordinator.fresh_answer(app, "stuck")
    assert kept is not None and kept.result.round_id == answer.started_round


def test_a_round_that_ends_between_a_poll_s_reads_answers_a_viewer(
    make_service: ServiceFactory, settings_left_to_the_service: FakeDriver
) -> None:
    # A poll reads the store twice: is a round running, and what did the last one find.
    # Each read has its own snapshot (SQLite's driver begins no transaction for a read,
    # PostgreSQL reads committed), so the round may end in between; a viewer, who may not
    # start one, must then get its result, not 403 as if no round had ever run. The round's
    # end is put between the two reads by holding the poll after its first one.
    client = make_service()
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    coordinator = state.coordinator
    app = application_or_404(state, "local", "flights", principal=ADMIN)
    started = coordinator.poll(app, "slow", actor="sampler-user", may_trigger=lambda: True)
    assert started.started_round  # rounds of "slow" stay PENDING for 2 s
    coordinator._drop_interim(answer_key(app, "slow", ""))
    engine = state.sessions.kw["bind"]
    poller = threading.get_ident()
    held: list[str] = []

    def round_ends_after_the_first_read(conn: Any, cursor: Any, statement: str, *a: Any) -> None:
        if threading.get_ident() != poller or "FROM rounds" not in statement or held:
            return
        held.append(statement)
        deadline = time.monotonic() + 60
        while True:
            with state.sessions() as session:
                row = repository.get_round(session, started.started_round)
                if row is not None and row.status != "PENDING":
                    return
            assert time.monotonic() < deadline, "the round did not end"
            time.sleep(0.05)

    event.listen(engine, "after_cursor_execute", round_ends_after_the_first_read)
    try:
        answer = coordinator.poll(app, "slow", actor="viewer-user", may_trigger=lambda: False)
    finally:
        event.remove(engine, "after_cursor_execute", round_ends_after_the_first_read)
    assert held, "the poll read no round"
    assert answer.started_round is None
    assert (answer.result.round_id, answer.result.status.value) == (
        started.started_round,
        "COMPLETE",
    )


def test_forgetting_an_application_drops_its_answers(make_service: ServiceFactory) -> None:
    client = make_service()
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    poll_until_done(client, "parse")
    app = application_or_404(state, "local", "flights", principal=ADMIN)
    assert state.coordinator.fresh_answer(app, "parse") is not None
    state.coordinator.forget(app.id)
    assert state.coordinator.fresh_answer(app, "parse") is None


def test_pages_asking_for_a_new_body_at_once_read_its_records_once(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    first, second = replicas(db_url, tokens_file, fake_driver, refresh=60)
    pages = 24
    barrier = threading.Barrier(pages, timeout=60)
    with ServerThread(first) as a, ServerThread(second) as b:
        with httpx.Client(base_url=a.url, timeout=60) as http:
            deadline = time.monotonic() + 60
            while True:  # a round of "many" (5 subtasks of 1,000 records) through replica a
                done = http.get(sample_url("many"), headers=auth("sampler")).json()
                if done["status"] == "COMPLETE":
                    break
                assert time.monotonic() < deadline, done
                time.sleep(0.05)
        # Replica b has never built this body: 24 pages ask it for the body at once.
        engine = second.state.sparkglass.sessions.kw["bind"]
        with statements(engine, "sample_records.sample_timestamp") as reads:

            def poll(_: int) -> tuple[int, int]:
                with httpx.Client(base_url=b.url, timeout=60) as http:
                    barrier.wait()
                    r = http.get(sample_url("many"), headers=auth("viewer"))
                    return r.status_code, sum(len(s["records"]) for s in r.json()["samples"])

            with ThreadPoolExecutor(pages) as pool:
                answers = list(pool.map(poll, range(pages)))
        assert first.state.sparkglass.coordinator.wait_idle(10)
    for app in (first, second):
        app.state.sparkglass.sessions.kw["bind"].dispose()
    assert answers == [(200, 5000)] * pages
    # One page of records per subtask (1,000 records of ~200 bytes fit one page), read once
    # for all 24 pages.
    assert len(reads) == 5, f"{len(reads)} record reads for {pages} pages"

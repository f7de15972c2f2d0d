"""Identical reads are audited as one event per window (``audit_read_window_seconds``) with
their count, first and last time; triggers, writes and denials stay one event each; open
windows are written at shutdown. The real service (lifespan entered) on SQLite and
PostgreSQL (``db_url``); rows are counted in the store itself.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import inspect, select
from sqlalchemy.orm import sessionmaker

from sparkglass.service.app import create_app
from sparkglass.service.audit import AuditWriter
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from sparkglass.service.store import make_engine, migrate, open_store
from sparkglass.service.store.orm import AuditEvent
from sparkglass.service.store.repository import AuditRecord
from tests.support.data_sample_api import BASE, poll_until_done, sample_url

from .conftest import STORE_KEY, ServiceFactory, auth
from .fake_driver import TOKEN, FakeDriver

AUDIT = "/api/v1/namespaces/local/audit-events"


def rows(client: TestClient, **want: Any) -> list[AuditEvent]:
    """The audit rows in the store matching ``want`` (after writing everything queued)."""
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    state.audit.flush()
    with state.sessions() as session:
        found = session.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
        session.expunge_all()
    return [r for r in found if all(getattr(r, k) == v for k, v in want.items())]


def test_identical_polls_and_304s_are_one_event_with_their_count(
    make_service: ServiceFactory,
) -> None:
    client = make_service()
    done = poll_until_done(client, "parse")
    first = client.get(sample_url("parse"), headers=auth("viewer"))
    assert first.status_code == 200
    etag = first.headers["etag"]
    polls = 60
    for _ in range(polls):
        r = client.get(sample_url("parse"), headers={**auth("viewer"), "If-None-Match": etag})
        assert r.status_code == 304
    # The stored round's URL too (a DataSample's resultsURL), 200 then 304s.
    round_url = f"{BASE}/rounds/{done['roundId']}"
    full = client.get(round_url, headers=auth("viewer"))
    assert full.status_code == 200
    for _ in range(polls):
        r = client.get(round_url, headers={**auth("viewer"), "If-None-Match": full.headers["etag"]})
        assert r.status_code == 304

    # Both routes read the same resource (the round): one event for all of them.
    (row,) = rows(client, actor="viewer-user")
    assert (row.action, row.vertex, row.round_id) == ("read", "parse", done["roundId"])
    assert row.status == "COMPLETE" and row.client == "testclient"
    assert row.request_count == 2 * (polls + 1)
    assert row.last_at is not None and row.last_at >= row.at
    assert row.record_count == 2 * 9  # each 200 sent the 9 records, the 304s none
    # The API shows the count and both times.
    events = client.get(AUDIT, headers=auth("admin"), params={"limit": 1000}).json()
    (read,) = [e for e in events if e["actor"] == "viewer-user"]
    assert read["requestCount"] == 2 * (polls + 1) and read["lastAt"] >= read["at"]


def test_store_rows_grow_with_windows_not_with_polls(make_service: ServiceFactory) -> None:
    window = 0.25
    client = make_service(audit_read_window_seconds=window)
    poll_until_done(client, "parse")
    before = len(rows(client, actor="viewer-user"))
    assert before == 0
    polls = 0
    started = time.monotonic()
    deadline = started + 1.0
    while time.monotonic() < deadline:
        assert client.get(sample_url("parse"), headers=auth("viewer")).status_code == 200
        polls += 1
    elapsed = time.monotonic() - started
    viewer = rows(client, actor="viewer-user")
    assert sum(r.request_count for r in viewer) == polls  # every poll is counted
    # One row per window at most (plus the one open at the end).
    assert len(viewer) <= int(elapsed / window) + 2 < polls


def test_denials_triggers_and_writes_are_each_their_own_event(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    poll_until_done(client, "parse")
    denied = 0
    for i in range(10):
        assert client.get(sample_url("parse"), headers=auth("viewer")).status_code == 200
        if i % 3 == 0:
            # A viewer may not start a round (403), nor read the trail (403).
            assert client.get(sample_url("enriched"), headers=auth("viewer")).status_code == 403
            assert client.get(AUDIT, headers=auth("viewer")).status_code == 403
            denied += 2
    # A trigger and a write in the middle of the polls.
    assert client.get(sample_url("enriched"), headers=auth("sampler")).status_code == 200
    body = {"driverUrl": fake_driver.url, "driverToken": TOKEN}
    put = client.put(f"{BASE[: BASE.rindex('/')]}/second", json=body, headers=auth("admin"))
    assert put.status_code == 200, put.text
    for _ in range(10):
        assert client.get(sample_url("parse"), headers=auth("viewer")).status_code == 200

    refused = rows(client, action="denied")
    assert len(refused) == denied
    assert all(r.request_count == 1 and r.last_at is None for r in refused)
    assert {r.status for r in refused} == {"403"} and {r.actor for r in refused} == {"viewer-user"}
    (trigger,) = rows(client, action="trigger", vertex="enriched")
    assert trigger.request_count == 1 and trigger.actor == "sampler-user"
    (register,) = rows(client, action="register", application="second")
    assert register.request_count == 1 and register.actor == "admin-user"
    (reads,) = rows(client, action="read", actor="viewer-user")
    assert reads.request_count == 20


def test_open_windows_are_written_at_shutdown(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    settings = Settings(
        database_url=db_url,
        tokens_file=tokens_file,
        store_key=STORE_KEY,
        poll_interval_seconds=0.05,
        round_grace_seconds=0.0,
        audit_flush_seconds=0.1,
        audit_read_window_seconds=3600,  # nothing closes on its own during the test
    )
    app = create_app(settings)
    state = app.state.sparkglass
    register_local_application(state.sessions, "flights", fake_driver.url, TOKEN)
    polls = 25
    with TestClient(app) as client:
        poll_until_done(client, "parse")
        for _ in range(polls):
            assert client.get(sample_url("parse"), headers=auth("viewer")).status_code == 200
        assert client.get(sample_url("enriched"), headers=auth("viewer")).status_code == 403
        # The denial is written within the flush interval; the reads wait for their window.
        deadline = time.monotonic() + 10
        while True:
            with state.sessions() as session:
                written = session.scalars(select(AuditEvent)).all()
            if any(e.action == "denied" for e in written):
                break
            assert time.monotonic() < deadline, "the denial was not written"
            time.sleep(0.05)
        assert not [e for e in written if e.actor == "viewer-user" and e.action == "read"]
        assert state.audit.open_windows >= 1
        assert state.coordinator.wait_idle(10)
    state.sessions.kw["bind"].dispose()
    # Shut down: a fresh process reads what the service left.
    sessions = open_store(db_url)
    try:
        with sessions() as session:
            found = session.scalars(
                select(AuditEvent).where(
                    AuditEvent.actor == "viewer-user", AuditEvent.action == "read"
                )
            ).all()
            assert [e.request_count for e in found] == [polls]
    finally:
        sessions.kw["bind"].dispose()


def test_read_windows_stay_within_their_byte_bound(make_service: ServiceFactory) -> None:
    bound = 3000  # two or so windows
    client = make_service(audit_read_buffer_bytes=bound)
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    reads = 0
    for _ in range(3):
        for vertex in ("parse", "flights", "enriched", "carrier-names"):
            r = client.get(f"{BASE}/vertices/{vertex}/rounds", headers=auth("viewer"))
            assert r.status_code == 200
            reads += 1
            assert state.audit.window_bytes <= bound
    listed = rows(client, action="list", actor="viewer-user", detail="rounds")
    assert sum(r.request_count for r in listed) == reads  # evicted early, never lost


def test_migration_0005_keeps_older_events_as_single_requests(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine, "0004")
    columns = {c["name"] for c in inspect(engine).get_columns("audit_events")}
    assert "request_count" not in columns and "last_at" not in columns
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO audit_events (at, actor, action, namespace, application, vertex, "
            "record_count) VALUES (5, 'old', 'read', 'local', 'flights', 'parse', 3)"
        )
    engine.dispose()
    sessions = open_store(db_url)  # migrates to head
    try:
        with sessions() as session:
            (row,) = session.scalars(select(AuditEvent)).all()
            assert (row.actor, row.request_count, row.last_at) == ("old", 1, None)
    finally:
        sessions.kw["bind"].dispose()


def _read(application: str = "flights", actor: str = "viewer-user") -> AuditRecord:
    return AuditRecord(
        actor=actor,
        action="read",
        namespace="local",
        application=application,
        vertex="parse",
        round_id=None,
        record_count=10,
        status="200",
        at=1,
        client=None,
        detail=None,
    )


def test_a_dropped_read_window_counts_every_read_it_stood_for(tmp_path: Path) -> None:
    """While the database refuses writes, a closed read window dropped from the full queue
    loses every read it coalesced: the drop count says so, not 1."""
    # No migration: the audit table does not exist, so every write fails.
    broken = sessionmaker(bind=make_engine(f"sqlite:///{tmp_path / 'empty.db'}"))
    writer = AuditWriter(broken, flush_seconds=3600, max_events=1, read_window_seconds=3600)
    for _ in range(5):
        writer.record(_read("flights"))
    for _ in range(3):
        writer.record(_read("weather"))
    assert writer.dropped == 0  # both windows still open
    assert writer.flush() == 0  # closes both; the store refuses them; one fits the queue
    assert writer.dropped == 5  # the older window, all its 5 reads
    assert writer.pending == 1


def test_window_bytes_count_utf8_bytes_not_characters(tmp_path: Path) -> None:
    sessions = sessionmaker(bind=make_engine(f"sqlite:///{tmp_path / 'a.db'}"))
    ascii_writer = AuditWriter(sessions, flush_seconds=3600, read_window_seconds=3600)
    wide_writer = AuditWriter(sessions, flush_seconds=3600, read_window_seconds=3600)
    ascii_writer.record(_read("e" * 100))
    wide_writer.record(_read("é" * 100))  # 2 bytes each in UTF-8
    assert wide_writer.window_bytes - ascii_writer.window_bytes == 100

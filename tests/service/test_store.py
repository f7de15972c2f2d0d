"""The store on SQLite and PostgreSQL: migrations, the operator's save_round, retention,
tokens."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import inspect

from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.retention import RetentionSweeper, sweep
from sparkglass.service.store import (
    AuditRecord,
    add_audit_events,
    add_token,
    count_rounds,
    find_token,
    get_application,
    get_round,
    list_audit_events,
    load_result,
    now_ms,
    open_store,
    save_round,
)

RESULT = DataSampleResult.model_validate(
    {
        "status": "PARTIAL",
        "errorCode": "EXECUTOR_UNREACHABLE",
        "failedSubtasks": [3],
        "droppedByRateLimit": 7,
        "samples": [
            {
                "subtaskIndex": 1,
                "records": [
                    {"sampleTimestamp": 5, "data": '{"a":1}', "dataType": "struct<a:int>"},
                    {
                        "sampleTimestamp": 6,
                        "data": '{"a":',
                        "dataType": "struct<a:int>",
                        "truncated": True,
                    },
                ],
            },
            {
                "subtaskIndex": 0,
                "records": [
                    {"sampleTimestamp": 4, "data": '{"a":0}', "dataType": "struct<a:int>"},
                ],
            },
        ],
    }
)


def test_migrations_create_every_table_and_are_idempotent(db_url: str) -> None:
    sessions = open_store(db_url)
    open_store(db_url)  # second start: nothing to do
    engine = sessions.kw["bind"]
    tables = set(inspect(engine).get_table_names())
    assert {
        "applications",
        "vertices",
        "vertex_leases",
        "rounds",
        "sample_records",
        "audit_events",
        "api_tokens",
        "alembic_version",
    } <= tables
    engine.dispose()


def test_save_round_for_the_operator(db_url: str) -> None:
    sessions = open_store(db_url)
    with sessions.begin() as s:
        rid = save_round(
            s,
            namespace="team-a",
            application="flights",
            vertex="parse",
            result=RESULT,
            round_id="r-1",
            external_ref="flights-parse-r1",
        )
    with sessions() as s:
        app = get_application(s, "team-a", "flights")  # created on demand
        assert app is not None
        row = get_round(s, rid)
        assert row is not None and row.external_ref == "flights-parse-r1"
        back = load_result(s, row)
    assert rid == "r-1"
    assert back.status == "PARTIAL" and back.error_code == "EXECUTOR_UNREACHABLE"
    assert back.failed_subtasks == [3] and back.dropped_by_rate_limit == 7
    assert [x.subtask_index for x in back.samples] == [0, 1]
    assert back.samples[1].records[1].truncated is True
    assert back.total_record_count == 3 and back.end_timestamp is not None
    # Saving again under the same id replaces the records (the operator retrying).
    with sessions.begin() as s:
        save_round(
            s,
            namespace="team-a",
            application="flights",
            vertex="parse",
            result=DataSampleResult(status="NO_DATA"),
            round_id="r-1",
        )
    with sessions() as s:
        row = get_round(s, "r-1")
        assert row is not None
        again = load_result(s, row)
    assert again.status == "NO_DATA" and again.samples == []
    sessions.kw["bind"].dispose()


def test_retention_deletes_old_rounds_records_and_audit(db_url: str) -> None:
    sessions = open_store(db_url)
    old = now_ms() - 3_600_000
    with sessions.begin() as s:
        save_round(
            s,
            namespace="local",
            application="a",
            vertex="v",
            result=RESULT,
            round_id="old",
            started_at=old,
        )
        save_round(s, namespace="local", application="a", vertex="v", result=RESULT, round_id="new")
        add_audit_events(
            s,
            [
                AuditRecord("u", "read", "local", "a", "v", "old", 3, "PARTIAL", old),
                AuditRecord("u", "read", "local", "a", "v", "new", 3, "PARTIAL", now_ms()),
            ],
        )
    counts = sweep(sessions, retention_seconds=600)
    assert (counts.rounds, counts.records, counts.audit_events) == (1, 3, 1)
    with sessions() as s:
        assert get_round(s, "old") is None and get_round(s, "new") is not None
        assert count_rounds(s) == 1
        assert [e.round_id for e in list_audit_events(s)] == ["new"]
    # The background sweeper does the same on its own.
    sweeper = RetentionSweeper(sessions, retention_seconds=0.2, every_seconds=0.1)
    time.sleep(0.3)
    sweeper.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            with sessions() as s:
                if count_rounds(s) == 0:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        sweeper.stop()
    sessions.kw["bind"].dispose()


def test_tokens_are_stored_hashed(db_url: str) -> None:
    sessions = open_store(db_url)
    with sessions.begin() as s:
        token = add_token(s, "alice", "sampler")
        with pytest.raises(ValueError, match="viewer, sampler, admin"):
            add_token(s, "bob", "root")
    with sessions() as s:
        assert find_token(s, token) == ("alice", "sampler")
        assert find_token(s, token + "x") is None
        from sqlalchemy import text

        stored = s.execute(text("select token_sha256 from api_tokens")).scalars().all()
    assert token not in stored
    sessions.kw["bind"].dispose()


def test_a_sqlite_url_with_a_tilde_opens_the_file_in_the_home_directory(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///~/...``: SQLite does not expand ``~``; the store must open the file it
    created owner-only under ``$HOME``, not a relative ``./~/...`` (which fails, or is
    another file)."""
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    sessions = open_store("sqlite:///~/sparkglass/store.db")
    with sessions.begin() as session:
        save_round(session, namespace="ns", application="app", vertex="v", result=RESULT)
    with sessions() as session:
        assert count_rounds(session) == 1
    sessions.kw["bind"].dispose()
    assert (home / "sparkglass" / "store.db").stat().st_size > 0
    assert not (elsewhere / "~").exists()


def test_the_migrated_schema_is_the_orms(db_url: str) -> None:
    # The ORM (service/store/orm.py) is the schema's source; the migrations must build
    # exactly it: an index or a column the ORM declares and no migration creates (or the
    # reverse) shows here, on both databases.
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from sparkglass.service.store.orm import Base

    engine = open_store(db_url).kw["bind"]
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": False, "compare_server_default": False}
            )
            diff = compare_metadata(context, Base.metadata)
        assert diff == []
        if engine.dialect.name == "postgresql":
            # The names PostgreSQL gives a table's own constraints, not a rebuilt copy's.
            with engine.connect() as conn:
                names = set(
                    conn.exec_driver_sql(
                        "SELECT conname FROM pg_constraint "
                        "WHERE conrelid = 'vertex_leases'::regclass"
                    ).scalars()
                )
            assert names == {"vertex_leases_pkey", "vertex_leases_application_id_fkey"}
    finally:
        engine.dispose()


def test_retention_deletes_leases_free_since_before_the_cutoff(db_url: str) -> None:
    # Every distinct filter asked is its own (application, vertex, request) lease: without
    # the sweep they grew with each one.
    from sparkglass.service.store.orm import VertexLease
    from sparkglass.service.store.repository import claim_round, upsert_application

    sessions = open_store(db_url)
    now = now_ms()
    with sessions.begin() as session:
        app = upsert_application(session, "local", "flights")
        for i in range(50):  # claimed two hours ago, free since 1 hour 59 minutes
            assert claim_round(
                session, app.id, "parse", f"old{i}", interval_ms=60_000,
                at=now - 7_200_000, request_key=f'{{"filter":"x > {i}"}}',
            )  # fmt: skip
        assert claim_round(
            session, app.id, "parse", "recent", interval_ms=60_000, at=now,
            request_key='{"filter":"x > 999"}',
        )  # fmt: skip
    counts = sweep(sessions, retention_seconds=3600)
    assert counts.leases == 50
    with sessions() as session:
        left = session.query(VertexLease).all()
        assert [lease.round_id for lease in left] == ["recent"]
        app = get_application(session, "local", "flights")
        assert app is not None
    # A swept lease is claimable again, as it was before the sweep.
    with sessions.begin() as session:
        assert claim_round(
            session, app.id, "parse", "again", interval_ms=60_000, at=now,
            request_key='{"filter":"x > 0"}',
        )  # fmt: skip
    sessions.kw["bind"].dispose()

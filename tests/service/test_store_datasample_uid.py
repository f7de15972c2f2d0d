"""Kubernetes execution mode keys a DataSample's result by its ``metadata.uid``.

The service binds its round's row to the uid of the DataSample it created
(``repository.bind_datasample``; unique, migration 0007); the operator saves a DataSample's
result in the round bound to its uid, else in a round of its own named by the uid
(``operator/results.py``). Nothing a client writes (a name, an annotation, a driver's round
id) picks the round: a DataSample deleted and created again under the service's name has
another uid and never lands in the service's round. When the operator saves before the
service has bound the round, the binding adopts that result. On SQLite and PostgreSQL
(``db_url``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import delete, inspect
from sqlalchemy.exc import IntegrityError

from sparkglass.runtime.contract.round_request import round_request
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.service.execution.kubernetes import datasample_name, store_lookup
from sparkglass.service.store import (
    bind_datasample,
    create_round,
    get_round,
    load_result,
    make_engine,
    migrate,
    open_store,
    upsert_application,
)
from sparkglass.service.store.orm import Round
from sparkglass.service.store.repository import (
    RoundOwnershipError,
    adopt_datasample_round,
    get_application,
    latest_finished_round,
    save_datasample_result,
)

NS, APP, VERTEX, ROUND = "team-a", "flights", "parse", "0123456789abcdef"
NAME = datasample_name(APP, VERTEX, ROUND)
SERVICE_UID, TWIN_UID = "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-2222"


def result(tag: str, round_id: str | None = None) -> DataSampleResult:
    return DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "roundId": round_id,
            "totalRecordCount": 1,
            "samples": [
                {
                    "subtaskIndex": 0,
                    "records": [
                        {"sampleTimestamp": 1, "data": f'{{"who":"{tag}"}}', "dataType": "x"}
                    ],
                }
            ],
        }
    )


def open_round(url: str, *, uid: str | None) -> None:
    """The service's side: a PENDING round row, bound to ``uid`` when given."""
    with open_store(url).begin() as session:
        app = upsert_application(session, NS, APP)
        create_round(session, ROUND, app.id, VERTEX, triggered_by="alice")
        if uid is not None:
            assert bind_datasample(session, ROUND, uid)


def save_result(url: str, **fields: Any) -> str:
    """What the service does with a result the operator hands it: one transaction."""
    with open_store(url).begin() as session:
        return save_datasample_result(session, **fields)


def operator_save(url: str, uid: str, tag: str, *, driver_round: str | None = None) -> str:
    """The operator's save of DataSample ``NAME`` of ``uid`` (the driver answering
    ``driver_round`` as its round id)."""
    return save_result(
        url,
        namespace=NS,
        application=APP,
        vertex=VERTEX,
        result=result(tag, driver_round),
        uid=uid,
        name=NAME,
        started_at_ms=None,
        request_key="",
    )


def records(url: str, round_id: str) -> list[str]:
    with open_store(url).begin() as session:
        row = get_round(session, round_id)
        assert row is not None
        return [r.data for s in load_result(session, row).samples for r in s.records]


def test_migrations_add_the_column_and_leave_older_rounds_unbound(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine, "0003")
    assert "datasample_uid" not in {c["name"] for c in inspect(engine).get_columns("rounds")}
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO applications (namespace, name, edges, sampling, registered_at, "
            "updated_at) VALUES ('team-a', 'flights', '[]', '{}', 0, 0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO rounds (id, application_id, vertex, status, started_at, "
            "total_record_count, total_truncated, dropped_by_contention, dropped_by_rate_limit,"
            f" failed_subtasks) VALUES ('{ROUND}', 1, 'parse', 'PENDING', 0, 0, false, 0, 0, "
            "'[]')"
        )
    engine.dispose()
    with open_store(db_url).begin() as session:  # migrates to head
        row = get_round(session, ROUND)
        assert row is not None and row.datasample_uid is None
    # A round from before the binding is no DataSample's: the result gets a round of its own.
    assert operator_save(db_url, SERVICE_UID, "late") == SERVICE_UID
    assert records(db_url, SERVICE_UID) == ['{"who":"late"}']


def test_the_first_binding_stands_and_a_uid_binds_one_round(db_url: str) -> None:
    open_round(db_url, uid=None)
    with open_store(db_url).begin() as session:
        assert bind_datasample(session, ROUND, SERVICE_UID)
        assert bind_datasample(session, ROUND, SERVICE_UID)  # again: the same uid, fine
        assert not bind_datasample(session, ROUND, TWIN_UID)
        assert not bind_datasample(session, "no-such-round", SERVICE_UID)
        row = get_round(session, ROUND)
        assert row is not None and row.datasample_uid == SERVICE_UID
        for bad in ("", "u" * 254):
            with pytest.raises(ValueError, match=r"datasample_uid: expected 1-253 characters"):
                bind_datasample(session, ROUND, bad)
    with pytest.raises(IntegrityError), open_store(db_url).begin() as session:
        app = upsert_application(session, NS, APP)
        create_round(session, "another-round", app.id, VERTEX, triggered_by="bob")
        bind_datasample(session, "another-round", SERVICE_UID)


def test_the_service_s_own_datasample_is_saved_under_its_round(db_url: str) -> None:
    open_round(db_url, uid=SERVICE_UID)
    assert operator_save(db_url, SERVICE_UID, "real") == ROUND
    assert records(db_url, ROUND) == ['{"who":"real"}']
    stored = store_lookup(open_store(db_url)).lookup(ROUND)
    assert stored is not None and stored.datasample_uid == SERVICE_UID
    # Saved again (an operator restart between the save and the status): replaced.
    assert operator_save(db_url, SERVICE_UID, "again") == ROUND
    assert records(db_url, ROUND) == ['{"who":"again"}']


def test_a_replacement_under_the_same_name_never_lands_in_the_round(db_url: str) -> None:
    open_round(db_url, uid=SERVICE_UID)
    # Same name, another uid; its driver even answers with the service's round id.
    assert operator_save(db_url, TWIN_UID, "replacement", driver_round=ROUND) == TWIN_UID
    with open_store(db_url).begin() as session:
        row = get_round(session, ROUND)
        assert row is not None
        assert (row.status, row.total_record_count, row.external_ref) == ("PENDING", 0, None)
    assert operator_save(db_url, SERVICE_UID, "real") == ROUND
    assert records(db_url, ROUND) == ['{"who":"real"}']
    assert records(db_url, TWIN_UID) == ['{"who":"replacement"}']


def test_an_operator_faster_than_the_binding_is_adopted(db_url: str) -> None:
    """The operator found no round bound to the uid (the service had not bound it yet) and
    saved the result in a round named by the uid: binding then moves it into the service's
    round, records included, and the uid's own round is gone."""
    open_round(db_url, uid=None)
    assert operator_save(db_url, SERVICE_UID, "early") == SERVICE_UID
    assert store_lookup(open_store(db_url)).bind(ROUND, SERVICE_UID)
    assert records(db_url, ROUND) == ['{"who":"early"}']
    with open_store(db_url).begin() as session:
        assert get_round(session, SERVICE_UID) is None
        row = get_round(session, ROUND)
        assert row is not None and (row.status, row.datasample_uid) == ("COMPLETE", SERVICE_UID)
    # The next save of that DataSample finds the service's round.
    assert operator_save(db_url, SERVICE_UID, "again") == ROUND


def test_no_adoption_across_vertices(db_url: str) -> None:
    open_round(db_url, uid=None)
    (
        save_result(db_url,
            namespace=NS, application=APP, vertex="other", result=result("x"),
            uid=SERVICE_UID, name=NAME, started_at_ms=None, request_key="",
        )
    )  # fmt: skip
    with open_store(db_url).begin() as session:
        assert not adopt_datasample_round(session, ROUND, SERVICE_UID)
        row = get_round(session, ROUND)
        assert row is not None and (row.status, row.datasample_uid) == ("PENDING", None)


def test_a_plain_poll_answers_only_with_rounds_the_service_started(db_url: str) -> None:
    """A ``kubectl`` DataSample is saved as a round of its vertex like the service's own,
    but it is not what the page or a plain REST poll asked for, whether it narrows the
    round by a filter or only by its limits (``maxRecords`` defaults to 100, the service's
    DataSample asks for 5,000): the newest round a plain poll may answer with stays the
    newest one the service started. A DataSample's own round is still found by its id
    (its ``resultsURL``) and listed."""
    open_round(db_url, uid=SERVICE_UID)
    assert operator_save(db_url, SERVICE_UID, "plain") == ROUND
    later = int(time.time() * 1000) + 60_000  # both end after the service's round
    for uid, asked in (
        (TWIN_UID, round_request(filter="dep_delay > 60", columns="carrier,dep_delay")),
        ("33333333-3333-4333-8333-333333333333", round_request()),  # its limits only
    ):
        own = save_result(
            db_url,
            namespace=NS,
            application=APP,
            vertex=VERTEX,
            result=result(f"own-{uid[:1]}").model_copy(update={"end_timestamp": later}),
            uid=uid,
            name=f"kubectl-{uid[:1]}",
            started_at_ms=None,
            request_key=asked.key(),
        )
        assert own == uid
        with open_store(db_url).begin() as session:
            app = get_application(session, NS, APP)
            assert app is not None
            latest = latest_finished_round(session, app.id, VERTEX)
            assert latest is not None and latest.id == ROUND, latest and latest.id
            stored = get_round(session, own)
            assert stored is not None and stored.request_key == f"datasample:{asked.key()}"
        assert records(db_url, own) == [f'{{"who":"own-{uid[:1]}"}}']
    # Without the service's round there is no plain answer at all: the poll starts one.
    with open_store(db_url).begin() as session:
        session.execute(delete(Round).where(Round.id == ROUND))
    with open_store(db_url).begin() as session:
        app = get_application(session, NS, APP)
        assert app is not None and latest_finished_round(session, app.id, VERTEX) is None


def test_adoption_keeps_the_service_round_plain_and_its_author(db_url: str) -> None:
    """The operator saved first (its own round, marked as a DataSample's); the binding then
    moves the outcome into the service's round, which stays a plain round started by whoever
    polled, and is the plain answer."""
    open_round(db_url, uid=None)
    assert operator_save(db_url, SERVICE_UID, "early") == SERVICE_UID
    assert store_lookup(open_store(db_url)).bind(ROUND, SERVICE_UID)
    with open_store(db_url).begin() as session:
        row = get_round(session, ROUND)
        assert row is not None
        assert (row.request_key, row.triggered_by, row.status) == ("", "alice", "COMPLETE")
        app = get_application(session, NS, APP)
        assert app is not None
        latest = latest_finished_round(session, app.id, VERTEX)
        assert latest is not None and latest.id == ROUND


def test_a_result_never_lands_in_a_round_whose_id_is_its_uid_but_not_bound(db_url: str) -> None:
    """Round ids are not secret: a save whose uid names another request's round (a plain
    one here) is refused, and that round stays as it was."""
    open_round(db_url, uid=None)  # the service's plain round ROUND, unbound
    with pytest.raises(RoundOwnershipError):
        operator_save(db_url, ROUND, "planted")
    with open_store(db_url).begin() as session:
        row = get_round(session, ROUND)
        assert row is not None and (row.status, row.datasample_uid) == ("PENDING", None)

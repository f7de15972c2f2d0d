"""The round-id handshake of Kubernetes execution mode, bound to the DataSample's uid.

The service records in its round's row the ``metadata.uid`` of the DataSample it created
(``repository.bind_datasample``, migration 0004); the operator saves a DataSample's result
under the service's round id only for that uid (``operator/results.py``), and never over a
row bound to another uid, whatever round id it falls back to. A DataSample deleted and
created again under the service's name (another uid) cannot have its result saved as the
service's round. On SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import inspect

from sparkglass.operator.results import ResultStore, RoundIdConflict, SampleIdentity
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


def operator_save(url: str, uid: str, tag: str, *, driver_round: str | None = None) -> str:
    """The operator's save of DataSample ``NAME`` (of ``uid``) claiming the service's round."""
    return asyncio.run(
        ResultStore(url).save(
            namespace=NS,
            application=APP,
            vertex=VERTEX,
            result=result(tag, driver_round),
            claimed_round_id=ROUND,
            sample=SampleIdentity(name=NAME, uid=uid, created_ms=0),
            started_at_ms=None,
        )
    )


def records(url: str, round_id: str) -> list[str]:
    with open_store(url).begin() as session:
        row = get_round(session, round_id)
        assert row is not None
        return [r.data for s in load_result(session, row).samples for r in s.records]


def test_migration_0004_adds_the_column_and_leaves_older_rounds_unbound(db_url: str) -> None:
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
    # A round from before the binding is claimed by no DataSample.
    saved = operator_save(db_url, SERVICE_UID, "late")
    assert saved != ROUND


def test_the_first_binding_stands(db_url: str) -> None:
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


def test_the_service_s_own_datasample_is_saved_under_its_round(db_url: str) -> None:
    open_round(db_url, uid=SERVICE_UID)
    assert operator_save(db_url, SERVICE_UID, "real") == ROUND
    assert records(db_url, ROUND) == ['{"who":"real"}']
    # And the service's lookup sees whom the row is bound to.
    stored = store_lookup(open_store(db_url)).lookup(ROUND)
    assert stored is not None
    assert (stored.external_ref, stored.datasample_uid) == (NAME, SERVICE_UID)


def test_a_replacement_under_the_same_name_is_not_saved_over_the_round(db_url: str) -> None:
    open_round(db_url, uid=SERVICE_UID)
    # Same name, same round-id annotation, another uid: its claim is refused and its result
    # goes to a round of its own (the DataSample's uid: the driver gave no round id).
    assert operator_save(db_url, TWIN_UID, "replacement") == TWIN_UID
    with open_store(db_url).begin() as session:
        row = get_round(session, ROUND)
        assert row is not None
        assert (row.status, row.total_record_count, row.external_ref) == ("PENDING", 0, None)
    # Nor by way of the id it falls back to: a driver answering the service's round id.
    with pytest.raises(RoundIdConflict, match=r"belongs to another DataSample"):
        operator_save(db_url, TWIN_UID, "replacement", driver_round=ROUND)
    # The service's own DataSample still gets its round.
    assert operator_save(db_url, SERVICE_UID, "real") == ROUND
    assert records(db_url, ROUND) == ['{"who":"real"}']
    # ... and a replacement coming after that does not rewrite it either.
    assert operator_save(db_url, TWIN_UID, "replacement") == TWIN_UID
    assert records(db_url, ROUND) == ['{"who":"real"}']


def test_an_unbound_round_is_claimed_by_no_datasample(db_url: str) -> None:
    open_round(db_url, uid=None)
    assert operator_save(db_url, SERVICE_UID, "anyone") == SERVICE_UID
    with open_store(db_url).begin() as session:
        row = get_round(session, ROUND)
        assert row is not None and row.status == "PENDING"

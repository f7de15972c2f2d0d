"""The data-sample REST API through the service: statuses, error codes, 401/403/404/422,
post-filters, history, audit, metrics, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.data_sample_api import BASE, poll_until_done, sample_url

from .conftest import TOKENS, ServiceFactory, auth
from .fake_driver import PIPELINE, FakeDriver

BODY_KEYS = {
    "status",
    "endTimestamp",
    "roundId",
    "stale",
    "totalRecordCount",
    "totalTruncated",
    "droppedByContention",
    "droppedByRateLimit",
    "errorCode",
    "failedSubtasks",
    "samples",
    # Additions to the FLIP fields: why a NO_DATA round saw no row.
    "noDataReason",
    "lastMicroBatchTimestamp",
    "materializedAt",
}


def test_first_poll_triggers_then_result_is_cached(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    before = fake_driver.started.get("parse", 0)
    first = client.get(sample_url("parse"), headers=auth("sampler"))
    assert first.status_code == 200
    body = first.json()
    assert set(body) == BODY_KEYS
    assert body["status"] == "PENDING" and body["roundId"]
    done = poll_until_done(client, "parse")
    assert done["status"] == "COMPLETE"
    assert done["roundId"] == body["roundId"]  # the service's round id names the round
    assert done["errorCode"] is None and done["stale"] is False
    assert done["totalRecordCount"] == 9
    assert done["droppedByRateLimit"] == 4 and done["droppedByContention"] == 1
    assert [s["subtaskIndex"] for s in done["samples"]] == [0, 1, 2]
    rec = done["samples"][1]["records"][0]
    assert set(rec) == {"sampleTimestamp", "data", "dataType", "truncated"}
    assert rec["truncated"] is True and rec["dataType"].startswith("struct<")
    assert isinstance(done["endTimestamp"], int)
    # Cached for the refresh interval: more polls (even by a viewer) start nothing new.
    for role in ("viewer", "sampler", "admin"):
        again = client.get(sample_url("parse"), headers=auth(role)).json()
        assert again["roundId"] == done["roundId"] and again["stale"] is False
    assert fake_driver.started["parse"] == before + 1


@pytest.mark.parametrize(
    ("vertex", "status", "error_code"),
    [
        ("parse", "COMPLETE", None),
        ("partial", "PARTIAL", "EXECUTOR_UNREACHABLE"),
        ("empty", "NO_DATA", None),
        ("off", "DISABLED", None),
        ("busy", "FAILED", "TOO_MANY_CONCURRENT_ROUNDS"),
        ("broken", "FAILED", "INTERNAL_ERROR"),
        ("unreachable", "FAILED", "EXECUTOR_UNREACHABLE"),
        ("terminated", "FAILED", "TASK_TERMINATED"),
        ("timeout", "FAILED", "TIMEOUT"),
    ],
)
def test_every_status_and_error_code(
    make_service: ServiceFactory, vertex: str, status: str, error_code: str | None
) -> None:
    client = make_service()
    body = poll_until_done(client, vertex)
    assert body["status"] == status
    assert body["errorCode"] == error_code
    if status == "PARTIAL":
        assert body["failedSubtasks"] == [2]
        assert [s["subtaskIndex"] for s in body["samples"]] == [0, 1]
    if status in ("NO_DATA", "DISABLED", "FAILED"):
        assert body["samples"] == []
    history = client.get(f"{BASE}/vertices/{vertex}/rounds", headers=auth("viewer")).json()
    assert [h["status"] for h in history] == [status]


def test_round_that_never_ends_times_out_in_the_service(
    make_service: ServiceFactory, settings_left_to_the_service: FakeDriver
) -> None:
    client = make_service(round_timeout_seconds=0.5)
    body = poll_until_done(client, "stuck")
    assert (body["status"], body["errorCode"]) == ("FAILED", "TIMEOUT")


def test_driver_gone_is_internal_error(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    from sparkglass.service.catalog import register_local_application
    from sparkglass.service.store import get_application

    with state.sessions() as s:
        app = get_application(s, "local", "flights")
        assert app is not None
        vertices = app.vertices
    from sparkglass.runtime.contract.description import PipelineDescription

    register_local_application(
        state.sessions,
        "gone",
        "http://127.0.0.1:9",
        "x",
        description=PipelineDescription.model_validate(
            {
                "name": "gone",
                "vertices": [
                    {"name": v.name, "kind": v.kind, "inputs": v.inputs} for v in vertices
                ],
            }
        ),
    )
    url = "/api/v1/namespaces/local/applications/gone/vertices/parse/data-sample"
    deadline = time.monotonic() + 60
    while True:
        body = client.get(url, headers=auth("sampler")).json()
        if body["status"] != "PENDING":
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (body["status"], body["errorCode"]) == ("FAILED", "INTERNAL_ERROR")


def test_stale_result_while_next_round_runs(
    make_service: ServiceFactory, fake_driver: FakeDriver, settings_left_to_the_service: FakeDriver
) -> None:
    client = make_service(refresh_interval_seconds=0.5)
    first = poll_until_done(client, "slow")
    time.sleep(0.6)  # the cached result expires
    during = client.get(sample_url("slow"), headers=auth("sampler")).json()
    assert during["stale"] is True
    assert during["roundId"] == first["roundId"]  # the previous result, marked stale
    assert during["status"] == "COMPLETE"
    second = poll_until_done(client, "slow")
    assert second["roundId"] != first["roundId"]


def test_the_applications_own_refresh_interval_rules_rest(
    make_service: ServiceFactory, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver says refresh-interval 5s; the service's own fallback (60 s) must not apply.
    # The fake driver is shared by the session: monkeypatch puts its settings back after.
    monkeypatch.setattr(
        fake_driver, "sampling", {"enabled": True, "refreshInterval": "5s", "timeout": "30s"}
    )
    client = make_service(refresh_interval_seconds=60.0)
    first = poll_until_done(client, "parse")
    again = client.get(sample_url("parse"), headers=auth("sampler")).json()
    assert (again["roundId"], again["stale"]) == (first["roundId"], False)  # cached
    deadline = time.monotonic() + 30
    while True:  # the cached result serves until 5 s after the round ended, then a round starts
        body = client.get(sample_url("parse"), headers=auth("sampler")).json()
        if body["stale"] or body["roundId"] != first["roundId"]:
            break
        assert time.monotonic() < deadline, "no new round 30 s after a 5 s refresh interval"
        time.sleep(0.1)
    waited_ms = int(time.time() * 1000) - first["endTimestamp"]
    assert 5_000 <= waited_ms < 30_000
    second = poll_until_done(client, "parse")
    assert second["roundId"] != first["roundId"]


def test_the_applications_own_timeout_bounds_the_round(
    make_service: ServiceFactory, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The service's fallback would wait 30 s; the application's 1 s timeout must rule.
    monkeypatch.setattr(
        fake_driver, "sampling", {"enabled": True, "timeout": "1s", "samplingWindow": "1s"}
    )
    client = make_service(round_timeout_seconds=30.0)
    started = time.monotonic()
    body = poll_until_done(client, "stuck", timeout=20)
    assert (body["status"], body["errorCode"]) == ("FAILED", "TIMEOUT")
    assert time.monotonic() - started < 20


def test_no_data_of_an_idle_query_is_not_kept_for_the_refresh_interval(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service(refresh_interval_seconds=60.0)
    deadline = time.monotonic() + 15
    while (idle := client.get(sample_url("idle"), headers=auth("sampler")).json())[
        "status"
    ] == "PENDING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (idle["status"], idle["noDataReason"]) == ("NO_DATA", "NO_MICRO_BATCH")
    assert idle["lastMicroBatchTimestamp"] == 1_700_000_000_000
    started = fake_driver.started["idle"]
    # Within the refresh interval, the next poll starts a round (it waits for the next
    # micro-batch on the driver) and answers the idle result as stale meanwhile.
    deadline = time.monotonic() + 15
    while True:
        again = client.get(sample_url("idle"), headers=auth("sampler")).json()
        assert (again["status"], again["noDataReason"]) == ("NO_DATA", "NO_MICRO_BATCH")
        if fake_driver.started["idle"] > started:
            break
        assert time.monotonic() < deadline, "no new round after an idle NO_DATA"
        time.sleep(0.05)
    assert again["stale"]  # the idle answer stands while the new round runs
    # An empty vertex whose micro-batches ran (NO_ROWS) is kept like any result.
    empty = poll_until_done(client, "empty")
    assert empty["noDataReason"] == "NO_ROWS"
    before = fake_driver.started["empty"]
    cached = client.get(sample_url("empty"), headers=auth("sampler")).json()
    assert (cached["roundId"], cached["stale"]) == (empty["roundId"], False)
    assert fake_driver.started["empty"] == before


def test_401_without_or_with_bad_token(make_service: ServiceFactory) -> None:
    client = make_service()
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        r = client.get(sample_url("parse"), headers=headers)
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json() == {"detail": "missing or invalid bearer token"}
    assert client.get(f"{BASE}", headers={}).status_code == 401


def test_403_viewer_cannot_trigger_and_nothing_leaks(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    before = fake_driver.started.get("enriched", 0)
    r = client.get(sample_url("enriched"), headers=auth("viewer"))
    assert r.status_code == 403
    assert r.json() == {"detail": "forbidden"}
    assert fake_driver.started.get("enriched", 0) == before
    # Admin-only endpoints deny viewers and samplers with the same bare answer.
    for role in ("viewer", "sampler"):
        r = client.get("/api/v1/namespaces/local/audit-events", headers=auth(role))
        assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
    # Once a sampler triggered a round, the viewer reads it.
    poll_until_done(client, "enriched")
    assert client.get(sample_url("enriched"), headers=auth("viewer")).json()["status"] == (
        "COMPLETE"
    )


def test_404_lists_what_exists(make_service: ServiceFactory) -> None:
    client = make_service()
    r = client.get(
        "/api/v1/namespaces/local/applications/nope/vertices/parse/data-sample",
        headers=auth("viewer"),
    )
    assert r.status_code == 404
    assert r.json()["detail"] == (
        "no application 'nope' in namespace 'local'; applications: flights"
    )
    r = client.get(sample_url("nope"), headers=auth("viewer"))
    assert r.status_code == 404
    detail = r.json()["detail"]
    assert detail.startswith("no vertex 'nope' in application 'flights'; vertices: flights, parse")
    r = client.get(f"{BASE}/rounds/deadbeef", headers=auth("viewer"))
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"maxRecords": 0}, "maxRecords must be an integer in 1..5000, got '0'"),
        ({"maxRecords": 5001}, "maxRecords must be an integer in 1..5000, got '5001'"),
        ({"maxRecords": "lots"}, "maxRecords must be an integer in 1..5000, got 'lots'"),
        ({"subtaskIndex": -1}, "subtaskIndex must be an integer in 0..100000, got '-1'"),
    ],
)
def test_422_names_the_allowed_range(
    make_service: ServiceFactory, params: dict[str, Any], message: str
) -> None:
    client = make_service()
    r = client.get(sample_url("parse"), headers=auth("sampler"), params=params)
    assert r.status_code == 422
    assert r.json()["detail"] == message


def test_post_filters(make_service: ServiceFactory) -> None:
    client = make_service()
    full = poll_until_done(client, "parse")
    one = client.get(sample_url("parse"), headers=auth("viewer"), params={"subtaskIndex": 1}).json()
    assert [s["subtaskIndex"] for s in one["samples"]] == [1]
    assert one["totalRecordCount"] == 3 and one["roundId"] == full["roundId"]
    few = client.get(sample_url("parse"), headers=auth("viewer"), params={"maxRecords": 4}).json()
    assert [len(s["records"]) for s in few["samples"]] == [2, 1, 1]  # fair shares
    assert few["totalTruncated"] is True and few["totalRecordCount"] == 4
    # The cached result itself is untouched.
    again = client.get(sample_url("parse"), headers=auth("viewer")).json()
    assert again["totalRecordCount"] == 9 and again["totalTruncated"] is False
    stored = client.get(
        f"{BASE}/rounds/{full['roundId']}", headers=auth("viewer"), params={"maxRecords": 2}
    ).json()
    assert sum(len(s["records"]) for s in stored["samples"]) == 2


def test_applications_graph_and_registration(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service(register=False)
    assert client.get("/api/v1/namespaces/local/applications", headers=auth("viewer")).json() == []
    body = {"driverUrl": fake_driver.url, "driverToken": "driver-secret-token"}
    url = "/api/v1/namespaces/local/applications/flights"
    assert client.put(url, json=body, headers=auth("sampler")).status_code == 403
    r = client.put(url, json=body, headers=auth("admin"))
    assert r.status_code == 200, r.text
    detail = r.json()
    assert "driver-secret-token" not in r.text and "driverUrl" not in detail
    assert detail["pipelineName"] == "flights"
    by_name = {v["name"]: v for v in detail["vertices"]}
    assert by_name["carrier-names"]["attributes"]["noOutputUntilEndOfInput"] is True
    assert by_name["parse"]["python"] is True and by_name["flights"]["kind"] == "source"
    edges = {(e["from"], e["to"]): e["kind"] for e in detail["edges"]}
    assert edges[("carrier-names", "enriched")] == "blocking"
    assert edges[("parse", "enriched")] == "pipelined"
    listed = client.get("/api/v1/applications", headers=auth("viewer")).json()
    assert [a["name"] for a in listed] == ["flights"]
    assert listed[0]["vertexCount"] == len(PIPELINE.vertices)
    bad = client.put(
        "/api/v1/namespaces/local/applications/x",
        headers=auth("admin"),
        json={"driverUrl": "http://127.0.0.1:9", "driverToken": "t"},
    )
    assert bad.status_code == 502 and "cannot be reached" in bad.json()["detail"]
    assert (
        client.put(
            "/api/v1/namespaces/prod/applications/x", headers=auth("admin"), json=body
        ).status_code
        == 409
    )
    assert client.delete(url, headers=auth("admin")).status_code == 204
    assert client.get(url, headers=auth("viewer")).status_code == 404


def test_audit_trail_records_reads_and_triggers(make_service: ServiceFactory) -> None:
    client = make_service()
    poll_until_done(client, "parse")
    client.get(sample_url("parse"), headers=auth("viewer"), params={"maxRecords": 2})
    events = client.get("/api/v1/namespaces/local/audit-events", headers=auth("admin")).json()
    triggers = [e for e in events if e["action"] == "trigger"]
    assert len(triggers) == 1 and triggers[0]["actor"] == "sampler-user"
    assert triggers[0]["vertex"] == "parse" and triggers[0]["status"] == "PENDING"
    latest = events[0]
    assert (latest["actor"], latest["action"], latest["recordCount"]) == ("viewer-user", "read", 2)
    assert all(TOKENS["viewer"] not in str(e) for e in events)


def test_metrics(make_service: ServiceFactory) -> None:
    client = make_service()
    poll_until_done(client, "parse")
    poll_until_done(client, "busy")
    assert client.app.state.sparkglass.coordinator.wait_idle(5)  # type: ignore[attr-defined]
    text = client.get("/metrics").text
    assert 'sparkglass_rounds_total{status="COMPLETE"} 1.0' in text
    assert 'sparkglass_rounds_total{status="FAILED"} 1.0' in text
    assert "sparkglass_rounds_started_total 2.0" in text
    assert "sparkglass_round_duration_seconds_count 2.0" in text
    assert (
        'sparkglass_http_requests_total{code="200",method="GET",'
        'route="/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/'
        'data-sample"}'
    ) in text
    assert "sparkglass_http_request_duration_seconds_bucket" in text


def test_store_tokens_and_service_retention(make_service: ServiceFactory) -> None:
    # The round is read under the default retention first: with a 1 s retention from the
    # start, a loaded machine may take longer than that between the round's end and the
    # history read, and the sweep rightly deletes it (CI saw an empty history).
    client = make_service(retention_check_seconds=0.2)
    state = client.app.state.sparkglass  # type: ignore[attr-defined]
    from sparkglass.service.store import add_token

    with state.sessions.begin() as s:
        token = add_token(s, "carol", "sampler")
    headers = {"Authorization": f"Bearer {token}"}
    poll_until_done(client, "parse")
    assert client.get(sample_url("parse"), headers=headers).status_code == 200
    history = client.get(f"{BASE}/vertices/parse/rounds", headers=headers).json()
    assert len(history) == 1
    # A restart of the service on the same store with a 1 s retention deletes the round.
    assert client.app.state.sparkglass.coordinator.wait_idle(10)  # type: ignore[attr-defined]
    client = make_service(retention_seconds=1.0, retention_check_seconds=0.2)
    deadline = time.monotonic() + 60
    while client.get(f"{BASE}/vertices/parse/rounds", headers=headers).json():
        assert time.monotonic() < deadline, "retention did not delete the round"
        time.sleep(0.2)

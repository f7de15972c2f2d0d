"""The real operator process running DataSample rounds against a driver control endpoint.

A scripted control endpoint (aiohttp on 127.0.0.1, the contract of
``runtime/sample_result.py``; ``tests/support/datasamples.py``) stands in for the driver, so
every phase can be reached by its cause; ``test_real_driver.py`` runs the same path against a
real local Spark driver. Like a real driver it serves HTTPS only, with the certificate the
operator put in each application's Secret (chosen by the name the client sends:
``<app>-driver.<ns>.svc``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from tests.support.datasamples import (
    APPS,
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    events_for,
    example,
    patch_status,
    phase,
    post,
    running_app,
    sample_body,
    secret_entry,
    state,
    status,
    wait_final,
)
from tests.support.datasamples import driver as driver  # the fixtures, by name
from tests.support.datasamples import operator_args as operator_args
from tests.support.datasamples import result_service as result_service

from .conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines


async def fail_pod(kube: StrictApiServer, app: str) -> None:
    """Play the kubelet: the driver container of ``app`` died (SIGKILL), its Pod failed."""
    await patch_status(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/{app}-driver/status",
        {
            "phase": "Failed",
            "podIP": "127.0.0.1",
            "containerStatuses": [
                {
                    "name": "spark-kubernetes-driver",
                    "state": {"terminated": {"exitCode": 137, "reason": "Error"}},
                }
            ],
        },
    )


async def assert_final(
    kube: StrictApiServer, name: str, operator: OperatorProcess, expected: str
) -> None:
    """Wait for ``name``'s final phase and fail, showing its status message and the
    operator's last log lines, unless it is ``expected`` (a loaded machine's surprises
    must be readable from the CI log alone)."""
    final = await wait_final(kube, name, operator)
    if final != expected:
        st = status(kube, name)
        pytest.fail(
            f"{name} ended {final!r}, not {expected!r}: {st.get('message')!r} "
            f"(conditions {st.get('conditions')!r})\n{operator.output()[-6000:]}"
        )


async def test_a_datasample_takes_the_driver_pod_from_the_watch(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """The engine takes the driver Pod from its watch: a round on a running application
    does not read it from the API (one more request per DataSample). The control Secret is
    read once (it is not watched, and a changed one must not be used:
    tests/security/test_operator_trust.py)."""
    await running_app(kube, operator, driver)
    before = kube.served.copy()
    await post(kube, "datasamples", sample_body("look", "parse"))
    await assert_final(kube, "look", operator, "Complete")
    served = kube.served - before
    assert served["GET", f"/api/v1/namespaces/{NAMESPACE}/pods/flights-driver"] == 0, served
    assert served["GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/flights-control-token"] == 1


async def test_round_completes_with_bounded_status_labels_events_and_store(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver, store_url: str
) -> None:
    await running_app(kube, operator, driver)
    driver.records, driver.record_bytes = 40, 200  # 80 records of ~250 B: more than 4 KiB
    await post(kube, "datasamples", sample_body("parse-1", "parse", maxRecords=100))
    await assert_final(kube, "parse-1", operator, "Complete")
    st = status(kube, "parse-1")
    assert st["totalRecordCount"] == 80 and st["droppedByRateLimit"] == 7
    assert st["roundId"] == "r-1"
    # Bounded: fewer records than the result, both subtasks represented (round-robin).
    in_status = sum(len(s["records"]) for s in st["samples"])
    assert 0 < in_status == st["recordsInStatus"] < 80 and st["samplesTruncated"] is True
    assert len(json.dumps(st["samples"])) < 4096 + 1024
    assert {s["subtaskIndex"] for s in st["samples"]} == {0, 1}
    # The result is stored in a round of the DataSample's own: its uid (no round bound).
    uid = kube.stored(SAMPLES, NAMESPACE, "parse-1")["metadata"]["uid"]
    assert st["resultsURL"] == (
        f"{SERVICE_URL}/api/v1/namespaces/{NAMESPACE}/applications/flights/rounds/{uid}"
    )
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert ready["status"] == "True" and ready["reason"] == "RoundComplete"
    assert st["observedGeneration"] == 1 and st["completionTime"]
    labels = kube.stored(SAMPLES, NAMESPACE, "parse-1")["metadata"]["labels"]
    assert labels == {
        "sparkglass.io/application": "flights",
        "sparkglass.io/vertex": "parse",
        "sparkglass.io/phase": "Complete",
    }
    # Events are posted asynchronously (kopf's posting queue).
    await eventually(
        lambda: (
            {"RoundStarted", "RoundComplete"} <= {e["reason"] for e in events_for(kube, "parse-1")}
        ),
        what="events",
        operator=operator,
    )
    # One round opened, with the Secret's token, over TLS with the Secret's certificate (the
    # driver answers only handshakes for the application's Service name); the token never
    # reached status or logs.
    assert driver.calls["open:parse"] == 1 and driver.auth_failures == 0
    assert driver.handshakes["flights-driver.spark-jobs.svc"] >= 1
    assert set(driver.handshakes) == {"flights-driver.spark-jobs.svc"}
    (token,) = driver.tokens
    assert token not in json.dumps(kube.stored(SAMPLES, NAMESPACE, "parse-1"))
    assert token not in operator.output()
    # The full result (all 80 records) is in the service's store under the uid.
    from sparkglass.service.store import finished_result, open_store

    with open_store(store_url).begin() as session:
        result = finished_result(session, uid)
        assert result is not None
        assert sum(len(s.records) for s in result.samples) == 80


async def test_each_phase_is_reached_by_its_cause(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    await running_app(kube, operator, driver, "quiet", sampling=False)
    # A finished application: its driver succeeded.
    await post(
        kube,
        "sparkapplications",
        {**example("flights-sparkapplication.yaml"), "metadata": {"name": "done"}},
    )
    await eventually(lambda: kube.stored("v1/pods", NAMESPACE, "done-driver"), operator=operator)
    await patch_status(
        kube, f"/api/v1/namespaces/{NAMESPACE}/pods/done-driver/status", {"phase": "Succeeded"}
    )
    await eventually(lambda: state(kube, "done") == "COMPLETED", operator=operator)
    driver.behaviour.update(
        {
            "delays-by-carrier": "busy",
            "enrich-origin": "partial",
            "busiest-origins": "no-data",
            "flights": "failed",
            "schedule": "flaky",
            "airports": "disabled",
        }
    )
    cases = {
        "unknown-vertex": (sample_body("unknown-vertex", "nope"), "Failed", "UnknownVertex"),
        "off": (sample_body("off", "parse", app="quiet"), "Disabled", "SamplingDisabled"),
        "over": (sample_body("over", "parse", app="done"), "Abandoned", "ApplicationNotRunning"),
        "missing-app": (
            sample_body("missing-app", "parse", app="ghost", backoffLimit=0),
            "Failed",
            "ApplicationNotFound",
        ),
        "busy": (
            sample_body("busy", "delays-by-carrier", backoffLimit=1),
            "Failed",
            "TooManyConcurrentRounds",
        ),
        "partial": (sample_body("partial", "enrich-origin"), "Partial", "RoundPartial"),
        "no-data": (sample_body("no-data", "busiest-origins"), "NoData", "RoundNoData"),
        "failed-round": (sample_body("failed-round", "flights"), "Failed", "RoundFailed"),
        "flaky": (sample_body("flaky", "schedule"), "Complete", "RoundComplete"),
        "driver-off": (sample_body("driver-off", "airports"), "Disabled", "SamplingDisabled"),
        "too-wide": (
            sample_body("too-wide", "parse", samplingWindow="5s"),
            "Failed",
            "InvalidSamplingWindow",
        ),
    }
    for body, _, _ in cases.values():
        await post(kube, "datasamples", body)
    for name, (_, want_phase, want_reason) in cases.items():
        got = await wait_final(kube, name, operator)
        st = status(kube, name)
        ready = {c["type"]: c for c in st["conditions"]}["Ready"]
        assert (got, ready["reason"]) == (want_phase, want_reason), (name, st)
        # Ready means "did what the spec asks": a result, or sampling off (GitOps health).
        want_ready = "True" if got in {"Complete", "Partial", "NoData", "Disabled"} else "False"
        assert ready["status"] == want_ready, (name, st)
        labels = kube.stored(SAMPLES, NAMESPACE, name)["metadata"]["labels"]
        assert labels["sparkglass.io/phase"] == got
    assert (
        "vertices: flights, schedule, airports, parse" in status(kube, "unknown-vertex")["message"]
    )
    assert status(kube, "busy")["errorCode"] == "TOO_MANY_CONCURRENT_ROUNDS"
    assert status(kube, "busy")["retries"] == 1 and driver.calls["open:delays-by-carrier"] == 2
    assert status(kube, "partial")["failedSubtasks"] == [1]
    assert status(kube, "partial")["errorCode"] == "EXECUTOR_UNREACHABLE"
    assert status(kube, "failed-round")["errorCode"] == "TIMEOUT"
    assert status(kube, "flaky")["retries"] == 1  # the 503 was retried
    await eventually(lambda: events_for(kube, "busy"), what="events", operator=operator)
    assert {e["type"] for e in events_for(kube, "busy")} == {"Warning"}


async def test_driver_death_mid_round_abandons_it_whatever_the_operator_sees_first(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """The rule of operator/README.md ("When the driver dies mid-round"): a round lives only
    in the driver run that opened it. One DataSample per order in which the operator can
    learn that this run ended; each ends as the rule says, and none is ever reopened."""
    await running_app(kube, operator, driver, "driver-first")  # Pods of these two fail below
    await running_app(kube, operator, driver, "pod-first")
    await running_app(kube, operator, driver)  # flights: its Pod keeps running
    cases = {  # DataSample -> (application, vertex, what it must end as)
        "driver-first": ("driver-first", "schedule", ("Abandoned", "ApplicationNotRunning")),
        "pod-first": ("pod-first", "airports", ("Abandoned", "ApplicationNotRunning")),
        "new-run": ("flights", "parse", ("Abandoned", "RoundLost")),
        "hung": ("flights", "busiest-origins", ("Failed", "DriverUnavailable")),
    }
    # driver-first: retries wide enough (1+2+...+32 s) to outlast the kubelet's report even on
    # a loaded machine; hung: one retry, so that giving up is quick.
    limits = {"driver-first": 6, "hung": 1}
    for name, (app, vertex, _) in cases.items():
        driver.behaviour[vertex] = "hold"
        body = sample_body(name, vertex, app=app, backoffLimit=limits.get(name, 3))
        await post(kube, "datasamples", body)
    for name in cases:
        await eventually(
            lambda n=name: phase(kube, n) == "InProgress", what=f"{name} open", operator=operator
        )

    # 1. The driver stops answering first; its Pod still runs, so the operator retries, and
    #    the kubelet's report of the failed Pod ends the round (not the retries running out).
    driver.behaviour["schedule"] = "dead"
    await eventually(
        lambda: (status(kube, "driver-first").get("retries") or 0) >= 1,
        what="driver-first retrying",
        operator=operator,
    )
    await fail_pod(kube, "driver-first")
    # 2. The Pod is reported failed while the driver still answers (the round still PENDING).
    await fail_pod(kube, "pod-first")
    # 3. A new driver run answers before the operator saw any gap: it does not know the round.
    driver.forget("parse")
    # 4. A hung driver: it stops answering while its Pod runs on; the retries run out.
    driver.behaviour["busiest-origins"] = "dead"

    for name, (_, vertex, want) in cases.items():
        got = await wait_final(kube, name, operator)
        st = status(kube, name)
        ready = {c["type"]: c for c in st["conditions"]}["Ready"]
        assert (got, ready["reason"]) == want, (name, st)
        assert driver.calls[f"open:{vertex}"] == 1, (name, driver.calls)  # never reopened
        assert not st.get("samples") and not st.get("resultsURL"), (name, st)
    assert status(kube, "driver-first")["retries"] >= 1  # it did notice the driver first
    assert status(kube, "pod-first")["retries"] == 0  # the Pod or the application told first
    assert status(kube, "hung")["retries"] == 1


async def test_finished_datasample_is_deleted_after_its_ttl(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    await running_app(kube, operator, driver)
    # 6 s: a window wide enough for this test to see the final phase before the deletion on
    # a loaded machine (with 1 s it sometimes saw the DataSample only once it was gone).
    await post(kube, "datasamples", sample_body("brief", "parse", ttlSecondsAfterFinished=6))
    await post(kube, "datasamples", sample_body("kept", "parse"))
    await assert_final(kube, "brief", operator, "Complete"), status(kube, "brief")
    await eventually(
        lambda: kube.stored(SAMPLES, NAMESPACE, "brief") is None,
        what="TTL deletion",
        timeout=60,
        operator=operator,
    )
    await assert_final(kube, "kept", operator, "Complete")
    # Nothing may happen here, so no condition to wait for: longer than brief's TTL, and
    # kept (no TTL of its own: the operator's default, 1 h) stays.
    await asyncio.sleep(6.5)
    assert phase(kube, "kept") == "Complete"


async def test_operator_restart_mid_round_neither_loses_nor_duplicates(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "hold"
    await post(kube, "datasamples", sample_body("restart", "parse"))
    await eventually(lambda: phase(kube, "restart") == "InProgress", operator=operator)
    # Events are best effort (operator/README.md): kopf posts RoundStarted from a queue after
    # the status write, and a crash before that loses it. The crash under test comes once the
    # round is open and announced, so every Event below must then appear exactly once.
    await eventually(
        lambda: any(e["reason"] == "RoundStarted" for e in events_for(kube, "restart")),
        what="the RoundStarted event",
        operator=operator,
    )
    operator.kill()  # a crash in the middle of the round
    driver.release()
    operator.start()
    await assert_final(kube, "restart", operator, "Complete")
    # The new process asked the driver again with the DataSample's uid (status is not input)
    # and got the same round: asked twice, opened once, continued.
    assert driver.calls["open:parse"] == 2 and list(driver.rounds) == ["r-1"]
    assert status(kube, "restart")["roundId"] == "r-1"
    assert status(kube, "restart")["totalRecordCount"] == 6
    await eventually(
        lambda: any(e["reason"] == "RoundComplete" for e in events_for(kube, "restart")),
        what="the completion event",
        operator=operator,
    )
    reasons = Counter(e["reason"] for e in events_for(kube, "restart"))
    assert (reasons["RoundStarted"], reasons["RoundComplete"]) == (1, 1)
    from sparkglass.service.store import count_rounds, finished_result, open_store

    uid = kube.stored(SAMPLES, NAMESPACE, "restart")["metadata"]["uid"]
    with open_store(store_url).begin() as session:
        assert count_rounds(session) == 1
        result = finished_result(session, uid)
        assert result is not None and result.total_record_count == 6


def datasample_requests(kube: StrictApiServer, names: set[str]) -> int:
    """Requests the emulator served on the objects ``names`` (DataSamples), any method."""
    prefix = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples/"
    return sum(
        n
        for (_, path), n in kube.served.items()
        if path.startswith(prefix) and path[len(prefix) :].split("/")[0] in names
    )


async def test_finished_datasamples_cost_no_api_request_and_new_ones_are_picked_up_fast(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """Event-driven: once final, a DataSample gets no GET or PATCH until its TTL (the watch
    stream is one request for all of them); a new one is picked up on its watch event."""
    await running_app(kube, operator, driver)
    done = {f"done-{i}" for i in range(8)}
    for name in sorted(done):
        await post(kube, "datasamples", sample_body(name, "parse"))
    for name in sorted(done):
        await assert_final(kube, name, operator, "Complete")
    before = datasample_requests(kube, done)
    started = asyncio.get_running_loop().time()
    await post(kube, "datasamples", sample_body("fresh", "parse"))
    await eventually(lambda: phase(kube, "fresh"), what="fresh picked up", operator=operator)
    pickup = asyncio.get_running_loop().time() - started
    await assert_final(kube, "fresh", operator, "Complete")
    await asyncio.sleep(3)  # a quiet spell: the old timer read each of them 3 times here
    assert datasample_requests(kube, done) == before
    # A generous bound for a loaded 2-core machine (the benchmark measures the real figure).
    assert pickup < 10, pickup


async def test_a_starting_application_is_waited_for_without_spending_retries(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    body = example("flights-sparkapplication.yaml")
    body["spec"]["sampling"]["controlPort"] = driver.port
    await post(kube, "sparkapplications", body)
    # Created with the application, before its driver runs: no retry may be spent on that.
    await post(kube, "datasamples", sample_body("early", "parse", backoffLimit=0))
    await post(
        kube,
        "datasamples",
        sample_body("impatient", "parse", backoffLimit=0, applicationStartTimeout="2s"),
    )
    await eventually(
        lambda: (
            status(kube, "early").get("conditions", [{}])[0].get("reason")
            == "WaitingForApplication"
        ),
        what="early waiting",
        operator=operator,
    )
    assert phase(kube, "early") == "Pending" and not status(kube, "early").get("retries")
    await assert_final(kube, "impatient", operator, "Abandoned")
    assert "applicationStartTimeout" in status(kube, "impatient")["message"]
    # Now the driver comes up: the waiting DataSample runs its round. The scripted driver
    # holds the token and serves the Secret's certificate before its Pod says Running, as a
    # real driver does (with backoffLimit 0 a refused first call would end the DataSample).
    await eventually(lambda: kube.stored("v1/pods", NAMESPACE, "flights-driver"), operator=operator)
    secret = await eventually(
        lambda: kube.stored("v1/secrets", NAMESPACE, "flights-control-token"), operator=operator
    )
    driver.tokens.add(secret_entry(secret, "token"))
    driver.serve_certificate(
        f"flights-driver.{NAMESPACE}.svc",
        secret_entry(secret, "tls.crt"),
        secret_entry(secret, "tls.key"),
    )
    driver.vertices = {"parse"}
    await patch_status(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods/flights-driver/status",
        {"phase": "Running", "podIP": "127.0.0.1"},
    )
    await assert_final(kube, "early", operator, "Complete"), status(kube, "early")
    assert driver.calls["open:parse"] == 1


async def test_operator_killed_between_opening_a_round_and_writing_its_id_opens_one_round(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    """The round is open on the driver, the operator dies before it learns the round's id (so
    status has no roundId); the next process opens again with the same idempotency key (the
    DataSample's uid) and gets the same round: one round on the driver, one in the store."""
    await running_app(kube, operator, driver)
    driver.stall_opens = True
    await post(kube, "datasamples", sample_body("crash", "parse"))
    await eventually(lambda: driver.rounds, what="the round open on the driver", operator=operator)
    assert "roundId" not in status(kube, "crash")
    operator.kill()
    driver.stall_opens = False
    driver.open_gate.set()
    assert "roundId" not in status(kube, "crash")  # the id never reached the status
    operator.start()
    await assert_final(kube, "crash", operator, "Complete"), status(kube, "crash")
    uid = kube.stored(SAMPLES, NAMESPACE, "crash")["metadata"]["uid"]
    assert driver.keys == {uid: "r-1"} and list(driver.rounds) == ["r-1"]
    assert driver.calls["open:parse"] == 2  # asked twice, opened once
    assert status(kube, "crash")["roundId"] == "r-1"
    from sparkglass.service.store import count_rounds, open_store

    with open_store(store_url).begin() as session:
        assert count_rounds(session) == 1


async def test_a_narrowed_round_is_opened_with_its_request_and_the_idempotency_key(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
) -> None:
    """spec.kind/filter/columns/expectation and the DataSample's uid as idempotency key reach
    the driver on the same open, and a repeated open (operator killed before roundId was
    written) carries both again."""
    await running_app(kube, operator, driver)
    driver.stall_opens = True
    spec = {
        "kind": "violations",
        "expectation": "valid-delay",
        "filter": "carrier = 'UA'",
        "columns": ["carrier", "dep_delay"],
    }
    await post(kube, "datasamples", sample_body("narrow", "parse", **spec))
    await eventually(lambda: driver.rounds, what="the round open on the driver", operator=operator)
    operator.kill()
    driver.stall_opens = False
    driver.open_gate.set()
    operator.start()
    await assert_final(kube, "narrow", operator, "Complete"), status(kube, "narrow")
    uid = kube.stored(SAMPLES, NAMESPACE, "narrow")["metadata"]["uid"]
    asked = {
        "idempotencyKey": uid,
        "kind": "violations",
        "expectation": "valid-delay",
        "filter": "carrier = 'UA'",
        "columns": "carrier,dep_delay",
    }
    assert len(driver.opens) == 2, driver.opens
    for query in driver.opens:
        assert {k: query.get(k) for k in asked} == asked, query
    assert list(driver.rounds) == ["r-1"]


async def test_a_round_the_driver_refuses_ends_failed_naming_the_field(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
) -> None:
    """A spec.filter over a column the vertex lacks passes admission (the schema cannot know
    the vertex's columns) and the driver refuses the round: the DataSample ends Failed with
    reason RoundRejected and the driver's message naming the field and the column, once,
    without retrying."""
    await running_app(kube, operator, driver)
    driver.behaviour["parse"] = "reject-filter"
    await post(kube, "datasamples", sample_body("typo", "parse", filter="carier = 'UA'"))
    await assert_final(kube, "typo", operator, "Failed")
    got = status(kube, "typo")
    (ready,) = [c for c in got["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "RoundRejected"), got
    assert "filter: unknown column 'carier'" in got["message"], got
    assert got["retries"] == 0, got
    assert driver.calls["open:parse"] == 1  # a refusal is not retried


async def test_a_running_drivers_metrics_are_published_in_the_application_status(
    kube: StrictApiServer, operator: OperatorProcess, driver: ScriptedDriver
) -> None:
    """Kubernetes mode's page graph reads status.progress (the service has no driver token):
    the operator copies GET /api/v1/progress there, over the pinned TLS, and refreshes it."""
    await running_app(kube, operator, driver)

    def progress() -> dict[str, Any]:
        obj = kube.stored(APPS, NAMESPACE, "flights") or {}
        return (obj.get("status") or {}).get("progress") or {}

    first = await eventually(progress, what="status.progress", operator=operator)
    assert first["state"] == "ACTIVE" and first["vertices"]["parse"]["rowsLastMicroBatch"] == 5
    assert first["publishedAt"].endswith("Z")
    # Refreshed (operator_args: --progress-seconds 1), not read once.
    await eventually(
        lambda: progress().get("microBatches", 0) > first["microBatches"],
        what="a newer status.progress",
        operator=operator,
    )
    # Only with the application's own token: no 401 was ever answered.
    assert driver.auth_failures == 0


async def test_a_kubectl_datasamples_round_is_stored_as_its_own_not_the_pages(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    store_url: str,
) -> None:
    """The operator stores a ``kubectl`` DataSample's result under what it asked, so the
    service's plain polls (the page) never answer with it (``rounds.request_key``)."""
    from sparkglass.runtime.contract.round_request import round_request
    from sparkglass.service.store import get_round, open_store

    await running_app(kube, operator, driver)
    body = sample_body("late", "parse", filter="dep_delay > 60")
    await post(kube, "datasamples", body)
    await assert_final(kube, "late", operator, "Complete")
    uid = kube.stored(SAMPLES, NAMESPACE, "late")["metadata"]["uid"]
    with open_store(store_url).begin() as session:
        row = get_round(session, uid)
        assert row is not None
        assert row.request_key == f"datasample:{round_request(filter='dep_delay > 60').key()}"

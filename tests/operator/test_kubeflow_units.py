"""Kubeflow spark-operator applications: the operator's rules, without a server, where they
are Kubeflow's alone or tested through Kubeflow's applications only.

What both operators' applications share (``applicationRef`` naming the operator, the CRD's
rules, the driver Pod's labels and owner reference, ``find_driver`` when the server ignores
``labelSelector``, 403 from RBAC in ``read_application`` and ``readable``, the webhook's
verdicts, the examples) is ``test_foreign_apps_units.py``'s. Here: ``ApplicationRef``'s
defaults and refusals (CRD defaulting and pruning, which the emulator tests lack), the
controller owner reference the spark-operator sets, the running driver and its endpoint, the
names, state and settings, the control Secret (a 409 on create: the create race), the pinned
certificate and its renewal.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator import kubeflow, names, sample_fit
from sparkglass.operator.certificates import issue_control_certificate
from sparkglass.operator.foreign_apps import NotEnabled
from sparkglass.operator.kube.cluster import PODS, SECRETS
from sparkglass.operator.specs import ApplicationApiVersion, DataSampleSpec
from sparkglass.runtime.contract.errors import SamplingSettingsError
from tests.support.fake_cluster import FakeCluster
from tests.support.foreign_apps import KUBEFLOW, NS, UID

#: The minimal application and driver Pod the rule reads (``tests/support/foreign_apps.py``).
app = KUBEFLOW.bare_app
pod = KUBEFLOW.bare_pod


def secret_of(cluster: FakeCluster, name: str = "etl") -> dict[str, Any]:
    return cluster.objects[("secrets", NS, f"{name}-sparkglass-control")]


def decoded(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


# --------------------------------------------------------------------------- the spec
def test_application_ref_defaults_to_sparkglass() -> None:
    spec = DataSampleSpec.parse({"applicationRef": {"name": "flights"}, "vertex": "parse"})
    assert spec.application_ref.api_version is ApplicationApiVersion.SPARKGLASS
    assert spec.application_ref.kind.value == "SparkApplication"
    assert not spec.application_ref.is_kubeflow


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        (
            {"apiVersion": "sparkoperator.k8s.io/v1beta1", "name": "a"},
            ["applicationRef.apiVersion", "sparkglass.io/v1alpha1", "sparkoperator.k8s.io/v1beta2"],
        ),
        (
            {"kind": "ScheduledSparkApplication", "name": "a"},
            ["applicationRef.kind", "SparkApplication"],
        ),
        ({"namespace": "other", "name": "a"}, ["applicationRef.namespace", "own namespace"]),
    ],
)
def test_bad_application_ref_names_the_field_and_the_allowed_values(
    ref: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(ValidationError) as info:
        DataSampleSpec.parse({"applicationRef": ref, "vertex": "parse"})
    message = info.value.errors()[0]["msg"]
    for word in words:
        assert word in message, message


def test_the_kind_description_names_error_rows() -> None:
    from tests.support.crd_schema import schema_of

    text = schema_of("DataSample")["properties"]["spec"]["properties"]["kind"]["description"]
    for words in ("error rows", "corrupt", "on_failure=emit_error", "on_error=emit_error"):
        assert words in text, words


# --------------------------------------------------------------------------- the driver Pod
def test_the_driver_pod_needs_a_controller_reference_to_the_uid() -> None:
    """The spark-operator sets ``controller: true`` on the driver Pod's owner reference, so
    Kubeflow's rule requires it (the Apache operator's does not: ``test_apache_spark_units.py``;
    the labels, uid, group and namespace: ``test_foreign_apps_units.py``)."""
    a = app()
    assert kubeflow.is_driver_pod(pod(), a)
    assert not kubeflow.is_driver_pod(pod(controller=False), a)
    # A reference without the field, as the Apache operator writes it, does not qualify.
    ref = {"apiVersion": kubeflow.API_VERSION, "kind": "SparkApplication", "uid": UID}
    no_field = pod(refs=[ref])
    assert not kubeflow.is_driver_pod(no_field, a)
    no_field["metadata"]["ownerReferences"][0]["controller"] = True
    assert kubeflow.is_driver_pod(no_field, a)


def test_the_running_driver_is_the_newest_running_owned_pod() -> None:
    a = app()
    pods = [
        pod("old", created="2026-01-01T00:00:00Z"),
        pod("new", created="2026-01-02T00:00:00Z"),
        pod("pending", created="2026-01-03T00:00:00Z", phase="Pending"),
        pod("no-ip", created="2026-01-03T00:00:00Z", ip=None),
        pod("fake", created="2026-01-04T00:00:00Z", refs=[]),
    ]
    deleting = pod("deleting", created="2026-01-05T00:00:00Z")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-05T00:00:01Z"
    found = kubeflow.running_driver([*pods, deleting], a)
    assert found is not None and found["metadata"]["name"] == "new"
    assert kubeflow.running_driver([pods[4]], a) is None


def test_the_endpoint_is_the_pod_ip_and_its_declared_port_over_https() -> None:
    assert kubeflow.control_endpoint(pod()) == "https://10.0.0.7:4045"
    assert kubeflow.control_endpoint(pod(ip="fd00::7")) == "https://[fd00::7]:4045"
    assert kubeflow.control_endpoint(pod(port=None)) is None
    assert kubeflow.control_endpoint(pod(port=70000)) is None
    assert kubeflow.control_endpoint(pod(phase="Pending")) is None
    other = pod(port=None)
    other["spec"]["containers"][0]["ports"] = [{"name": "spark-ui", "containerPort": 4040}]
    assert kubeflow.control_endpoint(other) is None


# --------------------------------------------------------------------------- the application
def test_names_state_and_settings() -> None:
    assert kubeflow.secret_name("etl") == "etl-sparkglass-control"
    assert kubeflow.tls_server_name("etl", NS) == f"etl-sparkglass-control.{NS}.svc"
    assert kubeflow.app_name_problem("a" * 44) is None
    for bad in ("a" * 45, "Etl", "etl.v2", "-etl", "etl-"):
        problem = kubeflow.app_name_problem(bad)
        assert problem is not None and "44" in problem, bad
    assert kubeflow.application_state(app()) == "RUNNING"
    assert kubeflow.application_state({"status": {"applicationState": {"state": 7}}}) == ""
    settings = kubeflow.sampling_settings(
        app(**{"spark.sparkglass.sampling.sampling-window": "5s"})
    )
    assert settings.enabled and settings.sampling_window_ms == 5000
    assert not kubeflow.sampling_settings({"spec": {}}).enabled
    assert kubeflow.sampling_requested(app())
    assert not kubeflow.sampling_requested(app(**{"spark.sparkglass.sampling.enabled": "yes"}))
    with pytest.raises(SamplingSettingsError, match=r"spark\.sparkglass\.sampling\.timeout"):
        kubeflow.sampling_settings(app(**{"spark.sparkglass.sampling.timeout": "1h"}))


# --------------------------------------------------------------------------- the Secret
async def test_the_control_secret_is_created_labelled_and_owned() -> None:
    cluster = FakeCluster()
    secret = await kubeflow.ensure_control_secret(cluster, app())
    assert secret is not None and kubeflow.owns_secret(secret, app())
    meta = secret["metadata"]
    assert meta["name"] == "etl-sparkglass-control" and meta["namespace"] == NS
    assert meta["labels"][names.LABEL_ROLE] == names.ROLE_CONTROL_TOKEN
    (ref,) = meta["ownerReferences"]
    assert ref["uid"] == UID and ref["controller"] is True and ref["blockOwnerDeletion"] is False
    assert len(decoded(secret, "token")) >= 32
    # A second pass finds it and changes nothing.
    again = await kubeflow.ensure_control_secret(cluster, app())
    assert again is not None and decoded(again, "token") == decoded(secret, "token")
    assert [c for c in cluster.calls if c[0] == "create"] == [("create", "secrets")]


async def test_a_create_race_keeps_the_other_pass_secret() -> None:
    cluster = FakeCluster()
    cluster.conflict_once = True
    secret = await kubeflow.ensure_control_secret(cluster, app())
    assert secret is not None and decoded(secret, "token") == "the-other-pass"


async def test_a_secret_the_operator_did_not_create_is_never_read() -> None:
    for tamper in ("labels", "owner", "uid"):
        cluster = FakeCluster()
        own = await kubeflow.ensure_control_secret(cluster, app())
        assert own is not None
        squatted = copy.deepcopy(own)
        if tamper == "labels":
            squatted["metadata"]["labels"] = {}
        elif tamper == "owner":
            squatted["metadata"]["ownerReferences"] = []
        else:
            squatted["metadata"]["ownerReferences"][0]["uid"] = "another-uid"
        cluster.put(SECRETS, squatted)
        assert await kubeflow.ensure_control_secret(cluster, app()) is None
        access = await kubeflow.driver_access(cluster, app(), pod())
        assert access.token is None, tamper


async def test_driver_access_pins_the_secret_certificate_to_its_name() -> None:
    cluster = FakeCluster()
    access = await kubeflow.driver_access(cluster, app(), pod())
    secret = secret_of(cluster)
    assert access.endpoint == "https://10.0.0.7:4045" and access.refusal is None
    assert access.token == decoded(secret, "token")
    assert access.tls is not None
    assert access.tls.server_name == f"etl-sparkglass-control.{NS}.svc"
    assert access.tls.ca_pem == decoded(secret, "tls.crt")
    with pytest.raises(ValueError, match=r"spec\.driver\.ports"):
        await kubeflow.driver_access(cluster, app(), pod(port=None))


async def test_no_usable_certificate_is_a_refusal_not_a_cleartext_fallback() -> None:
    cluster = FakeCluster()
    await kubeflow.ensure_control_secret(cluster, app())
    secret = secret_of(cluster)
    del secret["data"]["tls.crt"]
    access = await kubeflow.driver_access(cluster, app(), pod())
    assert access.refusal and "holds no certificate" in access.refusal and access.tls is None
    old = issue_control_certificate(
        "etl-sparkglass-control",
        NS,
        validity=timedelta(hours=2),
        now=datetime.now(UTC) - timedelta(hours=3),
    )
    secret["data"].update(
        {k: base64.b64encode(v.encode()).decode() for k, v in old.secret_data().items()}
    )
    access = await kubeflow.driver_access(cluster, app(), pod())
    assert access.refusal and "expired" in access.refusal


async def test_renewal_keeps_the_token_and_waits_for_the_driver_to_end() -> None:
    cluster = FakeCluster()
    await kubeflow.ensure_control_secret(cluster, app())
    secret = secret_of(cluster)
    token, cert = decoded(secret, "token"), decoded(secret, "tls.crt")
    soon = issue_control_certificate("etl-sparkglass-control", NS, validity=timedelta(days=2))
    secret["data"].update(
        {k: base64.b64encode(v.encode()).decode() for k, v in soon.secret_data().items()}
    )
    cluster.put(PODS, pod())
    await kubeflow.ensure_control_secret(cluster, app(), renew=True)
    assert decoded(secret_of(cluster), "tls.crt") == soon.cert_pem  # a driver runs: kept
    cluster.objects.pop(("pods", NS, "etl-driver"))
    await kubeflow.ensure_control_secret(cluster, app(), renew=True)
    renewed = secret_of(cluster)
    assert decoded(renewed, "tls.crt") not in (soon.cert_pem, cert)
    assert decoded(renewed, "token") == token


# --------------------------------------------------------------------------- the webhook
def test_kubeflow_not_enabled_is_not_enabled_for_kubeflow() -> None:
    """The Kubeflow shorthand gives Kubeflow's reason (each operator's own reason:
    ``test_foreign_apps_units.py``)."""
    misfit = sample_fit.kubeflow_not_enabled(NotEnabled("no"))
    assert misfit.reason.value == "KubeflowNotEnabled" and misfit.denies

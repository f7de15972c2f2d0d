"""Kubeflow spark-operator applications: the operator's rules, without a server.

Covers what the emulator tests (``test_kubeflow.py``) cannot show because kmock lacks the
behaviour: a server that ignores ``labelSelector`` (``find_driver`` still filters), a 409 on
create (the Secret's create race), 403 from RBAC (``read_application``, ``readable``), CRD
defaulting, pruning and CEL (``ApplicationRef``, the CRD's rules with ``celpy``). And the
examples agree with the rule: the port, the Secret, the TLS files.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import yaml
from pydantic import ValidationError

from sparkglass.operator import kubeflow, names
from sparkglass.operator.admission import AdmissionRequest, DataSampleReviewer, Verdict
from sparkglass.operator.certificates import issue_control_certificate
from sparkglass.operator.context import OperatorContext
from sparkglass.operator.kube.cluster import (
    PODS,
    SECRETS,
    ApiError,
    Cluster,
    NotFound,
)
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.specs import (
    ApplicationApiVersion,
    DataSampleSpec,
)
from sparkglass.runtime.contract.errors import SamplingSettingsError
from tests.support.fake_cluster import FakeCluster

from .conftest import EXAMPLES_DIR

NS = "spark-jobs"
UID = "3f1c2a9e-0000-4000-8000-000000000001"


def app(name: str = "etl", **conf: str) -> dict[str, Any]:
    return {
        "apiVersion": kubeflow.API_VERSION,
        "kind": kubeflow.KIND,
        "metadata": {"name": name, "namespace": NS, "uid": UID},
        "spec": {"sparkConf": {"spark.sparkglass.sampling.enabled": "true", **conf}},
        "status": {"applicationState": {"state": "RUNNING"}},
    }


def pod(
    name: str = "etl-driver",
    *,
    app_name: str = "etl",
    uid: str = UID,
    controller: bool = True,
    role: str = "driver",
    phase: str = "Running",
    ip: str | None = "10.0.0.7",
    port: int | None = 4045,
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = NS,
    refs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    ref = {
        "apiVersion": kubeflow.API_VERSION,
        "kind": kubeflow.KIND,
        "name": app_name,
        "uid": uid,
        "controller": controller,
    }
    ports = [{"name": "sg-control", "containerPort": port}] if port is not None else []
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"pod-{name}",
            "creationTimestamp": created,
            "labels": {"spark-role": role, "sparkoperator.k8s.io/app-name": app_name},
            "ownerReferences": [ref] if refs is None else refs,
        },
        "spec": {"containers": [{"name": "spark-kubernetes-driver", "ports": ports}]},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


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


def test_application_ref_names_kubeflow() -> None:
    ref = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication", "name": "a"}
    spec = DataSampleSpec.parse({"applicationRef": ref, "vertex": "parse"})
    assert spec.application_ref.is_kubeflow


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


def test_crd_rules_accept_both_kinds_and_refuse_the_rest() -> None:
    from tests.support.crd_cel import violations
    from tests.support.crd_schema import validate

    sample = yaml.safe_load((EXAMPLES_DIR / "kubeflow-datasample.yaml").read_text())
    validate("DataSample", sample)
    assert violations("DataSample", sample) == []
    plain = copy.deepcopy(sample)
    plain["spec"]["applicationRef"] = {"name": "a" * 60}  # sparkglass's: the default
    assert violations("DataSample", plain) == []
    long = copy.deepcopy(sample)
    long["spec"]["applicationRef"]["name"] = "a" * 45
    assert any("size(self.name) <= 44" in v for v in violations("DataSample", long))
    dotted = copy.deepcopy(sample)
    dotted["spec"]["applicationRef"]["name"] = "a.b"
    assert violations("DataSample", dotted)
    import jsonschema

    for field, value in (("apiVersion", "sparkoperator.k8s.io/v1beta1"), ("kind", "Job")):
        bad = copy.deepcopy(sample)
        bad["spec"]["applicationRef"][field] = value
        with pytest.raises(jsonschema.ValidationError):
            validate("DataSample", bad)


def test_the_kind_description_names_error_rows() -> None:
    from tests.support.crd_schema import schema_of

    text = schema_of("DataSample")["properties"]["spec"]["properties"]["kind"]["description"]
    for words in ("error rows", "corrupt", "on_failure=emit_error", "on_error=emit_error"):
        assert words in text, words


# --------------------------------------------------------------------------- the driver Pod
def test_the_driver_pod_needs_the_labels_and_a_controller_reference_to_the_uid() -> None:
    a = app()
    assert kubeflow.is_driver_pod(pod(), a)
    assert not kubeflow.is_driver_pod(pod(refs=[]), a)
    assert not kubeflow.is_driver_pod(pod(uid="another-uid"), a)
    assert not kubeflow.is_driver_pod(pod(controller=False), a)
    assert not kubeflow.is_driver_pod(pod(role="executor"), a)
    assert not kubeflow.is_driver_pod(pod(app_name="other"), a)
    assert not kubeflow.is_driver_pod(pod(namespace="elsewhere"), a)
    wrong_kind = pod()
    wrong_kind["metadata"]["ownerReferences"][0]["apiVersion"] = "sparkglass.io/v1alpha1"
    assert not kubeflow.is_driver_pod(wrong_kind, a)
    no_uid = app()
    del no_uid["metadata"]["uid"]
    assert not kubeflow.is_driver_pod(pod(uid=""), no_uid)


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


async def test_find_driver_filters_itself_when_the_server_ignores_the_selector() -> None:
    cluster = FakeCluster()
    cluster.put(kubeflow.APPS, app())
    for p in (
        pod("impostor", refs=[], created="2026-02-01T00:00:00Z"),
        pod("other-app", app_name="other", uid="other-uid", created="2026-02-01T00:00:00Z"),
        pod("executor", role="executor", created="2026-02-01T00:00:00Z"),
        pod("etl-driver"),
    ):
        cluster.put(PODS, p)
    found = await kubeflow.find_driver(cluster, app())
    assert isinstance(found, dict) and found["metadata"]["name"] == "etl-driver"
    cluster.objects = {k: v for k, v in cluster.objects.items() if k[2] != "etl-driver"}
    why = await kubeflow.find_driver(cluster, app())
    assert isinstance(why, str) and "owned by the application's uid" in why


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


async def test_read_application_says_how_to_enable_on_403() -> None:
    cluster = FakeCluster()
    assert await kubeflow.read_application(cluster, NS, "etl") is None
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    with pytest.raises(kubeflow.NotEnabled, match=r"kubeflow\.enabled=true"):
        await kubeflow.read_application(cluster, NS, "etl")
    cluster.fail["sparkapplications"] = ApiError(500, "boom")
    with pytest.raises(ApiError):
        await kubeflow.read_application(cluster, NS, "etl")


async def test_readable_probes_where_the_operator_works() -> None:
    cluster = FakeCluster()
    assert await kubeflow.readable(cluster, ("a", "b")) is None
    assert [c[1] for c in cluster.calls] == [
        "/apis/sparkoperator.k8s.io/v1beta2/namespaces/a/sparkapplications",
        "/apis/sparkoperator.k8s.io/v1beta2/namespaces/b/sparkapplications",
    ]
    cluster.calls.clear()
    assert await kubeflow.readable(cluster, ()) is None
    assert await kubeflow.readable(cluster, ("team-*",)) is None
    assert {c[1] for c in cluster.calls} == {"/apis/sparkoperator.k8s.io/v1beta2/sparkapplications"}
    cluster.fail["/apis/sparkoperator.k8s.io/v1beta2/sparkapplications"] = NotFound(404, "no")
    assert "not installed" in str(await kubeflow.readable(cluster, ()))
    cluster.fail["/apis/sparkoperator.k8s.io/v1beta2/sparkapplications"] = ApiError(403, "no")
    assert "kubeflow.enabled" in str(await kubeflow.readable(cluster, ()))


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
async def review_kubeflow(cluster: FakeCluster, name: str = "etl", **spec: Any) -> Verdict:
    """The admission webhook's verdict on creating a DataSample of the Kubeflow application
    ``name`` in ``NS`` (the reviewer of ``operator/admission.py``, without its server)."""
    ref = {"apiVersion": kubeflow.API_VERSION, "kind": kubeflow.KIND, "name": name}
    request = AdmissionRequest.model_validate(
        {
            "uid": "u-1",
            "kind": {"group": "sparkglass.io", "version": "v1alpha1", "kind": "DataSample"},
            "namespace": NS,
            "operation": "CREATE",
            "object": {
                "metadata": {"name": "s", "namespace": NS},
                "spec": {"applicationRef": ref, "vertex": "parse", **spec},
            },
        }
    )
    ctx = OperatorContext(config=OperatorConfig(namespaces=(NS,)), cluster=cast(Cluster, cluster))
    return await DataSampleReviewer(ctx).review(request)


async def test_the_webhook_checks_a_kubeflow_datasample_by_the_reconcilers_rules() -> None:
    """The rules of ``sample_fit`` (``test_sample_fit.py``), as the webhook answers them:
    a DataSample's own field at fault is denied, the application's fault is a warning, and
    the driver of a Kubeflow application is never asked at admission."""
    cluster = FakeCluster()
    verdict = await review_kubeflow(cluster)
    assert verdict.denied is None
    assert verdict.warnings == (
        f"Kubeflow SparkApplication 'etl' is not in namespace {NS!r} yet; the DataSample "
        "waits for it and is checked when its round opens",
    )
    cluster.put(kubeflow.APPS, app(**{"spark.sparkglass.sampling.sampling-window": "2s"}))
    verdict = await review_kubeflow(cluster, samplingWindow="3s")
    assert verdict.denied == (
        "spec.samplingWindow: 3s exceeds the application's 2s "
        "(spec.sparkConf spark.sparkglass.sampling.sampling-window)"
    )
    (warning,) = (await review_kubeflow(cluster, samplingWindow="2s")).warnings
    assert warning.startswith("kind, filter, columns and vertex not checked yet: the driver of")
    assert [c for c in cluster.calls if c[0] != "get"] == []  # no Secret made, no Pod listed
    cluster.put(kubeflow.APPS, app(**{"spark.sparkglass.sampling.enabled": "false"}))
    verdict = await review_kubeflow(cluster)
    assert verdict.denied is None and verdict.warnings == (
        "sampling is disabled for 'etl' (spec.sparkConf spark.sparkglass.sampling.enabled is "
        "not true): the DataSample will end Disabled",
    )
    cluster.put(kubeflow.APPS, app(**{"spark.sparkglass.sampling.timeout": "1h"}))
    (warning,) = (await review_kubeflow(cluster)).warnings
    assert warning.startswith(
        "not checked: 'etl' spec.sparkConf: spark.sparkglass.sampling.timeout"
    )
    # A name past the CRD's rule (an API server without CEL): denied, as the reconciler
    # fails it (the webhook admitted it before the rules had one module).
    long_name = "e" * 45
    cluster.put(kubeflow.APPS, app(long_name))
    verdict = await review_kubeflow(cluster, long_name)
    assert verdict.denied == f"spec.applicationRef.name: {kubeflow.app_name_problem(long_name)}"
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    verdict = await review_kubeflow(cluster)
    assert verdict.denied is not None
    assert verdict.denied.startswith("spec.applicationRef: the operator may not read")


# --------------------------------------------------------------------------- the examples
def test_the_example_application_follows_the_rule() -> None:
    docs = list(yaml.safe_load_all((EXAMPLES_DIR / "kubeflow-sparkapplication.yaml").read_text()))
    spark_app, service = docs
    name = spark_app["metadata"]["name"]
    assert spark_app["apiVersion"] == kubeflow.API_VERSION and spark_app["kind"] == kubeflow.KIND
    assert kubeflow.app_name_problem(name) is None
    spec, conf = spark_app["spec"], spark_app["spec"]["sparkConf"]
    assert kubeflow.sampling_settings(spark_app).enabled
    assert "io.sparkglass.sampling.SamplingPlugin" in conf["spark.plugins"]
    assert any(j.endswith("sparkglass-tap.jar") for j in spec["deps"]["jars"])
    (port,) = [p for p in spec["driver"]["ports"] if p["name"] == kubeflow.CONTROL_PORT_NAME]
    assert str(port["containerPort"]) == conf["spark.sparkglass.control.port"]
    assert conf["spark.sparkglass.control.host"] == "0.0.0.0"
    (token,) = [e for e in spec["driver"]["env"] if e["name"] == "SPARKGLASS_CONTROL_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {
        "name": kubeflow.secret_name(name),
        "key": "token",
    }
    (volume,) = [v for v in spec["volumes"] if v.get("secret")]
    assert volume["secret"]["secretName"] == kubeflow.secret_name(name)
    (mount,) = [m for m in spec["driver"]["volumeMounts"] if m["name"] == volume["name"]]
    for key in ("cert-file", "key-file"):
        assert conf[f"spark.sparkglass.control.tls.{key}"].startswith(mount["mountPath"] + "/")
    # The optional Service selects the driver by the spark-operator's labels, on the same port.
    assert service["metadata"]["name"] == kubeflow.secret_name(name)
    assert service["spec"]["selector"] == {
        "spark-role": "driver",
        "sparkoperator.k8s.io/app-name": name,
    }
    assert service["spec"]["ports"][0]["targetPort"] == kubeflow.CONTROL_PORT_NAME
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(service, "1.32", strict=True)

    sample = yaml.safe_load((EXAMPLES_DIR / "kubeflow-datasample.yaml").read_text())
    ref = DataSampleSpec.parse(sample["spec"]).application_ref
    assert ref.is_kubeflow and ref.name == name
    assert sample["metadata"]["namespace"] == spark_app["metadata"]["namespace"]

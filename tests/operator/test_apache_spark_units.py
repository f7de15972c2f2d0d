"""Apache Spark Kubernetes operator applications: the operator's rules, without a server.

Covers what the emulator tests (``test_apache_spark.py``) cannot show: the owner-reference
rule case by case (the Apache operator writes no ``controller`` field, Kubeflow's rule still
requires one), the state reading, 403 from RBAC (``read_application``, ``readable``), the CRD's
rules with ``celpy``, the admission webhook's verdicts, and that the examples follow the rule.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
import yaml

from sparkglass.operator import apache_spark, kubeflow, sample_fit
from sparkglass.operator.admission import AdmissionRequest, DataSampleReviewer, Verdict
from sparkglass.operator.context import OperatorContext
from sparkglass.operator.foreign_apps import CONTROL_PORT_NAME, NotEnabled, secret_name
from sparkglass.operator.kube.cluster import PODS, ApiError, Cluster
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.specs import ApplicationApiVersion, DataSampleSpec
from tests.support.fake_cluster import FakeCluster

from .conftest import EXAMPLES_DIR

APPS = apache_spark.APACHE_SPARK
NS = "spark-jobs"
UID = "3f1c2a9e-0000-4000-8000-0000000000a5"


def app(name: str = "etl", state: str = "RunningHealthy", **conf: str) -> dict[str, Any]:
    return {
        "apiVersion": apache_spark.API_VERSION,
        "kind": apache_spark.KIND,
        "metadata": {"name": name, "namespace": NS, "uid": UID},
        "spec": {"sparkConf": {"spark.sparkglass.sampling.enabled": "true", **conf}},
        "status": {"currentState": {"currentStateSummary": state}},
    }


def pod(
    *,
    app_name: str = "etl",
    uid: str = UID,
    api_version: str = apache_spark.API_VERSION,
    label: str = apache_spark.LABEL_APP_NAME,
    role: str = "driver",
    namespace: str = NS,
    refs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    # As the Apache operator writes it: no ``controller`` field.
    ref = {"apiVersion": api_version, "kind": "SparkApplication", "name": app_name, "uid": uid}
    return {
        "metadata": {
            "name": f"{app_name}-0-driver",
            "namespace": namespace,
            "labels": {"spark-role": role, label: app_name},
            "ownerReferences": [ref] if refs is None else refs,
        },
        "spec": {"containers": [{"ports": [{"name": CONTROL_PORT_NAME, "containerPort": 4045}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.9"},
    }


# --------------------------------------------------------------------------- the spec
def test_application_ref_names_the_apache_operator() -> None:
    ref = {"apiVersion": "spark.apache.org/v1", "kind": "SparkApplication", "name": "a"}
    spec = DataSampleSpec.parse({"applicationRef": ref, "vertex": "parse"})
    assert spec.application_ref.api_version is ApplicationApiVersion.APACHE_SPARK
    assert spec.application_ref.is_foreign and not spec.application_ref.is_kubeflow
    assert sample_fit.foreign(spec) is APPS
    plain = DataSampleSpec.parse({"applicationRef": {"name": "a"}, "vertex": "parse"})
    assert sample_fit.foreign(plain) is None and not plain.application_ref.is_foreign


def test_crd_rules_accept_the_apache_operator_and_bound_its_names() -> None:
    from tests.support.crd_cel import violations
    from tests.support.crd_schema import validate

    sample = yaml.safe_load((EXAMPLES_DIR / "apache-spark-datasample.yaml").read_text())
    validate("DataSample", sample)
    assert violations("DataSample", sample) == []
    long = copy.deepcopy(sample)
    long["spec"]["applicationRef"]["name"] = "a" * 45
    assert any("size(self.name) <= 44" in v for v in violations("DataSample", long))
    dotted = copy.deepcopy(sample)
    dotted["spec"]["applicationRef"]["name"] = "a.b"
    assert violations("DataSample", dotted)


# --------------------------------------------------------------------------- the driver Pod
def test_the_driver_pod_needs_the_labels_and_a_reference_to_the_uid() -> None:
    a = app()
    assert APPS.is_driver_pod(pod(), a)  # no ``controller``: what the Apache operator writes
    # Another served version of the group is the same application (the uid decides).
    assert APPS.is_driver_pod(pod(api_version="spark.apache.org/v1beta1"), a)
    assert not APPS.is_driver_pod(pod(refs=[]), a)
    assert not APPS.is_driver_pod(pod(uid="another-uid"), a)
    assert not APPS.is_driver_pod(pod(role="executor"), a)
    assert not APPS.is_driver_pod(pod(app_name="other"), a)
    assert not APPS.is_driver_pod(pod(namespace="elsewhere"), a)
    # Spark's own app-name label (spark.app.name) or Kubeflow's label is not the operator's.
    assert not APPS.is_driver_pod(pod(label="spark-app-name"), a)
    assert not APPS.is_driver_pod(pod(label=kubeflow.LABEL_APP_NAME), a)
    # A reference of the same uid under another group or kind is not this application.
    assert not APPS.is_driver_pod(pod(api_version="sparkoperator.k8s.io/v1beta2"), a)
    # Kubeflow's rule is unchanged: its operator sets ``controller``, so it is required.
    kf_app = {**a, "apiVersion": kubeflow.API_VERSION}
    kf_ref = {"apiVersion": kubeflow.API_VERSION, "kind": "SparkApplication", "uid": UID}
    kf_pod = pod(label=kubeflow.LABEL_APP_NAME, refs=[kf_ref])
    assert not kubeflow.is_driver_pod(kf_pod, kf_app)
    kf_pod["metadata"]["ownerReferences"][0]["controller"] = True
    assert kubeflow.is_driver_pod(kf_pod, kf_app)


async def test_find_driver_filters_itself_and_names_the_labels() -> None:
    cluster = FakeCluster()
    impostor = pod(refs=[])
    impostor["metadata"]["name"] = "impostor"
    cluster.put(PODS, impostor)
    found = await APPS.find_driver(cast(Cluster, cluster), app())
    assert isinstance(found, str)
    assert "spark.operator/spark-app-name=etl" in found and "Apache Spark operator" in found
    cluster.put(PODS, pod())
    found = await APPS.find_driver(cast(Cluster, cluster), app())
    assert not isinstance(found, str) and found["metadata"]["name"] == "etl-0-driver"


def test_the_state_is_the_current_state_summary() -> None:
    assert apache_spark.application_state(app(state="DriverReady")) == "DriverReady"
    assert apache_spark.application_state({"status": {}}) == ""
    assert "RunningHealthy" in APPS.running and "DriverRequested" not in APPS.running
    # Stopping states may lead to a restart: only the terminated ones end the wait.
    assert APPS.over == {"ResourceReleased", "TerminatedWithoutReleaseResources"}
    assert "Failed" not in APPS.over


async def test_read_application_says_how_to_enable_on_403() -> None:
    cluster = FakeCluster()
    assert await APPS.read_application(cast(Cluster, cluster), NS, "etl") is None
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    with pytest.raises(NotEnabled, match=r"apacheSparkOperator\.enabled=true"):
        await APPS.read_application(cast(Cluster, cluster), NS, "etl")


async def test_readable_probes_where_the_operator_works() -> None:
    cluster = FakeCluster()
    assert await APPS.readable(cast(Cluster, cluster), ("a",)) is None
    assert cluster.calls[-1][1] == "/apis/spark.apache.org/v1/namespaces/a/sparkapplications"
    cluster.fail["/apis/spark.apache.org/v1/sparkapplications"] = ApiError(403, "forbidden")
    why = await APPS.readable(cast(Cluster, cluster), ())
    assert why is not None and "apacheSparkOperator.enabled" in why


# --------------------------------------------------------------------------- the webhook
async def review(cluster: FakeCluster, name: str = "etl", **spec: Any) -> Verdict:
    """The admission webhook's verdict on creating a DataSample of the Apache operator's
    application ``name`` in ``NS``."""
    ref = {"apiVersion": apache_spark.API_VERSION, "kind": apache_spark.KIND, "name": name}
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


async def test_the_webhook_knows_apache_spark_operator_applications() -> None:
    cluster = FakeCluster()
    verdict = await review(cluster)
    assert verdict.denied is None and verdict.warnings == (
        f"Apache Spark operator SparkApplication 'etl' is not in namespace {NS!r} yet; the "
        "DataSample waits for it and is checked when its round opens",
    )
    # Sampling off: the application's fault, which no DataSample fixes; the warning names
    # the field, and the DataSample ends Disabled saying the same.
    cluster.put(APPS.apps, app(**{"spark.sparkglass.sampling.enabled": "false"}))
    verdict = await review(cluster)
    assert verdict.denied is None and verdict.warnings == (
        "sampling is disabled for 'etl' (spec.sparkConf spark.sparkglass.sampling.enabled is "
        "not true): the DataSample will end Disabled",
    )
    cluster.put(APPS.apps, app(**{"spark.sparkglass.sampling.sampling-window": "2s"}))
    verdict = await review(cluster, samplingWindow="3s")
    assert verdict.denied == (
        "spec.samplingWindow: 3s exceeds the application's 2s "
        "(spec.sparkConf spark.sparkglass.sampling.sampling-window)"
    )
    (warning,) = (await review(cluster, samplingWindow="2s")).warnings
    assert "the driver of Apache Spark operator applications is asked only when" in warning
    assert [c for c in cluster.calls if c[0] != "get"] == []  # no Secret made, no Pod listed
    long_name = "e" * 45
    cluster.put(APPS.apps, app(long_name))
    verdict = await review(cluster, long_name)
    assert verdict.denied == f"spec.applicationRef.name: {APPS.app_name_problem(long_name)}"
    assert "Apache Spark operator application name" in verdict.denied
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    verdict = await review(cluster)
    assert verdict.denied is not None and verdict.denied.startswith(
        "spec.applicationRef: the operator may not read sparkapplications.spark.apache.org"
    )
    assert "apacheSparkOperator.enabled=true" in verdict.denied


def test_not_enabled_has_its_own_reason() -> None:
    misfit = sample_fit.not_enabled(APPS, NotEnabled("no"))
    assert misfit.reason.value == "ApacheSparkOperatorNotEnabled" and misfit.denies
    assert sample_fit.kubeflow_not_enabled(NotEnabled("no")).reason.value == "KubeflowNotEnabled"


# --------------------------------------------------------------------------- the examples
def test_the_example_application_follows_the_rule() -> None:
    docs = list(
        yaml.safe_load_all((EXAMPLES_DIR / "apache-spark-sparkapplication.yaml").read_text())
    )
    spark_app, service = docs
    name = spark_app["metadata"]["name"]
    assert (spark_app["apiVersion"], spark_app["kind"]) == (APPS.api_version, APPS.kind)
    assert APPS.app_name_problem(name) is None
    spec, conf = spark_app["spec"], spark_app["spec"]["sparkConf"]
    assert APPS.state(spark_app) == ""  # nothing written yet: a DataSample would wait
    from sparkglass.operator.foreign_apps import sampling_settings

    assert sampling_settings(spark_app).enabled
    assert "io.sparkglass.sampling.SamplingPlugin" in conf["spark.plugins"]
    # The jar in sparkConf: a spec.jars entry would make the operator submit a JVM main jar.
    assert conf["spark.jars"].endswith("sparkglass-tap.jar") and "jars" not in spec
    assert spec["pyFiles"].endswith(".py")
    template = spec["driverSpec"]["podTemplateSpec"]["spec"]
    container = template["containers"][0]
    (port,) = [p for p in container["ports"] if p["name"] == CONTROL_PORT_NAME]
    assert str(port["containerPort"]) == conf["spark.sparkglass.control.port"]
    (token,) = [e for e in container["env"] if e["name"] == "SPARKGLASS_CONTROL_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": secret_name(name), "key": "token"}
    (volume,) = [v for v in template["volumes"] if v.get("secret")]
    assert volume["secret"]["secretName"] == secret_name(name)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    for key in ("cert-file", "key-file"):
        assert conf[f"spark.sparkglass.control.tls.{key}"].startswith(mount["mountPath"] + "/")
    assert service["spec"]["selector"] == {
        "spark-role": "driver",
        "spark.operator/spark-app-name": name,
    }
    assert service["spec"]["ports"][0]["targetPort"] == CONTROL_PORT_NAME

    sample = yaml.safe_load((EXAMPLES_DIR / "apache-spark-datasample.yaml").read_text())
    ref = DataSampleSpec.parse(sample["spec"]).application_ref
    assert ref.api_version is ApplicationApiVersion.APACHE_SPARK and ref.name == name
    assert sample["metadata"]["namespace"] == spark_app["metadata"]["namespace"]

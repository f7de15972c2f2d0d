"""Another operator's applications: the rule both share, without a server. Each test runs
once for Kubeflow's spark-operator and once for the Apache Spark Kubernetes operator (ids
``kubeflow``, ``apache-spark``; what differs between them is
``tests/support/foreign_apps.py``'s data).

Covers what the emulator tests (``test_foreign_apps.py``) cannot show because the stand-in
API server lacks the behaviour: a server that ignores ``labelSelector`` (``find_driver``
still filters), 403 from RBAC (``read_application``, ``readable``), CEL (the CRD's rules with
``celpy``), the admission webhook's verdicts; the driver Pod rule case by case; and that the
examples follow the rule. What only one operator does: ``test_kubeflow_units.py``,
``test_apache_spark_units.py``.
"""

from __future__ import annotations

import copy
import re
from typing import Any, cast

import pytest
import yaml

from sparkglass.operator import sample_fit
from sparkglass.operator.admission import AdmissionRequest, DataSampleReviewer, Verdict
from sparkglass.operator.context import OperatorContext
from sparkglass.operator.foreign_apps import (
    CONTROL_PORT_NAME,
    NotEnabled,
    sampling_settings,
    secret_name,
)
from sparkglass.operator.kube.cluster import PODS, ApiError, Cluster, NotFound
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.specs import ApplicationApiVersion, DataSampleSpec
from tests.support.fake_cluster import FakeCluster
from tests.support.foreign_apps import KUBEFLOW, NS, OPERATORS, ForeignOperator
from tests.support.foreign_apps import foreign as foreign  # the fixture, by name


def other_than(foreign: ForeignOperator) -> ForeignOperator:
    """The other one of the two operators."""
    (other,) = [op for op in OPERATORS if op is not foreign]
    return other


# --------------------------------------------------------------------------- the spec
def test_application_ref_names_the_operator(foreign: ForeignOperator) -> None:
    """``applicationRef.apiVersion`` picks the operator's rule; without it the DataSample
    names sparkglass's own application, which is no other operator's."""
    ref = {"apiVersion": foreign.rule.api_version, "kind": "SparkApplication", "name": "a"}
    spec = DataSampleSpec.parse({"applicationRef": ref, "vertex": "parse"})
    assert spec.application_ref.api_version is ApplicationApiVersion(foreign.rule.api_version)
    assert spec.application_ref.is_foreign
    assert spec.application_ref.is_kubeflow is (foreign is KUBEFLOW)
    assert sample_fit.foreign(spec) is foreign.rule
    plain = DataSampleSpec.parse({"applicationRef": {"name": "a"}, "vertex": "parse"})
    assert sample_fit.foreign(plain) is None and not plain.application_ref.is_foreign


def test_crd_rules_accept_the_operator_and_bound_its_names(foreign: ForeignOperator) -> None:
    """The DataSample CRD admits the example DataSample, bounds the application's name to
    what its Secret's name allows (sparkglass's own applications are not bound), and its
    schema refuses another version of the group or another kind."""
    from tests.support.crd_cel import violations
    from tests.support.crd_schema import validate

    sample = yaml.safe_load(foreign.sample_file.read_text())
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

    for field, value in (("apiVersion", f"{foreign.rule.group}/v1beta1"), ("kind", "Job")):
        bad = copy.deepcopy(sample)
        bad["spec"]["applicationRef"][field] = value
        with pytest.raises(jsonschema.ValidationError):
            validate("DataSample", bad)


# --------------------------------------------------------------------------- the driver Pod
def test_the_driver_pod_needs_the_labels_and_an_owner_reference_to_the_uid(
    foreign: ForeignOperator,
) -> None:
    """Spark's role label, the operator's own application label, the application's
    namespace and an owner reference to its uid under its group and kind make a driver Pod;
    labels alone, another uid, group, label or namespace do not. (Whether the reference
    must be a controller one: the per-operator unit tests.)"""
    rule, a = foreign.rule, foreign.bare_app()
    other = other_than(foreign)
    assert rule.is_driver_pod(foreign.bare_pod(), a)
    # Another served version of the group is the same application (the uid decides).
    assert rule.is_driver_pod(foreign.bare_pod(api_version=f"{rule.group}/v1beta1"), a)
    assert not rule.is_driver_pod(foreign.bare_pod(refs=[]), a)
    assert not rule.is_driver_pod(foreign.bare_pod(uid="another-uid"), a)
    assert not rule.is_driver_pod(foreign.bare_pod(role="executor"), a)
    assert not rule.is_driver_pod(foreign.bare_pod(app_name="other"), a)
    assert not rule.is_driver_pod(foreign.bare_pod(namespace="elsewhere"), a)
    # Spark's own app-name label (spark.app.name) or the other operator's is not this one's.
    assert not rule.is_driver_pod(foreign.bare_pod(label="spark-app-name"), a)
    assert not rule.is_driver_pod(foreign.bare_pod(label=other.rule.app_label), a)
    # A reference of the same uid under another group or kind is not this application.
    for api_version in ("sparkglass.io/v1alpha1", other.rule.api_version):
        assert not rule.is_driver_pod(foreign.bare_pod(api_version=api_version), a), api_version
    wrong_kind = foreign.bare_pod()
    wrong_kind["metadata"]["ownerReferences"][0]["kind"] = "ScheduledSparkApplication"
    assert not rule.is_driver_pod(wrong_kind, a)
    # An application without a uid owns nothing (an empty uid matches no reference).
    no_uid = foreign.bare_app()
    del no_uid["metadata"]["uid"]
    assert not rule.is_driver_pod(foreign.bare_pod(uid=""), no_uid)


async def test_find_driver_filters_itself_when_the_server_ignores_the_selector(
    foreign: ForeignOperator,
) -> None:
    """The fake cluster ignores the label selector: ``find_driver`` still takes only the
    application's own driver Pod, and without one says which labels and owner it looked
    for."""
    rule, pod = foreign.rule, foreign.bare_pod
    cluster = FakeCluster()
    cluster.put(rule.apps, foreign.bare_app())
    driver_name = pod()["metadata"]["name"]
    for p in (
        pod("impostor", refs=[], created="2026-02-01T00:00:00Z"),
        pod("other-app", app_name="other", uid="other-uid", created="2026-02-01T00:00:00Z"),
        pod("executor", role="executor", created="2026-02-01T00:00:00Z"),
        pod(),
    ):
        cluster.put(PODS, p)
    found = await rule.find_driver(cast(Cluster, cluster), foreign.bare_app())
    assert isinstance(found, dict) and found["metadata"]["name"] == driver_name
    cluster.objects = {k: v for k, v in cluster.objects.items() if k[2] != driver_name}
    why = await rule.find_driver(cast(Cluster, cluster), foreign.bare_app())
    assert isinstance(why, str) and "owned by the application's uid" in why
    assert f"{rule.app_label}=etl" in why and rule.owner in why


# --------------------------------------------------------------------------- the application
async def test_read_application_says_how_to_enable_on_403(foreign: ForeignOperator) -> None:
    """A missing application is None; a 403 says which chart value grants reading them;
    other API errors are raised as they are."""
    rule, cluster = foreign.rule, FakeCluster()
    assert await rule.read_application(cast(Cluster, cluster), NS, "etl") is None
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    with pytest.raises(NotEnabled, match=re.escape(f"{rule.chart_value}=true")):
        await rule.read_application(cast(Cluster, cluster), NS, "etl")
    cluster.fail["sparkapplications"] = ApiError(500, "boom")
    with pytest.raises(ApiError):
        await rule.read_application(cast(Cluster, cluster), NS, "etl")


async def test_readable_probes_where_the_operator_works(foreign: ForeignOperator) -> None:
    """At start the operator lists the applications in each namespace it works in (or
    cluster-wide for none or a pattern), and says why it will not watch them: no CRD, or
    the chart value."""
    rule, cluster = foreign.rule, FakeCluster()
    base = f"/apis/{rule.api_version}"
    assert await rule.readable(cast(Cluster, cluster), ("a",)) is None
    assert cluster.calls[-1][1] == f"{base}/namespaces/a/sparkapplications"
    cluster.calls.clear()
    assert await rule.readable(cast(Cluster, cluster), ("a", "b")) is None
    assert [c[1] for c in cluster.calls] == [
        f"{base}/namespaces/a/sparkapplications",
        f"{base}/namespaces/b/sparkapplications",
    ]
    cluster.calls.clear()
    assert await rule.readable(cast(Cluster, cluster), ()) is None
    assert await rule.readable(cast(Cluster, cluster), ("team-*",)) is None
    assert {c[1] for c in cluster.calls} == {f"{base}/sparkapplications"}
    cluster.fail[f"{base}/sparkapplications"] = NotFound(404, "no")
    assert "not installed" in str(await rule.readable(cast(Cluster, cluster), ()))
    cluster.fail[f"{base}/sparkapplications"] = ApiError(403, "no")
    assert rule.chart_value in str(await rule.readable(cast(Cluster, cluster), ()))


def test_not_enabled_has_its_own_reason(foreign: ForeignOperator) -> None:
    """A DataSample of an operator the chart does not let it read is refused with that
    operator's reason."""
    misfit = sample_fit.not_enabled(foreign.rule, NotEnabled("no"))
    assert misfit.reason.value == foreign.not_enabled_reason and misfit.denies


# --------------------------------------------------------------------------- the webhook
async def review(
    foreign: ForeignOperator, cluster: FakeCluster, name: str = "etl", **spec: Any
) -> Verdict:
    """The admission webhook's verdict on creating a DataSample of ``foreign``'s application
    ``name`` in ``NS`` (the reviewer of ``operator/admission.py``, without its server)."""
    ref = {"apiVersion": foreign.rule.api_version, "kind": foreign.rule.kind, "name": name}
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


async def test_the_webhook_checks_a_datasample_by_the_reconcilers_rules(
    foreign: ForeignOperator,
) -> None:
    """The rules of ``sample_fit`` (``test_sample_fit.py``), as the webhook answers them:
    a DataSample's own field at fault is denied, the application's fault is a warning, and
    the driver of another operator's application is never asked at admission."""
    rule, cluster = foreign.rule, FakeCluster()
    app = foreign.bare_app
    verdict = await review(foreign, cluster)
    assert verdict.denied is None
    assert verdict.warnings == (
        f"{rule.kind_title} 'etl' is not in namespace {NS!r} yet; the DataSample "
        "waits for it and is checked when its round opens",
    )
    cluster.put(rule.apps, app(**{"spark.sparkglass.sampling.sampling-window": "2s"}))
    verdict = await review(foreign, cluster, samplingWindow="3s")
    assert verdict.denied == (
        "spec.samplingWindow: 3s exceeds the application's 2s "
        "(spec.sparkConf spark.sparkglass.sampling.sampling-window)"
    )
    (warning,) = (await review(foreign, cluster, samplingWindow="2s")).warnings
    assert warning.startswith("kind, filter, columns and vertex not checked yet: the driver of")
    assert f"the driver of {rule.owner} applications is asked only when" in warning
    assert [c for c in cluster.calls if c[0] != "get"] == []  # no Secret made, no Pod listed
    # Sampling off: the application's fault, which no DataSample fixes; the warning names
    # the field, and the DataSample ends Disabled saying the same.
    cluster.put(rule.apps, app(**{"spark.sparkglass.sampling.enabled": "false"}))
    verdict = await review(foreign, cluster)
    assert verdict.denied is None and verdict.warnings == (
        "sampling is disabled for 'etl' (spec.sparkConf spark.sparkglass.sampling.enabled is "
        "not true): the DataSample will end Disabled",
    )
    cluster.put(rule.apps, app(**{"spark.sparkglass.sampling.timeout": "1h"}))
    (warning,) = (await review(foreign, cluster)).warnings
    assert warning.startswith(
        "not checked: 'etl' spec.sparkConf: spark.sparkglass.sampling.timeout"
    )
    # A name past the CRD's rule (an API server without CEL): denied, as the reconciler
    # fails it (the webhook admitted it before the rules had one module).
    long_name = "e" * 45
    cluster.put(rule.apps, app(long_name))
    verdict = await review(foreign, cluster, long_name)
    assert verdict.denied == f"spec.applicationRef.name: {rule.app_name_problem(long_name)}"
    assert f"{rule.owner} application name" in verdict.denied
    cluster.fail["sparkapplications"] = ApiError(403, "forbidden")
    verdict = await review(foreign, cluster)
    assert verdict.denied is not None
    assert verdict.denied.startswith(
        f"spec.applicationRef: the operator may not read {rule.resource}"
    )
    assert f"{rule.chart_value}=true" in verdict.denied


# --------------------------------------------------------------------------- the examples
def test_the_example_application_follows_the_rule(foreign: ForeignOperator) -> None:
    """The example application opts in to sampling, loads the plugin and the tap jar,
    declares the ``sg-control`` port the driver listens on, takes the token and the TLS
    files from the operator's Secret; its optional Service selects the driver by the
    operator's labels; the example DataSample names it."""
    rule = foreign.rule
    docs = list(yaml.safe_load_all(foreign.example_file.read_text()))
    spark_app, service = docs
    name = spark_app["metadata"]["name"]
    assert (spark_app["apiVersion"], spark_app["kind"]) == (rule.api_version, rule.kind)
    assert rule.app_name_problem(name) is None
    assert rule.state(spark_app) == ""  # nothing written yet: a DataSample would wait
    conf = spark_app["spec"]["sparkConf"]
    declared = foreign.declared(spark_app)
    assert sampling_settings(spark_app).enabled
    assert "io.sparkglass.sampling.SamplingPlugin" in conf["spark.plugins"]
    assert any(j.endswith("sparkglass-tap.jar") for j in declared.jars)
    container = declared.container
    (port,) = [p for p in container["ports"] if p["name"] == CONTROL_PORT_NAME]
    assert str(port["containerPort"]) == conf["spark.sparkglass.control.port"]
    assert conf["spark.sparkglass.control.host"] == "0.0.0.0"
    (token,) = [e for e in container["env"] if e["name"] == "SPARKGLASS_CONTROL_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": secret_name(name), "key": "token"}
    (volume,) = [v for v in declared.volumes if v.get("secret")]
    assert volume["secret"]["secretName"] == secret_name(name)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    for key in ("cert-file", "key-file"):
        assert conf[f"spark.sparkglass.control.tls.{key}"].startswith(mount["mountPath"] + "/")
    # The optional Service selects the driver by the operator's labels, on the same port.
    assert service["metadata"]["name"] == secret_name(name)
    assert service["spec"]["selector"] == {"spark-role": "driver", rule.app_label: name}
    assert service["spec"]["ports"][0]["targetPort"] == CONTROL_PORT_NAME
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(service, "1.32", strict=True)

    sample = yaml.safe_load(foreign.sample_file.read_text())
    ref = DataSampleSpec.parse(sample["spec"]).application_ref
    assert ref.api_version is ApplicationApiVersion(rule.api_version) and ref.name == name
    assert ref.is_kubeflow is (foreign is KUBEFLOW)
    assert sample["metadata"]["namespace"] == spark_app["metadata"]["namespace"]

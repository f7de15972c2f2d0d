"""Pod customization (spark-operator v1beta2 field names) and the restricted defaults.

Renders the driver Pod and the executor Pod template (from the application's ConfigMap)
for specs that use every field, and checks them three ways: field by field, against the
Kubernetes Pod schema (``kubernetes-validate``), and against the Pod Security ``restricted``
profile (:mod:`pod_security`). A deliberately privileged user setting must be caught.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from sparkglass.operator import children
from sparkglass.operator.pod_customization import EXECUTOR_TEMPLATE_KEY
from sparkglass.operator.spark_conf import DriverEnvironment, spark_properties
from sparkglass.operator.specs import SparkApplicationSpec
from tests.support.crd_schema import yaml_documents
from tests.support.pod_security import restricted_violations

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
ENV = DriverEnvironment()


def example_spec(name: str = "flights-sparkapplication.yaml") -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())["spec"]


def sidecar(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "command": ["sleep", "infinity"], **extra}


#: A spec using every Pod field, for the driver and the executors.
CUSTOM = {
    "image": "ghcr.io/sparkglass/sparkglass:0.1.0",
    "mainApplicationFile": "local:///opt/app/job.py",
    "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "flights-data"}},
        {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "unused", "emptyDir": {}},
    ],
    "hadoopConf": {"fs.s3a.endpoint": "http://minio:9000"},
    "sparkUIOptions": {
        "serviceAnnotations": {"prometheus.io/scrape": "true"},
        "serviceLabels": {"team": "data", "sparkglass.io/application": "spoofed"},
    },
    "driver": {
        "env": [
            {"name": "PLAIN", "value": "1"},
            {
                "name": "S3_SECRET",
                "valueFrom": {"secretKeyRef": {"name": "s3", "key": "secret"}},
            },
        ],
        "envFrom": [{"secretRef": {"name": "db-credentials"}, "prefix": "DB_"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
        "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "podSecurityContext": {"runAsUser": 185, "runAsGroup": 185},
        "securityContext": {"readOnlyRootFilesystem": True},
        "initContainers": [sidecar("fetch", command=["true"])],
        "sidecars": [
            sidecar("log-shipper", volumeMounts=[{"name": "scratch", "mountPath": "/logs"}])
        ],
        "priorityClassName": "spark-high",
        "schedulerName": "volcano",
    },
    "executor": {
        "instances": 2,
        "env": [
            {"name": "PLAIN", "value": "2"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "envFrom": [{"configMapRef": {"name": "exec-settings"}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "tolerations": [{"key": "spot", "operator": "Equal", "value": "yes"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "podSecurityContext": {"fsGroup": 185},
        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
        "initContainers": [sidecar("warm-cache", command=["true"])],
        "sidecars": [sidecar("metrics")],
        "priorityClassName": "spark-low",
        "schedulerName": "volcano",
    },
}


def render(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(driver Pod, executor Pod template, ConfigMap) of ``raw``, as the operator makes them."""
    spec = SparkApplicationSpec.parse(raw)
    pod = children.driver_pod("job", "spark-jobs", "uid-1", spec, hash="h", attempt=1, env=ENV)
    cm = children.config_map("job", "spark-jobs", "uid-1", spec, resolved={}, env=ENV)
    return pod, yaml.safe_load(cm["data"][EXECUTOR_TEMPLATE_KEY]), cm


def crd_spec_schema() -> dict[str, Any]:
    crd = yaml_documents(REPO / "crds" / "sparkapplication.yaml")[0]
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_the_custom_spec_is_valid_for_the_crd() -> None:
    jsonschema.Draft7Validator(crd_spec_schema()).validate(CUSTOM)


def test_driver_pod_carries_every_setting_and_keeps_the_operators_parts() -> None:
    pod, _, _ = render(CUSTOM)
    spec = pod["spec"]
    main, shipper = spec["containers"]
    assert main["name"] == "spark-driver" and shipper["name"] == "log-shipper"
    env = {e["name"]: e for e in main["env"]}
    assert env["PLAIN"] == {"name": "PLAIN", "value": "1"}
    assert env["S3_SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "s3", "key": "secret"}}
    assert env["SPARKGLASS_CONTROL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == (
        "job-control-token"
    )
    assert main["envFrom"] == [{"secretRef": {"name": "db-credentials"}, "prefix": "DB_"}]
    assert [m["mountPath"] for m in main["volumeMounts"]] == [
        "/etc/sparkglass",
        "/etc/sparkglass-control-tls",
        "/data",
    ]
    # Only the volumes this Pod mounts: the driver's "data", the sidecar's "scratch".
    assert [v["name"] for v in spec["volumes"]] == [
        "sparkglass-config",
        "sparkglass-control-tls",
        "data",
        "scratch",
    ]
    assert spec["tolerations"] == CUSTOM["driver"]["tolerations"]
    assert spec["affinity"] == CUSTOM["driver"]["affinity"]
    assert spec["priorityClassName"] == "spark-high" and spec["schedulerName"] == "volcano"
    # The user's settings merged over the defaults; the operator's fsGroup kept.
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": 10001,
        "runAsUser": 185,
        "runAsGroup": 185,
    }
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    (init,) = spec["initContainers"]
    assert init["name"] == "fetch" and init["command"] == ["true"]
    for extra in (init, shipper):
        assert extra["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    assert spec["restartPolicy"] == "Never"
    assert [p["name"] for p in main["ports"]] == [
        "driver-rpc",
        "blockmanager",
        "spark-ui",
        "control",
    ]
    kubernetes_validate.validate(pod, "1.32", strict=True)


def test_executor_template_carries_every_setting() -> None:
    _, template, cm = render(CUSTOM)
    spec = template["spec"]
    main, metrics = spec["containers"]
    assert main["name"] == "spark-kubernetes-executor" and metrics["name"] == "metrics"
    # valueFrom only in the template; plain values stay Spark properties.
    assert main["env"] == [
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    assert main["envFrom"] == [{"configMapRef": {"name": "exec-settings"}}]
    assert main["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert spec["tolerations"] == CUSTOM["executor"]["tolerations"]
    assert spec["affinity"] == CUSTOM["executor"]["affinity"]
    assert spec["priorityClassName"] == "spark-low" and spec["schedulerName"] == "volcano"
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": 185,
    }
    # A user addition merges into the defaults: drop ALL stays with the added capability.
    assert main["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }
    assert [c["name"] for c in spec["initContainers"]] == ["warm-cache"]
    conf = cm["data"]["spark-defaults.conf"]
    assert (
        f"spark.kubernetes.executor.podTemplateFile=/etc/sparkglass/{EXECUTOR_TEMPLATE_KEY}\n"
        in conf
    )
    assert "spark.kubernetes.executor.podTemplateContainerName=spark-kubernetes-executor\n" in conf
    assert "spark.executorEnv.PLAIN=2\n" in conf
    assert "spark.hadoop.fs.s3a.endpoint=http://minio:9000\n" in conf
    kubernetes_validate.validate(template, "1.32", strict=True)


def test_hadoop_conf_becomes_spark_hadoop_properties_under_spark_conf() -> None:
    raw = {**CUSTOM, "sparkConf": {"spark.hadoop.fs.s3a.endpoint": "http://other:9000"}}
    conf = spark_properties(
        SparkApplicationSpec.parse(raw), app="job", namespace="spark-jobs", env=ENV
    )
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://other:9000"  # sparkConf wins
    conf = spark_properties(
        SparkApplicationSpec.parse(CUSTOM), app="job", namespace="spark-jobs", env=ENV
    )
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"


def test_ui_options_label_and_annotate_the_driver_service_under_the_operators_labels() -> None:
    svc = children.service("job", "spark-jobs", "uid-1", SparkApplicationSpec.parse(CUSTOM))
    assert svc["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert svc["metadata"]["labels"]["team"] == "data"
    assert svc["metadata"]["labels"]["sparkglass.io/application"] == "job"  # not spoofed


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"volumes": [{"name": "sparkglass-config", "emptyDir": {}}]}, "volumes"),
        ({"volumes": [{"name": "sparkglass-control-tls", "emptyDir": {}}]}, "volumes"),
        ({"volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}]}, "volumes"),
        (
            {"driver": {"volumeMounts": [{"name": "data", "mountPath": "/etc/sparkglass"}]}},
            "volumeMounts[0].mountPath",
        ),
        (
            {
                "driver": {
                    "volumeMounts": [
                        {
                            "name": "data",
                            "mountPath": "/etc/sparkglass-control-tls/../sparkglass-control-tls/x",
                        }
                    ]
                }
            },
            "volumeMounts[0].mountPath",
        ),
        (
            {"driver": {"volumeMounts": [{"name": "nowhere", "mountPath": "/data"}]}},
            "volumeMounts[0].name",
        ),
        (
            {"driver": {"env": [{"name": "SPARKGLASS_CONTROL_TOKEN", "value": "mine"}]}},
            "env[0].name",
        ),
        ({"driver": {"env": [{"name": "SPARK_CONF_DIR", "value": "/tmp"}]}}, "env[0].name"),
        ({"driver": {"sidecars": [sidecar("spark-driver")]}}, "sidecars[0].name"),
        (
            {"executor": {"env": [{"name": "X", "value": "1", "valueFrom": {"fieldRef": {}}}]}},
            "value or valueFrom",
        ),
        (
            {"executor": {"initContainers": [sidecar("spark-kubernetes-executor")]}},
            "initContainers[0].name",
        ),
        (
            {
                "executor": {
                    "sidecars": [
                        sidecar(
                            "m", volumeMounts=[{"name": "data", "mountPath": "/etc/sparkglass"}]
                        )
                    ]
                }
            },
            "sidecars[0].volumeMounts[0].mountPath",
        ),
    ],
)
def test_user_additions_colliding_with_the_operators_parts_are_refused(
    change: dict[str, Any], field: str
) -> None:
    raw = {
        "image": "i",
        "mainApplicationFile": "f",
        "volumes": [{"name": "data", "emptyDir": {}}],
        **change,
    }
    with pytest.raises(ValidationError) as info:
        SparkApplicationSpec.parse(raw)
    assert field in str(info.value), str(info.value)


# ------------------------------------------------------------------ Pod Security restricted


def rendered_pods() -> dict[str, dict[str, Any]]:
    """Every Pod the operator renders, by description."""
    out = {}
    for label, raw in [
        ("minimal", {"image": "i", "mainApplicationFile": "f"}),
        ("custom", CUSTOM),
        *(
            (f"example {p.name}", example_spec(p.name))
            for p in EXAMPLES.glob("*app*.yaml")
            # The Kubeflow and Apache Spark operator examples are theirs to render, not this
            # operator's.
            if not p.name.startswith(("kubeflow-", "apache-spark-"))
        ),
    ]:
        pod, template, _ = render(raw)
        out[f"{label} driver"] = pod
        out[f"{label} executor template"] = template
    return out


@pytest.mark.parametrize("name", sorted(rendered_pods()))
def test_every_rendered_pod_meets_the_restricted_profile(name: str) -> None:
    pod = rendered_pods()[name]
    assert restricted_violations(pod) == []
    assert pod["spec"]["containers"]


def test_the_examples_are_rendered() -> None:
    assert any(k.startswith("example flights-sparkapplication.yaml") for k in rendered_pods())


#: Privileged settings a user may write; each must be caught by the restricted check.
PRIVILEGED = [
    ("securityContext", {"privileged": True}, "privileged"),
    ("securityContext", {"allowPrivilegeEscalation": True}, "allowPrivilegeEscalation"),
    ("securityContext", {"capabilities": {"add": ["SYS_ADMIN"]}}, "capabilities.add"),
    ("securityContext", {"capabilities": {"drop": ["NET_RAW"]}}, "capabilities.drop"),
    ("securityContext", {"runAsUser": 0}, "runAsUser"),
    ("securityContext", {"runAsNonRoot": False}, "runAsNonRoot"),
    ("securityContext", {"seccompProfile": {"type": "Unconfined"}}, "seccompProfile"),
    ("securityContext", {"procMount": "Unmasked"}, "procMount"),
    ("securityContext", {"seLinuxOptions": {"type": "spc_t"}}, "seLinuxOptions.type"),
    ("podSecurityContext", {"runAsUser": 0}, "runAsUser"),
    ("podSecurityContext", {"runAsNonRoot": False}, "runAsNonRoot"),
    ("podSecurityContext", {"seccompProfile": {"type": "Unconfined"}}, "seccompProfile"),
    ("podSecurityContext", {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "sysctls"),
    ("podSecurityContext", {"windowsOptions": {"hostProcess": True}}, "hostProcess"),
]


@pytest.mark.parametrize("role", ["driver", "executor"])
@pytest.mark.parametrize(("field", "value", "control"), PRIVILEGED)
def test_a_privileged_user_setting_is_caught(
    role: str, field: str, value: dict[str, Any], control: str
) -> None:
    raw = copy.deepcopy(CUSTOM)
    raw[role][field] = value
    pod, template, _ = render(raw)
    bad = restricted_violations(pod if role == "driver" else template)
    assert any(control in b for b in bad), bad


@pytest.mark.parametrize("role", ["driver", "executor"])
@pytest.mark.parametrize("where", ["initContainers", "sidecars"])
def test_a_privileged_extra_container_is_caught(role: str, where: str) -> None:
    raw = copy.deepcopy(CUSTOM)
    raw[role][where] = [
        sidecar(
            "rooty",
            securityContext={"privileged": True},
            ports=[{"containerPort": 80, "hostPort": 80}],
        )
    ]
    pod, template, _ = render(raw)
    bad = restricted_violations(pod if role == "driver" else template)
    assert any("rooty" in b and "privileged" in b for b in bad), bad
    assert any("rooty" in b and "hostPort" in b for b in bad), bad


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_a_host_path_volume_is_caught(role: str) -> None:
    raw = copy.deepcopy(CUSTOM)
    raw["volumes"].append({"name": "host", "hostPath": {"path": "/var/run"}})
    raw[role]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    pod, template, _ = render(raw)
    bad = restricted_violations(pod if role == "driver" else template)
    assert any("hostPath" in b for b in bad), bad


def test_the_checker_refuses_a_pod_without_the_defaults() -> None:
    """The check is not vacuous: a bare Pod (no security context) fails each control."""
    bare = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    bad = " ".join(restricted_violations(bare))
    for control in ("allowPrivilegeEscalation", "capabilities.drop", "runAsNonRoot", "seccomp"):
        assert control in bad, control

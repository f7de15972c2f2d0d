"""The ServiceAccount allowlist and the control-token Secret rule (``pod_privileges``).

The attack through the real operator process is ``tests/security/test_operator_pod_privileges.py``;
here each kind of reference is found on its own, and the refusals name the field.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkglass.operator import pod_privileges as pp
from sparkglass.operator.settings import OperatorConfig
from sparkglass.operator.specs import SparkApplicationSpec

REPO = Path(__file__).resolve().parents[2]
VICTIM = "victim-control-token"


def base() -> dict[str, Any]:
    spec = yaml.safe_load((REPO / "examples" / "pod-settings-sparkapplication.yaml").read_text())
    return dict(spec["spec"])


def parsed(spec: dict[str, Any]) -> SparkApplicationSpec:
    return SparkApplicationSpec.parse(spec)


def test_the_example_references_only_its_own_secret() -> None:
    refs = list(pp.secret_references(parsed(base())))
    assert {name for _, name in refs} == {"s3-credentials"}
    assert ("spec.driver.envFrom[0].secretRef.name", "s3-credentials") in refs
    assert ("spec.executor.env[0].valueFrom.secretKeyRef.name", "s3-credentials") in refs
    assert pp.check_secret_names(parsed(base())) == refs


SECRET_ENV = {"name": "T", "valueFrom": {"secretKeyRef": {"name": VICTIM, "key": "token"}}}
SECRET_FROM = {"secretRef": {"name": VICTIM}}
TLS_KEY = {"secret": {"name": VICTIM, "items": [{"key": "tls.key", "path": "k"}]}}

#: Every way a Pod setting can name a Secret: (spec change, the field the refusal names).
REFERENCES: dict[str, tuple[dict[str, Any], str]] = {
    "env secretKeyRef": (
        {"driver": {"env": [SECRET_ENV]}},
        "spec.driver.env[0].valueFrom.secretKeyRef.name",
    ),
    "envFrom secretRef": (
        {"executor": {"envFrom": [SECRET_FROM]}},
        "spec.executor.envFrom[0].secretRef.name",
    ),
    "secret volume": (
        {"volumes": [{"name": "v", "secret": {"secretName": VICTIM}}]},
        "spec.volumes[1].secret.secretName",
    ),
    "projected volume": (
        {
            "volumes": [
                {
                    "name": "v",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "ok"}},
                            TLS_KEY,
                        ]
                    },
                }
            ]
        },
        "spec.volumes[1].projected.sources[1].secret.name",
    ),
    "csi volume plugin secret": (
        {
            "volumes": [
                {"name": "v", "csi": {"driver": "x", "nodePublishSecretRef": {"name": VICTIM}}}
            ]
        },
        "spec.volumes[1].csi.nodePublishSecretRef.name",
    ),
    "sidecar env": (
        {
            "driver": {
                "sidecars": [
                    {
                        "name": "s",
                        "image": "busybox",
                        "env": [SECRET_ENV],
                    }
                ]
            }
        },
        "spec.driver.sidecars[0].env[0].valueFrom.secretKeyRef.name",
    ),
    "init container envFrom": (
        {
            "executor": {
                "initContainers": [{"name": "i", "image": "busybox", "envFrom": [SECRET_FROM]}]
            }
        },
        "spec.executor.initContainers[0].envFrom[0].secretRef.name",
    ),
    "image pull secret": ({"imagePullSecrets": [VICTIM]}, "spec.imagePullSecrets[0]"),
    "spark secret mount": (
        {"sparkConf": {f"spark.kubernetes.executor.secrets.{VICTIM}": "/mnt/x"}},
        f"spec.sparkConf[spark.kubernetes.executor.secrets.{VICTIM}]",
    ),
    "spark secretKeyRef": (
        {"sparkConf": {"spark.kubernetes.executor.secretKeyRef.T": f"{VICTIM}:token"}},
        "spec.sparkConf[spark.kubernetes.executor.secretKeyRef.T]",
    ),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_each_reference_to_a_control_token_secret_is_refused_naming_its_field(case: str) -> None:
    change, field = REFERENCES[case]
    spec = base()
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        elif key == "volumes":  # the example's own volume stays first (its Pods mount it)
            spec[key] = [*spec[key], *value]
        else:
            spec[key] = value
    assert (field, VICTIM) in list(pp.secret_references(parsed(spec)))
    with pytest.raises(pp.PodPrivilegeRefused, match="control-token") as caught:
        pp.check_secret_names(parsed(spec))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: Secret {VICTIM!r}")


def test_an_ordinary_secret_passes_the_name_rule_and_is_left_to_the_label_check() -> None:
    spec = base()
    spec["volumes"] = [*spec["volumes"], {"name": "v", "secret": {"secretName": "tokens"}}]
    others = pp.check_secret_names(parsed(spec))
    assert ("spec.volumes[1].secret.secretName", "tokens") in others


@pytest.mark.parametrize(
    ("labels", "operator_owned"),
    [
        ({"sparkglass.io/role": "control-token"}, True),
        ({"app.kubernetes.io/managed-by": "sparkglass-operator"}, True),
        ({"app.kubernetes.io/managed-by": "Helm"}, False),
        ({}, False),
    ],
)
def test_operator_secrets_are_recognised_by_label(
    labels: dict[str, str], operator_owned: bool
) -> None:
    secret = {"metadata": {"name": "renamed", "labels": labels}}
    assert pp.is_operator_secret(secret) is operator_owned


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_a_service_account_outside_the_allowlist_is_refused_naming_field_and_allowed(
    role: str,
) -> None:
    spec = base()
    spec[role] = {**spec[role], "serviceAccount": "sparkglass-operator"}
    with pytest.raises(pp.PodPrivilegeRefused) as caught:
        pp.check_service_accounts(parsed(spec), ("spark-driver", "etl-runner"))
    assert caught.value.field == f"spec.{role}.serviceAccount"
    message = str(caught.value)
    assert "'sparkglass-operator' is not allowed" in message
    assert "allowed: spark-driver, etl-runner" in message
    assert pp.ALLOWED_SERVICE_ACCOUNTS_ENV in message


@pytest.mark.parametrize("account", [None, "default", "spark-driver"])
def test_unset_default_and_listed_accounts_pass(account: str | None) -> None:
    spec = copy.deepcopy(base())
    for role in ("driver", "executor"):
        spec[role] = {k: v for k, v in spec[role].items() if k != "serviceAccount"}
        if account is not None:
            spec[role]["serviceAccount"] = account
    pp.check_service_accounts(parsed(spec), ("spark-driver",))


def test_the_allowlist_defaults_to_the_charts_account_and_is_checked() -> None:
    # Read from SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS by `sparkglass operator run` only
    # (--allowed-service-account; tests/cli/test_cli.py), not by the config itself.
    assert OperatorConfig().allowed_service_accounts == ("spark-driver",)
    assert pp.parse_service_accounts(" spark-driver, etl-runner ,,etl-runner") == (
        "spark-driver",
        "etl-runner",
    )
    with pytest.raises(ValueError, match=rf"{pp.ALLOWED_SERVICE_ACCOUNTS_ENV}: 'Spark_Driver'"):
        pp.parse_service_accounts("Spark_Driver")
    with pytest.raises(ValueError, match="allowed_service_accounts: 'a b'"):
        OperatorConfig(allowed_service_accounts=("a b",))

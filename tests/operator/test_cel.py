"""The CRDs' CEL rules (``x-kubernetes-validations``), evaluated as the API server would.

Uses the ``cel-python`` package (``celpy``); objects are defaulted from the schema first, as
the API server defaults before it validates. Every example passes every rule; each rule
rejects the mistake it is there for.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

celpy = pytest.importorskip("celpy")

REPO = Path(__file__).resolve().parents[2]
CRDS = {
    "SparkApplication": REPO / "crds" / "sparkapplication.yaml",
    "DataSample": REPO / "crds" / "datasample.yaml",
}


def schema(kind: str) -> dict[str, Any]:
    (version,) = yaml.safe_load(CRDS[kind].read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def defaulted(node: dict[str, Any], value: Any) -> Any:
    """``value`` with the schema's defaults filled in (structural defaulting)."""
    if isinstance(value, dict) and "properties" in node:
        out = dict(value)
        for name, child in node["properties"].items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = defaulted(child, out[name])
        return out
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [defaulted(node["items"], v) for v in value]
    return value


def rules(node: dict[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, rule, self) for every rule that applies to ``value``."""
    for rule in node.get("x-kubernetes-validations") or []:
        yield path, rule["rule"], value
    if isinstance(value, dict):
        for name, child in (node.get("properties") or {}).items():
            if name in value:
                yield from rules(child, value[name], f"{path}.{name}")
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            yield from rules(node["items"], item, f"{path}[{i}]")


def evaluate(rule: str, value: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    activation = {"self": celpy.json_to_cel(value)}
    activation["oldSelf"] = celpy.json_to_cel(value if old is None else old)
    return bool(program.evaluate(activation))


def violations(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    s = schema(kind)
    obj = defaulted(s, obj)
    old_obj = defaulted(s, old) if old is not None else None
    bad = []
    for path, rule, value in rules(s, obj):
        old_value: Any = None
        if old_obj is not None and "oldSelf" in rule:
            old_value = old_obj
            for part in path.strip(".").split("."):
                old_value = old_value[part]
        if not evaluate(rule, value, old_value):
            bad.append(f"{path}: {rule}")
    return bad


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "examples" / name).read_text())


def test_examples_pass_every_rule() -> None:
    assert violations("SparkApplication", example("flights-sparkapplication.yaml")) == []
    assert violations("DataSample", example("flights-datasample.yaml")) == []


def test_every_rule_compiles() -> None:
    env = celpy.Environment()
    for kind in CRDS:
        for _, rule, _ in rules(schema(kind), _everything(schema(kind))):
            env.compile(rule)


def _everything(node: dict[str, Any]) -> Any:
    # A value at every level, so rules() visits every rule of the schema.
    if node.get("type") == "object" and "properties" in node:
        return {k: _everything(v) for k, v in node["properties"].items()}
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return [_everything(node["items"])]
    return None


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"sparkConf": {"spark.master": "local[2]"}}, "spark.master"),
        (
            {"dynamicAllocation": {"enabled": True, "minExecutors": 5, "maxExecutors": 2}},
            "minExecutors",
        ),
        ({"restartPolicy": {"type": "Never", "onFailureRetries": 3}}, "OnFailure"),
        ({"sampling": {"samplingWindow": "45s"}}, "30s"),
        ({"sampling": {"timeout": "500ms"}}, "10m"),
    ],
)
def test_application_rules_reject(change: dict[str, Any], fragment: str) -> None:
    app = example("flights-sparkapplication.yaml")
    app["spec"].update(change)
    bad = violations("SparkApplication", app)
    assert len(bad) == 1 and fragment in bad[0], bad


def test_pipeline_rules_reject_dangling_inputs_and_sourceless_vertices() -> None:
    app = example("flights-sparkapplication.yaml")
    vertices = app["spec"]["pipeline"]["vertices"]
    vertices[3]["inputs"] = ["nowhere"]
    assert any(
        "every input" not in b and "inputs.all" in b for b in violations("SparkApplication", app)
    )
    app = example("flights-sparkapplication.yaml")
    app["spec"]["pipeline"]["vertices"][3]["inputs"] = []  # a vertex without inputs
    assert any("size(self.inputs)" in b for b in violations("SparkApplication", app))
    app = example("flights-sparkapplication.yaml")
    app["spec"]["pipeline"]["vertices"][0]["attributes"] = {"noOutputUntilEndOfInput": True}
    assert any("noOutputUntilEndOfInput" in b for b in violations("SparkApplication", app))


def test_datasample_rules() -> None:
    sample = example("flights-datasample.yaml")
    sample["spec"]["samplingWindow"] = "31s"
    assert violations("DataSample", sample) == [
        ".spec.samplingWindow: "
        + schema("DataSample")["properties"]["spec"]["properties"]["samplingWindow"][
            "x-kubernetes-validations"
        ][0]["rule"]
    ]
    old = example("flights-datasample.yaml")
    changed = example("flights-datasample.yaml")
    changed["spec"]["vertex"] = "enrich-origin"
    assert any("oldSelf" in b for b in violations("DataSample", changed, old))  # immutable
    assert violations("DataSample", old, old) == []

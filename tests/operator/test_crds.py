"""The CRDs are structural, self-describing and bounded; every example validates against them.

Validation uses ``jsonschema`` on each CRD's ``openAPIV3Schema`` (the API server would also
apply the CEL rules; ``test_cel_rules`` evaluates those where a CEL engine is installed).
Built-in kinds an example may hold are checked with ``kubernetes-validate``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.crd_schema import CRDS, load_crd, schema_of, validate, yaml_documents

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
#: Keys a structural schema node may carry (apiextensions.k8s.io/v1).
_STRUCTURAL_KEYS = {
    "type",
    "description",
    "properties",
    "items",
    "required",
    "enum",
    "default",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "minProperties",
    "maxProperties",
    "additionalProperties",
    "nullable",
    "uniqueItems",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
}


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or "<root>", node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_crd_is_structural(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        assert set(node) <= _STRUCTURAL_KEYS, (
            f"{kind}{path}: unexpected keys {set(node) - _STRUCTURAL_KEYS}"
        )
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{kind}{path}: no type"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind}{path}"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{kind}{path}: array without items"
    root = schema_of(kind)
    # The API server refuses anything else at the root's metadata, a description included.
    assert root["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_field_has_a_description(kind: str) -> None:
    missing = [
        path
        for path, node in walk(schema_of(kind))
        if not node.get("description") and path != ".metadata"  # no description allowed there
    ]
    assert not missing, f"{kind}: fields without description: {missing}"


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_defaults_validate_against_their_own_schema(kind: str) -> None:
    for path, node in walk(schema_of(kind)):
        if "default" in node:
            sub = {k: v for k, v in node.items() if k != "x-kubernetes-validations"}
            jsonschema.Draft7Validator(sub).validate(node["default"]), path


def test_names_columns_and_subresources() -> None:
    app, sample = load_crd("SparkApplication"), load_crd("DataSample")
    assert app["spec"]["group"] == sample["spec"]["group"] == "sparkglass.io"
    assert app["spec"]["names"]["shortNames"] == ["sgapp"]
    assert sample["spec"]["names"]["shortNames"] == ["dsample"]
    for crd in (app, sample):
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["subresources"] == {"status": {}}
    (app_version,) = app["spec"]["versions"]
    (sample_version,) = sample["spec"]["versions"]
    app_columns = [
        c["name"] for c in app_version["additionalPrinterColumns"] if not c.get("priority")
    ]
    assert app_columns == ["State", "Attempts", "Age"]
    assert [c["name"] for c in sample_version["additionalPrinterColumns"]] == [
        "Application",
        "Vertex",
        "Phase",
        "Records",
        "Age",
    ]


def test_bounds_from_the_design() -> None:
    s = schema_of("DataSample")["properties"]["spec"]["properties"]
    assert (s["maxRecords"]["minimum"], s["maxRecords"]["maximum"]) == (1, 5000)
    rules = [r["rule"] for r in s["samplingWindow"]["x-kubernetes-validations"]]
    assert any("duration('1s')" in r and "duration('30s')" in r for r in rules)
    assert s["vertex"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    sampling = schema_of("SparkApplication")["properties"]["spec"]["properties"]["sampling"]
    rate = sampling["properties"]["maxSampleRate"]
    assert (rate["minimum"], rate["maximum"], rate["default"]) == (1, 10000, 100)
    vertices = schema_of("SparkApplication")["properties"]["spec"]["properties"]["pipeline"][
        "properties"
    ]["vertices"]
    assert vertices["x-kubernetes-list-map-keys"] == ["name"]  # unique names, server-side


def _examples() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in EXAMPLES:
        for doc in yaml_documents(path):
            # Kubeflow spark-operator and Apache Spark operator objects
            # (examples/kubeflow-*.yaml, examples/apache-spark-*.yaml) have no schema here;
            # tests/operator/test_foreign_apps_units.py checks them.
            foreign = ("sparkoperator.k8s.io/", "spark.apache.org/")
            if doc and not str(doc.get("apiVersion", "")).startswith(foreign):
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


def _flights() -> dict[str, Any]:
    """The flights SparkApplication example (the one whose pipeline the tests know)."""
    (app,) = [
        d
        for _, d in _examples()
        if d["kind"] == "SparkApplication" and d["metadata"]["name"] == "flights"
    ]
    return app


def test_there_are_examples_of_both_kinds() -> None:
    kinds = {doc["kind"] for _, doc in _examples()}
    assert {"SparkApplication", "DataSample"} <= kinds


@pytest.mark.parametrize("doc", [d for _, d in _examples()], ids=[i for i, _ in _examples()])
def test_example_validates(doc: dict[str, Any]) -> None:
    if doc["kind"] in CRDS:
        assert doc["apiVersion"] == "sparkglass.io/v1alpha1"
        validate(doc["kind"], doc)
    else:
        import kubernetes_validate

        kubernetes_validate.validate(doc, "1.32", strict=True)


def test_example_application_is_a_valid_pipeline() -> None:
    from sparkglass.operator.pipeline_status import resolve
    from sparkglass.operator.specs import SparkApplicationSpec

    app = _flights()
    resolved = resolve(SparkApplicationSpec.parse(app["spec"]).pipeline_description("flights"))
    blocking = {
        (e["upstream"], e["downstream"]) for e in resolved["edges"] if e["kind"] == "blocking"
    }
    assert ("busiest-origins", "enrich-origin") in blocking


BAD_SAMPLES = {
    "maxRecords above the 5000 cap": ("spec.maxRecords", 5001),
    "maxRecords zero": ("spec.maxRecords", 0),
    "vertex not DNS-1123": ("spec.vertex", "Parse_Step"),
    "samplingWindow not a duration": ("spec.samplingWindow", "three seconds"),
    "negative subtask": ("spec.subtaskIndex", -1),
    "backoffLimit too high": ("spec.backoffLimit", 11),
    "unknown phase in status": ("status.phase", "Done"),
}


@pytest.mark.parametrize("case", sorted(BAD_SAMPLES))
def test_bad_datasample_is_rejected(case: str) -> None:
    (doc,) = [
        copy.deepcopy(d)
        for _, d in _examples()
        if d["kind"] == "DataSample" and d["metadata"]["name"] == "flights-parse"
    ]
    path, value = BAD_SAMPLES[case]
    *parents, leaf = path.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    with pytest.raises(jsonschema.ValidationError):
        validate("DataSample", doc)


BAD_APPS = {
    "mode cluster": ("spec.mode", "cluster"),
    "memory without unit": ("spec.driver.memory", "2048"),
    "zero driver cores": ("spec.driver.cores", 0),
    "sampling rate above 10000": ("spec.sampling.maxSampleRate", 10001),
    "restart policy type": ("spec.restartPolicy.type", "Sometimes"),
    "bad state in status": ("status.applicationState.state", "DONE"),
}


@pytest.mark.parametrize("case", sorted(BAD_APPS))
def test_bad_application_is_rejected(case: str) -> None:
    doc = copy.deepcopy(_flights())
    path, value = BAD_APPS[case]
    *parents, leaf = path.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    with pytest.raises(jsonschema.ValidationError):
        validate("SparkApplication", doc)


def _vertex(doc: dict[str, Any], kind: str = "vertex") -> dict[str, Any]:
    return next(v for v in doc["spec"]["pipeline"]["vertices"] if v.get("kind", "vertex") == kind)


BAD_QUALITY: dict[str, Callable[[dict[str, Any]], None]] = {
    "expectation name not DNS-1123": lambda d: _vertex(d).__setitem__(
        "expectations", [{"name": "Known_Delay", "condition": "dep_delay IS NOT NULL"}]
    ),
    "expectation without condition": lambda d: _vertex(d).__setitem__(
        "expectations", [{"name": "known-delay"}]
    ),
    "expectation with an empty condition": lambda d: _vertex(d).__setitem__(
        "expectations", [{"name": "known-delay", "condition": ""}]
    ),
    "expectation action unknown": lambda d: _vertex(d).__setitem__(
        "expectations",
        [{"name": "known-delay", "condition": "dep_delay IS NOT NULL", "action": "quarantine"}],
    ),
    "33 expectations on one vertex": lambda d: _vertex(d).__setitem__(
        "expectations", [{"name": f"e{i}", "condition": "true"} for i in range(33)]
    ),
    "redaction rule naming no column": lambda d: d["spec"]["sampling"].__setitem__(
        "redact", [{"columns": [], "action": "mask"}]
    ),
    "redaction rule with a blank column": lambda d: d["spec"]["sampling"].__setitem__(
        "redact", [{"columns": ["  "], "action": "mask"}]
    ),
    "redaction action unknown": lambda d: d["spec"]["sampling"].__setitem__(
        "redact", [{"columns": ["tailnum"], "action": "encrypt"}]
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_QUALITY))
def test_bad_expectation_or_redaction_is_rejected_at_admission(case: str) -> None:
    """What the API server's schema refuses before anything runs; a condition that does not
    parse, or a rule that matches no column of the data, is the driver's to refuse."""
    doc = copy.deepcopy(_flights())
    doc["spec"].setdefault("sampling", {})
    BAD_QUALITY[case](doc)
    with pytest.raises(jsonschema.ValidationError):
        validate("SparkApplication", doc)


def test_good_expectations_and_redaction_are_admitted() -> None:
    doc = copy.deepcopy(_flights())
    _vertex(doc)["expectations"] = [
        {"name": "known-delay", "condition": "dep_delay IS NOT NULL", "action": "drop"}
    ]
    doc["spec"].setdefault("sampling", {})["redact"] = [
        {"columns": ["tailnum", "pass*"], "action": "hash"}
    ]
    validate("SparkApplication", doc)


def test_bad_vertex_name_is_rejected() -> None:
    doc = copy.deepcopy(_flights())
    doc["spec"]["pipeline"]["vertices"][0]["name"] = "Flights!"
    with pytest.raises(jsonschema.ValidationError):
        validate("SparkApplication", doc)


def test_committed_files_are_what_make_crds_writes() -> None:
    """The CRDs, the chart's copy and the field reference are generated from the models in
    crds/*.py: a hand edit of a generated file, or a model change without `make crds`, fails."""
    from sparkglass.crds import generate

    for rel, text in generate.outputs().items():
        path = REPO / rel
        assert path.exists() and path.read_text() == text, (
            f"{rel} is not what `make crds` writes from crds/*.py: run `make crds`"
        )

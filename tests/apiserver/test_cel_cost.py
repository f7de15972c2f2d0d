"""The estimated cost of the CRDs' CEL rules, computed as kube-apiserver computes it.

A real API server refuses a CRD whose rule costs more than 10,000,000 (times the number of
times it can run) or whose rules together cost more than 100,000,000; nothing installs then.
No API server runs here, so :mod:`tests.support.cel_cost` reproduces the estimate from the
upstream sources it names. The first test holds the estimator to upstream's own expected
figures (apiextensions-apiserver ``pkg/apiserver/schema/cel/compilation_test.go``,
``TestCostEstimation``, tag ``kubernetes-1.36.3``); the others hold every rule of the generated
CRDs to the limits and keep the table in docs/api-server-rules.md current.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cel_cost import (
    PER_CRD_LIMIT,
    PER_RULE_LIMIT,
    Estimator,
    crd_cost_errors,
    rule_costs,
)
from tests.support.crd_schema import yaml_documents
from tests.support.structural import crd_errors

REPO = Path(__file__).resolve().parents[2]
CRDS = {p.stem: p for p in sorted((REPO / "crds").glob("*.yaml"))}
COST_TABLE = REPO / "docs" / "api-server-rules.md"

_NUMBERS = {"type": "array", "items": {"type": "number"}}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_MAP_OF_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_MAP_OF_NUMBERS = {"type": "object", "additionalProperties": {"type": "number"}}
_STRING = {"type": "string"}


@pytest.mark.parametrize(
    ("node", "rule", "expected"),
    [
        (_NUMBERS, "self.all(x, true)", 4718591),
        ({**_NUMBERS, "maxItems": 10}, "self.all(x, true)", 32),
        (_STRINGS, "self.all(x, true)", 3145727),
        ({**_STRINGS, "maxItems": 20}, "self.all(x, true)", 62),
        ({"type": "array", "items": {"type": "boolean"}}, "self.all(x, true)", 1887437),
        (_MAP_OF_NUMBERS, "self.all(x, true)", 1348169),
        (_MAP_OF_STRINGS, "self.all(x, true)", 1179647),
        ({**_MAP_OF_STRINGS, "maxProperties": 3}, "self.all(x, true)", 11),
        (
            {"type": "array", "items": {"type": "string", "format": "duration"}},
            "self.all(x, true)",
            2359295,
        ),
        (
            {"type": "array", "items": {"type": "string", "format": "date-time"}},
            "self.all(x, true)",
            428963,
        ),
        (_STRING, "self.contains('test')", 314574),
        ({**_STRING, "maxLength": 10}, "self.contains('test')", 5),
        (_STRING, "self.startsWith('test')", 2),
        (_STRING, 'size(self + "hello") > size("hello")', 314578),
        ({**_STRING, "maxLength": 4}, 'size(self + "hello") > size("hello")', 7),
        (_NUMBERS, "self[1] == 0.0", 2),
        (_STRINGS, "self[1] == self[1]", 314577),
        ({**_NUMBERS, "maxItems": 10}, "self.all(x, self.all(y, true))", 352),
        (_STRING, 'self.matches("x")', 314574),
        ({**_STRING, "maxLength": 50}, 'self.matches("x")', 22),
        (_STRING, 'self.matches("")', 1),
        # A map key's size is 0 whatever the schema says (it is the shared StringType).
        (_MAP_OF_STRINGS, "self.all(x, x.contains(self[x]))", 2752507),
        (
            {
                "type": "object",
                "maxProperties": 10,
                "additionalProperties": {"type": "string", "maxLength": 10},
            },
            "self.all(x, x.contains(self[x]))",
            72,
        ),
        (_STRING, 'self == "x"', 2),
        ({**_STRING, "maxLength": 0}, 'self == "x"', 1),
        (
            {"type": "array", "maxItems": 6291456, "items": {"type": "number"}},
            "self.all(x, x == 0.0)",
            25165826,
        ),
        ({"type": "array", "items": _MAP_OF_NUMBERS}, "self.all(x, x.y == 25.2)", 6291452),
        (
            {"type": "array", "maxItems": 12, "items": _MAP_OF_NUMBERS},
            "self.all(x, x.y == 25.2)",
            74,
        ),
        (_MAP_OF_STRINGS, "oldSelf.size() == self.size()", 5),
        (
            {"type": "object", "additionalProperties": {"type": "string", "format": "date-time"}},
            'self["a"] == self["b"]',
            8,
        ),
        ({"type": "string", "enum": ["A", "B", "C", "LongValue"]}, "self.contains('A')", 2),
        (
            {"type": "string", "enum": ["A", "B", "C", "LongValue"], "maxLength": 1000},
            "self.contains('A')",
            401,
        ),
        (
            {"type": "array", "items": {"x-kubernetes-int-or-string": True}},
            "self[0] == 5",
            3,
        ),
    ],
)
def test_the_estimator_gives_upstreams_own_figures(
    node: dict[str, Any], rule: str, expected: int
) -> None:
    assert Estimator(node).cost(rule) == expected


def _schema(name: str) -> dict[str, Any]:
    crd = yaml_documents(CRDS[name])[0]
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_rule_is_within_the_api_servers_limits(name: str) -> None:
    costs = rule_costs(_schema(name))
    assert costs, f"{name}: no rules found"
    over = [c for c in costs if c.total > PER_RULE_LIMIT]
    assert not over, over
    assert sum(c.total for c in costs) <= PER_CRD_LIMIT
    assert crd_cost_errors(_schema(name)) == []
    assert crd_errors(yaml_documents(CRDS[name])[0]) == []


def test_an_unbounded_rule_is_refused_with_the_api_servers_words() -> None:
    """The sparkConf rule as it stood before its values were bounded: a regex over every
    value of a map whose values had no maxLength. The API server refused the whole CRD."""
    conf = {
        "type": "object",
        "maxProperties": 512,
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [
            {
                "rule": "self.all(k, !(k.startsWith('spark.kubernetes.driver.secretKeyRef.') "
                "&& self[k].matches('^[^:]*-control-token(:|$)')))",
                "message": "no control-token Secret",
            }
        ],
    }
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"sparkConf": conf}}},
    }
    rule_error, total_error = crd_cost_errors(schema)
    assert total_error.startswith("x-kubernetes-validations estimated rule cost total")
    assert rule_error.endswith(
        "estimated rule cost exceeds budget by factor of more than 100x (try simplifying the "
        "rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings "
        "are declared)"
    )
    conf["additionalProperties"] = {"type": "string", "maxLength": 4096}
    assert crd_cost_errors(schema) == []


def cost_table() -> str:
    """The docs' table: every rule, where it is, its cost per evaluation and in all."""
    lines = [
        "| CRD | Field | Rule | Cost per evaluation | Times it can run | Estimated cost |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name in sorted(CRDS):
        for c in rule_costs(_schema(name)):
            rule = " ".join(c.rule.split()).replace("|", "\\|")
            if len(rule) > 90:
                rule = rule[:87] + "..."
            lines.append(
                f"| {name} | `{c.path.lstrip('.')}` | `{rule}` | {c.cost:,} | {c.cardinality:,} "
                f"| {c.total:,} |"
            )
    totals = ", ".join(
        f"{name} {sum(c.total for c in rule_costs(_schema(name))):,}" for name in sorted(CRDS)
    )
    lines += [
        "",
        f"Limits: {PER_RULE_LIMIT:,} per rule (times the times it can run), {PER_CRD_LIMIT:,} "
        f"per CRD. Totals: {totals}.",
    ]
    return "\n".join(lines) + "\n"


_BEGIN, _END = "<!-- cost table: begin -->", "<!-- cost table: end -->"


def test_the_docs_table_is_current() -> None:
    text = COST_TABLE.read_text()
    current = text.split(_BEGIN, 1)[1].split(_END, 1)[0].strip("\n") + "\n"
    expected = cost_table()
    assert current == expected, (
        f"{COST_TABLE.relative_to(REPO)} is out of date; run `make crds` (it writes:)\n{expected}"
    )


def write_cost_table() -> None:
    """``make crds`` calls this (``python -m tests.apiserver.test_cel_cost``)."""
    text = COST_TABLE.read_text()
    head, rest = text.split(_BEGIN, 1)
    tail = rest.split(_END, 1)[1]
    COST_TABLE.write_text(f"{head}{_BEGIN}\n{cost_table()}{_END}{tail}")


if __name__ == "__main__":
    write_cost_table()

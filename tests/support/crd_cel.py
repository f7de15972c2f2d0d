"""The CRDs' CEL rules (``x-kubernetes-validations``), evaluated as the API server would.

Uses the ``cel-python`` package (``celpy``): a test module importing this one is skipped
without it. Objects are defaulted from the schema first, as the API server defaults before it
validates (:mod:`tests.support.structural`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import structural
from tests.support.crd_schema import schema_of

celpy = pytest.importorskip("celpy")


def schema(kind: str) -> dict[str, Any]:
    return schema_of(kind)


def defaulted(node: dict[str, Any], value: Any) -> Any:
    """``value`` with the schema's defaults filled in, as the API server does before it runs
    the rules (the test API server's own defaulting)."""
    return structural.default(node, value)


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
    program = structural.compiled_rule(rule)
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

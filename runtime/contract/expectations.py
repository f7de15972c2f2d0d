"""Expectations: named data-quality conditions on a vertex's output rows.

The vocabulary is the one of Spark declarative pipelines (:func:`expect`,
:func:`expect_or_drop`, :func:`expect_or_fail`). A row *passes* when the condition (a Spark
SQL boolean expression over the vertex's output columns) is true; false and NULL fail, as a
``WHERE`` clause keeps only true rows. A ``SparkApplication`` may add or replace expectations
by name in ``pipeline.vertices[].expectations``; the operator hands them to the driver in
:data:`EXPECTATIONS_CONF`. Spark-free (the operator and the service import it); applying
expectations to a DataFrame is :mod:`sparkglass.runtime.quality`. Examples:
docs/architecture.md, "Expectations".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar

import yaml
from pydantic import Field, ValidationError

from sparkglass.runtime.contract.description import CamelModel
from sparkglass.runtime.contract.errors import PlanError

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute set on a vertex function by the expectation decorators (a list of Expectation).
EXPECTATIONS_ATTR = "__sparkglass_expectations__"
#: Spark conf with per-vertex expectations from the SparkApplication spec (JSON list
#: ``[{name, expectations: [...]}]``).
EXPECTATIONS_CONF = "spark.sparkglass.pipeline.expectations"
#: Expectation names: like vertex names (DNS-1123 labels), because they appear in URLs,
#: metric labels and round parameters.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_CONDITION_LENGTH = 4096
#: At most this many expectations per vertex (each is evaluated on every row).
MAX_EXPECTATIONS_PER_VERTEX = 32


class ExpectationAction(StrEnum):
    """What happens to a row that fails: counted only, dropped, or the micro-batch fails."""

    WARN = "warn"
    DROP = "drop"
    FAIL = "fail"


class Expectation(CamelModel):
    """One named condition on a vertex's output rows."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=NAME_PATTERN,
        description="DNS-1123 label naming the expectation (unique per vertex).",
    )
    condition: str = Field(
        min_length=1,
        max_length=MAX_CONDITION_LENGTH,
        description="Spark SQL boolean expression over the vertex's output columns; a row "
        "passes when it is true (false and NULL fail).",
    )
    action: ExpectationAction = Field(
        default=ExpectationAction.WARN,
        description="warn: count failing rows and keep them; drop: drop them; fail: fail "
        "the micro-batch with a message naming the expectation and a failing row.",
    )


class ExpectationCounts(CamelModel):
    """Rows that passed and failed one expectation (streaming vertices, from Spark's observed
    metrics): totals since the pipeline started and in the last micro-batch."""

    vertex: str
    name: str
    action: ExpectationAction
    passed: int = 0
    failed: int = 0
    passed_last_batch: int = 0
    failed_last_batch: int = 0


def expectations_of(fn: object) -> list[Expectation]:
    """The expectations declared on ``fn`` by the decorators (declaration order).

    The decorators stack, each adding an :class:`Expectation` to the list under
    :data:`EXPECTATIONS_ATTR`; ``Pipeline.vertex`` reads it.
    """
    found = getattr(fn, EXPECTATIONS_ATTR, None)
    return list(found) if isinstance(found, list) else []


def _make(name: str, condition: str, action: ExpectationAction, where: str) -> Expectation:
    try:
        return Expectation(name=name, condition=condition, action=action)
    except ValidationError as exc:
        raise PlanError(f"{where}: {_problems(exc)}") from None


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'expectation'}: {e['msg']}" for e in exc.errors()
    )


def _decorator(action: ExpectationAction, name: str, condition: str) -> Callable[[F], F]:
    where = f"expect{'' if action is ExpectationAction.WARN else '_or_' + action.value}({name!r})"
    expectation = _make(name, condition, action, where)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"{where} applies to functions, got {fn!r}")
        # Decorators apply bottom-up: insert first so the list reads top-down.
        declared = [expectation, *expectations_of(fn)]
        check_unique(declared, where)
        setattr(fn, EXPECTATIONS_ATTR, declared)
        return fn

    return decorate


def expect(name: str, condition: str) -> Callable[[F], F]:
    """Count the rows failing ``condition`` and keep them. Raises :class:`PlanError` for a
    bad name (DNS-1123 label) or an empty condition."""
    return _decorator(ExpectationAction.WARN, name, condition)


def expect_or_drop(name: str, condition: str) -> Callable[[F], F]:
    """Count and drop the rows failing ``condition`` (they never reach downstream)."""
    return _decorator(ExpectationAction.DROP, name, condition)


def expect_or_fail(name: str, condition: str) -> Callable[[F], F]:
    """Fail the micro-batch (or the bounded job) at the first row failing ``condition``, with
    a message naming the expectation and the row (rendered with the application's redaction)."""
    return _decorator(ExpectationAction.FAIL, name, condition)


def check_unique(expectations: Sequence[Expectation], where: str) -> None:
    """Raise :class:`PlanError` for two expectations of one name, or more than the cap."""
    seen: set[str] = set()
    for e in expectations:
        if e.name in seen:
            raise PlanError(f"{where}: expectation {e.name!r} is declared twice")
        seen.add(e.name)
    if len(expectations) > MAX_EXPECTATIONS_PER_VERTEX:
        raise PlanError(
            f"{where}: {len(expectations)} expectations; at most {MAX_EXPECTATIONS_PER_VERTEX} "
            "per vertex"
        )


def parse_expectations(vertex: str, raw: object) -> list[Expectation]:
    """A spec's ``expectations`` list for ``vertex``; :class:`PlanError` naming the vertex,
    the entry and the field for anything invalid."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PlanError(
            f"vertex {vertex!r}: expectations must be a list of {{name, condition, action}}",
            vertex=vertex,
        )
    out: list[Expectation] = []
    for i, entry in enumerate(raw):
        try:
            out.append(Expectation.model_validate(entry))
        except ValidationError as exc:
            raise PlanError(
                f"vertex {vertex!r}: expectations[{i}] is invalid ({_problems(exc)})",
                vertex=vertex,
            ) from None
    check_unique(out, f"vertex {vertex!r}")
    return out


def parse_expectation_overrides(
    spec: Mapping[str, Any] | Sequence[Any] | str | None,
) -> dict[str, list[Expectation]]:
    """``{vertex: [Expectation]}`` from :data:`EXPECTATIONS_CONF` text or a spec-shaped list
    of ``{name, expectations}``; entries without ``expectations`` are ignored. Raises
    :class:`PlanError` for unreadable text or an invalid entry."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        try:
            spec = yaml.safe_load(spec)
        except yaml.YAMLError as exc:
            raise PlanError(f"expectations are not valid YAML/JSON: {exc}") from exc
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        inner = spec.get("spec", spec)
        inner = inner.get("pipeline", inner) if isinstance(inner, Mapping) else inner
        spec = inner.get("vertices", []) if isinstance(inner, Mapping) else inner
    if not isinstance(spec, list):
        raise PlanError("expectations must be a list of {name, expectations}")
    out: dict[str, list[Expectation]] = {}
    for entry in spec:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise PlanError(f"each pipeline.vertices entry needs a name, got {entry!r}")
        if "expectations" in entry:
            out[entry["name"]] = parse_expectations(entry["name"], entry["expectations"])
    return out


def merge_expectations(
    declared: Iterable[Expectation], override: Iterable[Expectation]
) -> list[Expectation]:
    """The declared list with the spec's entries replacing those of the same name (in place)
    and the others appended."""
    by_name = {e.name: e for e in override}
    merged = [by_name.pop(e.name, e) for e in declared]
    return [*merged, *by_name.values()]


def expectations_conf(vertices: Iterable[tuple[str, Sequence[Expectation]]]) -> str:
    """:data:`EXPECTATIONS_CONF` text for ``(vertex, expectations)`` pairs (the operator)."""
    return json.dumps(
        [
            {"name": name, "expectations": [e.to_json_dict() for e in exps]}
            for name, exps in vertices
        ],
        separators=(",", ":"),
        sort_keys=True,
    )

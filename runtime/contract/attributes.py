"""Vertex attributes: the decorators and the per-vertex overrides (the parsing stage).

A vertex function can declare what it does with its data (the FLIP ProcessFunction
attributes: :func:`no_output_until_end_of_input`, :func:`idempotent`,
:func:`not_cache_record`), and the planner (:mod:`sparkglass.runtime.contract.planner`) uses
that to schedule and execute the pipeline better while results stay the same. Overrides
(:func:`parse_overrides`, :func:`apply_overrides`) come from a ``SparkApplication``'s
``pipeline.vertices[].attributes`` or :data:`OVERRIDES_CONF`. Examples: docs/architecture.md,
"Attributes and the planner".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import yaml
from pydantic import ValidationError

from sparkglass.runtime.contract.description import (
    ATTRIBUTES_ATTR,
    IdempotentAttribute,
    PipelineDescription,
    VertexAttributes,
    VertexKind,
)
from sparkglass.runtime.contract.errors import PlanError

F = TypeVar("F", bound=Callable[..., Any])

#: Set by ``idempotent(order_by=...)`` on the function: the column whose largest value marks
#: the latest output of a key within a micro-batch. Kept beside the attributes because the
#: wire model ``IdempotentAttribute`` has only ``key`` (see :func:`idempotent_order_by`).
ORDER_BY_ATTR = "__sparkglass_idempotent_order_by__"

#: Spark conf holding per-vertex overrides as YAML/JSON text (spec-shaped, see
#: :func:`parse_overrides`): how the operator hands ``pipeline.vertices[].attributes`` of a
#: SparkApplication to the driver. ``Pipeline.start`` reads it when given no overrides.
OVERRIDES_CONF = "spark.sparkglass.pipeline.attributes"

#: Spec (camelCase) attribute name → VertexAttributes field name. Snake-case names are
#: accepted too, so that Python users can write the same dict.
ATTRIBUTE_NAMES: dict[str, str] = {
    "noOutputUntilEndOfInput": "no_output_until_end_of_input",
    "idempotent": "idempotent",
    "notCacheRecord": "not_cache_record",
}
_FIELD_NAMES = {**ATTRIBUTE_NAMES, **{v: v for v in ATTRIBUTE_NAMES.values()}}


def attributes_of(fn: object) -> VertexAttributes:
    """The attributes declared on ``fn`` by the decorators (all off when none).

    The decorators store a :class:`VertexAttributes` on the function under
    :data:`ATTRIBUTES_ATTR` (``Pipeline.vertex`` reads it); they stack, and each returns the
    function itself, so decorated functions stay plain functions.
    """
    found = getattr(fn, ATTRIBUTES_ATTR, None)
    return found if isinstance(found, VertexAttributes) else VertexAttributes()


def _declare(fn: F, **update: Any) -> F:
    if not callable(fn):
        raise TypeError(f"attribute decorators apply to functions, got {fn!r}")
    merged = attributes_of(fn).model_copy(update=update)
    setattr(fn, ATTRIBUTES_ATTR, merged)
    return fn


@overload
def no_output_until_end_of_input(fn: F) -> F: ...
@overload
def no_output_until_end_of_input(fn: None = None) -> Callable[[F], F]: ...
def no_output_until_end_of_input(fn: F | None = None) -> F | Callable[[F], F]:
    """Declare that the vertex emits only after all its input ended (FLIP-331 "full dam").

    Usable bare (``@no_output_until_end_of_input``) or called (``@...()``). The planner
    rejects it with :class:`PlanError` when an input is (transitively) an unbounded source,
    makes the vertex's outgoing edges blocking and materializes its output once.
    """
    if fn is None:
        return lambda f: _declare(f, no_output_until_end_of_input=True)
    return _declare(fn, no_output_until_end_of_input=True)


def _key_list(key: str | Sequence[str], where: str) -> list[str]:
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise PlanError(f"{where}: idempotent key must be one or more column names, got {key!r}")
    return keys


def idempotent(key: str | Sequence[str], *, order_by: str | None = None) -> Callable[[F], F]:
    """Declare that each output row is the final result for its ``key`` at that time.

    ``key`` is one column name or several. ``order_by`` names the output column whose
    largest value marks the latest row of a key (an event time or sequence number); without
    it the latest is the last row a task emitted, and rows of the same key emitted by
    different tasks of one micro-batch have no order (any one of them is kept). The runtime
    may then emit only the latest row per key per micro-batch downstream.
    Raises :class:`PlanError` for an empty key.
    """
    keys = _key_list(key, "idempotent()")
    if order_by is not None and (not isinstance(order_by, str) or not order_by):
        raise PlanError(f"idempotent(): order_by must be a column name, got {order_by!r}")

    def decorate(fn: F) -> F:
        # Forward compatible: once the wire model has ``order_by`` it travels with the
        # attributes (plan JSON, spec overrides); until then it rides on the function.
        fields: dict[str, Any] = {"key": keys}
        if order_by is not None and "order_by" in IdempotentAttribute.model_fields:
            fields["order_by"] = order_by
        fn = _declare(fn, idempotent=IdempotentAttribute(**fields))
        setattr(fn, ORDER_BY_ATTR, order_by)
        return fn

    return decorate


@overload
def not_cache_record(fn: F) -> F: ...
@overload
def not_cache_record(fn: None = None) -> Callable[[F], F]: ...
def not_cache_record(fn: F | None = None) -> F | Callable[[F], F]:
    """Declare that the function keeps no reference to its input or output records.

    Adjacent Python batch vertices that both declare it are fused into one Python pass
    that hands each Arrow batch from one function to the next without a copy.
    """
    if fn is None:
        return lambda f: _declare(f, not_cache_record=True)
    return _declare(fn, not_cache_record=True)


def idempotent_order_by(attributes: VertexAttributes, fn: object = None) -> str | None:
    """The ordering column of an idempotent vertex, if one was declared.

    Read from the attribute when the wire model carries it, else from the decorated
    function (``idempotent(order_by=...)``).
    """
    if attributes.idempotent is None:
        return None
    from_model = getattr(attributes.idempotent, "order_by", None)
    if isinstance(from_model, str):
        return from_model
    from_fn = getattr(fn, ORDER_BY_ATTR, None)
    return from_fn if isinstance(from_fn, str) else None


# ---------------------------------------------------------------- overrides
#: One vertex's override: only the attributes named (VertexAttributes field names).
AttributeOverride = dict[str, Any]


def _allowed() -> str:
    return ", ".join(ATTRIBUTE_NAMES)


def _parse_one(vertex: str, attributes: object) -> AttributeOverride:
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise PlanError(
            f"vertex {vertex!r}: attributes must be a mapping of {_allowed()}, "
            f"got {type(attributes).__name__}",
            vertex=vertex,
        )
    out: AttributeOverride = {}
    for name, value in attributes.items():
        field = _FIELD_NAMES.get(str(name))
        if field is None:
            raise PlanError(
                f"vertex {vertex!r}: unknown attribute {name!r}; allowed: {_allowed()}",
                vertex=vertex,
            )
        if field == "idempotent":
            out[field] = _parse_idempotent(vertex, value)
        else:
            if not isinstance(value, bool):
                raise PlanError(
                    f"vertex {vertex!r}: attribute {name!r} must be true or false, got {value!r}",
                    vertex=vertex,
                )
            out[field] = value
    return out


def _parse_idempotent(vertex: str, value: object) -> IdempotentAttribute | None:
    if value is None or value is False:
        return None
    if isinstance(value, str | list):
        value = {"key": value}
    if not isinstance(value, Mapping):
        raise PlanError(
            f"vertex {vertex!r}: attribute 'idempotent' must be {{key: [columns]}}, null or "
            f"false, got {value!r}",
            vertex=vertex,
        )
    raw = dict(value)
    if isinstance(raw.get("key"), str):
        raw["key"] = [raw["key"]]
    try:
        return IdempotentAttribute.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'idempotent'}: {e['msg']}"
            for e in exc.errors()
        )
        raise PlanError(
            f"vertex {vertex!r}: attribute 'idempotent' is invalid ({problems}); "
            "expected {key: [column, ...]}",
            vertex=vertex,
        ) from exc


def _vertex_entries(spec: object) -> Iterable[object]:
    """The ``vertices`` list out of a SparkApplication, its spec, its pipeline, or the list."""
    if isinstance(spec, Mapping):
        level: Mapping[str, Any] = spec
        for name in ("spec", "pipeline"):
            inner = level.get(name)
            if isinstance(inner, Mapping):
                level = inner
        vertices = level.get("vertices", [])
        if not isinstance(vertices, list):
            raise PlanError("pipeline.vertices must be a list of {name, attributes}")
        return vertices
    if isinstance(spec, list):
        return spec
    raise PlanError(
        "attribute overrides must be a mapping with pipeline.vertices[] or a list of "
        f"{{name, attributes}}, got {type(spec).__name__}"
    )


#: Longest attribute-override text read, characters (a spec's vertices list, not data).
MAX_OVERRIDES_CHARS = 1_000_000


def parse_overrides(
    spec: Mapping[str, Any] | Sequence[Any] | str | None,
) -> dict[str, AttributeOverride]:
    """Per-vertex attribute overrides from a spec-shaped mapping, list or YAML/JSON text.

    Accepts a whole ``SparkApplication``, its ``spec``, its ``pipeline`` or the
    ``vertices`` list; entries without ``attributes`` are ignored. Returns
    ``{vertex: {field: value}}`` with VertexAttributes field names. Raises
    :class:`PlanError` for an unknown attribute name (naming the vertex and the allowed
    names), a wrong value type, a vertex listed twice, or unreadable YAML. For example::

        pipeline:
          vertices:
            - name: busiest-origins
              attributes: {noOutputUntilEndOfInput: true}
            - name: delays-by-carrier
              attributes: {idempotent: {key: [carrier]}}
    """
    if spec is None:
        return {}
    if isinstance(spec, str):
        if len(spec) > MAX_OVERRIDES_CHARS:
            raise PlanError(
                f"attribute overrides are {len(spec)} characters: allowed at most "
                f"{MAX_OVERRIDES_CHARS}"
            )
        try:
            spec = yaml.safe_load(spec)
        except yaml.YAMLError as exc:
            raise PlanError(f"attribute overrides are not valid YAML: {exc}") from exc
        except RecursionError:
            # Thousands of nested brackets: the parser recurses once per level.
            raise PlanError("attribute overrides are nested too deeply to read") from None
        if spec is None:
            return {}
    try:
        return _parse_entries(spec)
    except RecursionError:
        raise PlanError("attribute overrides are nested too deeply to read") from None


def _parse_entries(spec: Mapping[str, Any] | Sequence[Any]) -> dict[str, AttributeOverride]:
    out: dict[str, AttributeOverride] = {}
    for entry in _vertex_entries(spec):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise PlanError(f"each pipeline.vertices entry needs a name, got {entry!r}")
        name = entry["name"]
        if name in out:
            raise PlanError(f"vertex {name!r} is listed twice in the overrides", vertex=name)
        out[name] = _parse_one(name, entry.get("attributes"))
    return out


def apply_overrides(
    description: PipelineDescription, overrides: Mapping[str, AttributeOverride]
) -> PipelineDescription:
    """A copy of ``description`` with each override merged into its vertex's attributes.

    An override replaces only the attributes it names (``idempotent: null`` or ``false``
    removes one). Raises :class:`PlanError` for an override naming no vertex (listing the
    vertices) or naming a source or sink (only vertices carry attributes).
    """
    if not overrides:
        return description
    result = description.model_copy(deep=True)
    by_name = {v.name: v for v in result.vertices}
    for name, update in overrides.items():
        if name not in by_name:
            raise PlanError(
                f"attribute override for unknown vertex {name!r}; vertices: {', '.join(by_name)}",
                vertex=name,
            )
        target = by_name[name]
        if update and target.kind is not VertexKind.VERTEX:
            raise PlanError(
                f"{target.kind.value} {name!r} cannot have attributes; only vertices do",
                vertex=name,
            )
        target.attributes = target.attributes.model_copy(update=update)
    return result

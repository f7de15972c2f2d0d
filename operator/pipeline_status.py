"""Validating and planning a SparkApplication's declared pipeline.

Uses the runtime's attribute-aware planner (``sparkglass.runtime.contract.planner.plan``) so the
operator, the job and the UI agree on one plan. Where that module is absent (an older
runtime) a minimal check runs instead: graph checks, and ``noOutputUntilEndOfInput`` only on
bounded inputs; every edge out of such a vertex is blocking.

:func:`resolve` returns the status form (``status.vertices`` / ``status.edges``) or raises
:class:`InvalidPipeline` carrying the reason for the ``Ready=False`` condition.
"""

from __future__ import annotations

from typing import Any

from sparkglass.runtime.contract.description import (
    PipelineDescription,
    VertexDescription,
    VertexKind,
    topological_order,
)
from sparkglass.runtime.contract.errors import SparkglassError


class InvalidPipeline(Exception):
    """The declared pipeline cannot run; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


#: Keys of a planned vertex kept in the status (the planner's notes stay out: status is small).
_VERTEX_KEYS = (
    "name",
    "kind",
    "inputs",
    "bounded",
    "python",
    "declared",
    "adjusted",
    "inheritedFrom",
    "phase",
    "materialize",
    "latestPerKey",
    "fusionGroup",
    "tap",
)


def resolve(description: PipelineDescription) -> dict[str, list[dict[str, Any]]]:
    """Plan ``description``; returns ``{"vertices": [...], "edges": [...]}`` (camelCase).

    Raises :class:`InvalidPipeline` (reason ``InvalidPipeline`` for a malformed graph,
    ``InvalidAttributes`` for attributes that cannot hold).
    """
    if not description.vertices:
        return {"vertices": [], "edges": []}
    try:
        from sparkglass.runtime.contract.planner import plan  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return _fallback(description)
    try:
        planned: dict[str, Any] = plan(description).to_json_dict()
    except SparkglassError as exc:
        raise InvalidPipeline(_reason(exc), str(exc)) from None
    vertices = [
        {k: v[k] for k in _VERTEX_KEYS if v.get(k) is not None} for v in planned["vertices"]
    ]
    edges = [
        {k: e[k] for k in ("upstream", "downstream", "kind", "fused") if k in e}
        for e in planned["edges"]
    ]
    return {"vertices": vertices, "edges": edges}


def _reason(exc: Exception) -> str:
    return "InvalidAttributes" if type(exc).__name__ == "PlanError" else "InvalidPipeline"


def _fallback(description: PipelineDescription) -> dict[str, list[dict[str, Any]]]:
    try:
        order = topological_order(description.vertices)
    except SparkglassError as exc:
        raise InvalidPipeline("InvalidPipeline", str(exc)) from None
    bounded: dict[str, bool] = {}
    vertices: list[dict[str, Any]] = []
    for v in order:
        bounded[v.name] = (
            v.bounded if v.kind is VertexKind.SOURCE else all(bounded[i] for i in v.inputs)
        )
        if v.attributes.no_output_until_end_of_input:
            unbounded = [i for i in v.inputs if not bounded[i]]
            if unbounded:
                raise InvalidPipeline(
                    "InvalidAttributes",
                    f"vertex {v.name!r} declares noOutputUntilEndOfInput but its input "
                    f"{unbounded[0]!r} is unbounded (a stream never ends)",
                )
        vertices.append(_status_vertex(v, bounded[v.name]))
    by_name = {v.name: v for v in order}
    edges = [
        {
            "upstream": i,
            "downstream": v.name,
            "kind": "blocking"
            if by_name[i].attributes.no_output_until_end_of_input
            else "pipelined",
            "fused": False,
        }
        for v in order
        for i in v.inputs
    ]
    return {"vertices": vertices, "edges": edges}


def _status_vertex(v: VertexDescription, bounded: bool) -> dict[str, Any]:
    attrs = v.attributes.to_json_dict()
    return {
        "name": v.name,
        "kind": v.kind.value,
        "inputs": list(v.inputs),
        "bounded": bounded,
        "python": v.python,
        "declared": attrs,
        "adjusted": attrs,
    }

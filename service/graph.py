"""The pipeline graph the API and the page show: edges with kinds, and per-vertex plan facts.

The attribute-aware planner (:func:`sparkglass.runtime.contract.planner.plan`) decides: an edge is
``blocking`` when it leaves an end-of-input chain (downstream starts after upstream ended
and was materialized), else ``pipelined``; vertices get adjusted attributes, a phase, a tap
placement and notes. When the planner rejects a pipeline (e.g. ``noOutputUntilEndOfInput``
fed by a stream), the declared attributes give the edge kinds and the error is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.errors import SparkglassError
from sparkglass.runtime.contract.planner import plan

PIPELINED = "pipelined"
BLOCKING = "blocking"


@dataclass
class Graph:
    """``edges``: ``[{"from", "to", "kind", "fused"}]``; ``vertex_plan``: per vertex name,
    ``{"adjusted", "inheritedFrom", "phase", "tap", "fusionGroup", "notes"}``; ``error``: why
    the planner rejected the pipeline, if it did."""

    edges: list[dict[str, Any]]
    vertex_plan: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None


def graph_of(description: PipelineDescription) -> Graph:
    """Plan ``description`` and return what the page draws."""
    try:
        p = plan(description)
    except SparkglassError as exc:
        blocking = {
            v.name for v in description.vertices if v.attributes.no_output_until_end_of_input
        }
        edges = [
            {
                "from": i,
                "to": v.name,
                "kind": BLOCKING if i in blocking else PIPELINED,
                "fused": False,
            }
            for v in description.vertices
            for i in v.inputs
        ]
        return Graph(edges=edges, error=str(exc))
    edges = [
        {"from": e.upstream, "to": e.downstream, "kind": e.kind.value, "fused": e.fused}
        for e in p.edges
    ]
    vertex_plan = {
        v.name: {
            "adjusted": v.adjusted.to_json_dict(),
            "inheritedFrom": v.inherited_from,
            "phase": v.phase,
            "tap": v.tap.value,
            "fusionGroup": v.fusion_group,
            "notes": list(v.notes),
        }
        for v in p.vertices
    }
    return Graph(edges=edges, vertex_plan=vertex_plan)


def edges_of(description: PipelineDescription) -> list[dict[str, Any]]:
    """Only the edges of :func:`graph_of`."""
    return graph_of(description).edges

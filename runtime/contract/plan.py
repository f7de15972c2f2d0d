"""The Plan: what the attribute-aware planner decided, as a camelCase JSON model.

This is the shape the operator writes into a ``SparkApplication``'s status (resolved
vertices with adjusted attributes and edge kinds) and the web UI draws; ``sparkglass plan``
prints it. It is computed from a
:class:`~sparkglass.runtime.contract.description.PipelineDescription` alone (no Spark), by
:func:`sparkglass.runtime.contract.planner.plan`. :class:`Plan` shows an example.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from sparkglass.runtime.contract.description import CamelModel, VertexAttributes, VertexKind


class EdgeKind(StrEnum):
    """How records cross an edge (FLIP-331's result partition types, in Spark terms)."""

    #: Records flow as they are produced, inside the same Spark job or streaming query.
    PIPELINED = "pipelined"
    #: The upstream finishes and its output is materialized before the downstream starts.
    BLOCKING = "blocking"


class TapPlacement(StrEnum):
    """Where the sampling tap of a step sits (when sampling is enabled)."""

    #: On the step's output DataFrame: sees every row the step emits.
    OUTPUT = "output"
    #: On the read of the materialized output: sees the rows each time a downstream reads them.
    MATERIALIZED_OUTPUT = "materialized-output"
    #: After the latest-per-key reduction: sees what the downstream receives.
    LATEST_PER_KEY_OUTPUT = "latest-per-key-output"
    #: Inside a fused Python pass: its batches never reach the JVM, so there is no tap;
    #: sample the fused group's last vertex instead.
    NONE = "none"


class Optimizations(CamelModel):
    """Which uses of the attributes are switched on (all by default).

    Switching one off runs the pipeline as if the attribute were not declared (for
    comparisons and benchmarks); results are the same either way.
    """

    materialize: bool = Field(
        default=True,
        description="Blocking edges and one materialization for end-of-input vertices.",
    )
    latest_per_key: bool = Field(
        default=True,
        description="Only the latest row per key per micro-batch for idempotent vertices.",
    )
    fuse: bool = Field(
        default=True, description="Fuse adjacent notCacheRecord Python vertices into one pass."
    )


class PlanVertex(CamelModel):
    """One step of the pipeline as the planner resolved it."""

    name: str
    kind: VertexKind
    inputs: list[str] = Field(default_factory=list)
    bounded: bool = Field(description="True when the step's output ends (batch).")
    python: bool = False
    declared: VertexAttributes = Field(description="Attributes as declared (after overrides).")
    adjusted: VertexAttributes = Field(description="Attributes after the adjustment stage.")
    inherited_from: str | None = Field(
        default=None,
        description="The end-of-input vertex whose attribute this one inherited, if any.",
    )
    phase: int = Field(ge=0, description="Phase in which the step runs (0 runs first).")
    materialize: bool = Field(
        default=False, description="Its output is written once and read back by the downstream."
    )
    latest_per_key: bool = Field(
        default=False, description="Only its latest row per key per micro-batch goes downstream."
    )
    fusion_group: str | None = Field(
        default=None, description="Name of the fused Python pass this vertex runs in, if any."
    )
    tap: TapPlacement = Field(description="Where the sampling tap sits; 'none' for sinks.")
    notes: list[str] = Field(
        default_factory=list, description="What the planner does with the attributes, and why."
    )


class PlanEdge(CamelModel):
    """One input edge ``upstream → downstream``."""

    upstream: str
    downstream: str
    kind: EdgeKind
    fused: bool = Field(
        default=False, description="Both ends run in one fused Python pass (batches not copied)."
    )


class PlanPhase(CamelModel):
    """A set of steps that run together; phase N+1 starts after phase N's blocking outputs."""

    index: int = Field(ge=0)
    steps: list[str] = Field(description="Sources and vertices computed in this phase.")
    waits_for: list[str] = Field(
        default_factory=list,
        description="Materialized outputs of earlier phases this phase reads.",
    )
    materializes: list[str] = Field(
        default_factory=list, description="Vertices whose output this phase writes once."
    )
    batch_sinks: list[str] = Field(default_factory=list, description="Bounded sinks run here.")
    streaming_sinks: list[str] = Field(
        default_factory=list, description="Streaming queries started in this phase."
    )


class FusionGroup(CamelModel):
    """Adjacent notCacheRecord Python vertices run as one Python pass, in order."""

    name: str
    vertices: list[str] = Field(min_length=2)


class Plan(CamelModel):
    """The planner's result for one pipeline.

    Example (abridged)::

        {"pipeline": "flights",
         "vertices": [{"name": "busiest-origins",
                       "declared": {"noOutputUntilEndOfInput": true, ...},
                       "adjusted": {...}, "inheritedFrom": null, "phase": 0, "materialize": true,
                       "latestPerKey": false, "fusionGroup": null, "tap": "materialized-output",
                       "notes": ["..."]}, ...],
         "edges": [{"upstream": "busiest-origins", "downstream": "enrich-origin",
                    "kind": "blocking", "fused": false}, ...],
         "phases": [{"index": 0, "steps": [...], "materializes": ["busiest-origins"], ...}, ...],
         "fusions": [{"name": "a+b+c", "vertices": ["a", "b", "c"]}],
         "optimizations": {"materialize": true, "latestPerKey": true, "fuse": true}}
    """

    pipeline: str
    vertices: list[PlanVertex]
    edges: list[PlanEdge]
    phases: list[PlanPhase]
    fusions: list[FusionGroup] = Field(default_factory=list)
    optimizations: Optimizations = Field(default_factory=Optimizations)

    def vertex(self, name: str) -> PlanVertex:
        """The planned step ``name``; raises ``KeyError`` listing the known names."""
        for v in self.vertices:
            if v.name == name:
                return v
        raise KeyError(f"no vertex {name!r}; vertices: {', '.join(v.name for v in self.vertices)}")

    def edge(self, upstream: str, downstream: str) -> PlanEdge:
        """The edge ``upstream → downstream``; raises ``KeyError`` when there is none."""
        for e in self.edges:
            if e.upstream == upstream and e.downstream == downstream:
                return e
        raise KeyError(f"no edge {upstream!r} -> {downstream!r}")

    def fusion(self, name: str) -> FusionGroup | None:
        """The fusion group named ``name`` (``PlanVertex.fusion_group``), if any."""
        return next((g for g in self.fusions if g.name == name), None)

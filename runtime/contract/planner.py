"""The attribute-aware planner: validate → adjust → :class:`Plan` (FLIP ProcessFunction attributes).

It works on a :class:`PipelineDescription` alone, so the operator can plan a
``SparkApplication`` without Spark; only the *use* stage (``Pipeline.start``,
:mod:`.materialize`, :mod:`.latest_per_key`, :mod:`.fusion`) touches Spark. Stages:
**parse** (:mod:`.attributes`: decorators and spec overrides), **validate**
(:func:`validate`), **adjust** (:func:`adjust`: end-of-input inherited down a chain) and
**plan** (:func:`plan`: edges, phases, latest-per-key, fusion, taps); docs/architecture.md,
"Attributes and the planner", says what each does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkglass.runtime.contract.attributes import (
    AttributeOverride,
    apply_overrides,
    parse_overrides,
)
from sparkglass.runtime.contract.description import (
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
    topological_order,
)
from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.plan import (
    EdgeKind,
    FusionGroup,
    Optimizations,
    Plan,
    PlanEdge,
    PlanPhase,
    PlanVertex,
    TapPlacement,
)

__all__ = ["Adjusted", "adjust", "plan", "unbounded_sources", "validate"]


def _ordered(description: PipelineDescription) -> list[VertexDescription]:
    # Operator-built descriptions need not be sorted; topological_order also checks the graph.
    return topological_order(list(description.vertices))


def unbounded_sources(description: PipelineDescription) -> dict[str, list[str]]:
    """For each step, the unbounded sources it reads, directly or transitively.

    Boundedness comes from the sources only (a non-source step is unbounded when any input
    is), so a description built without per-vertex ``bounded`` flags is still planned right.
    Values are source names in topological order.
    """
    feeds: dict[str, list[str]] = {}
    for v in _ordered(description):
        if v.kind is VertexKind.SOURCE:
            feeds[v.name] = [] if v.bounded else [v.name]
            continue
        found: list[str] = []
        for i in v.inputs:
            found.extend(s for s in feeds[i] if s not in found)
        feeds[v.name] = found
    return feeds


def _path(description: PipelineDescription, source: str, target: str) -> list[str]:
    """One input path ``source → … → target`` (for error messages)."""
    by_name = {v.name: v for v in description.vertices}

    def walk(name: str) -> list[str] | None:
        if name == source:
            return [source]
        for i in by_name[name].inputs:
            found = walk(i)
            if found is not None:
                return [*found, name]
        return None

    return walk(target) or [source, target]


def validate(description: PipelineDescription) -> None:
    """Check that the declared attributes can hold for this graph.

    Raises :class:`PlanError` (``vertex`` and ``source`` set) for the first vertex, in
    topological order, that declares ``noOutputUntilEndOfInput`` but is fed by an unbounded
    source: its input never ends, so it would never emit. Graph errors (unknown inputs,
    cycles) raise :class:`PipelineError` first.
    """
    feeds = unbounded_sources(description)
    for v in _ordered(description):
        if v.kind is not VertexKind.VERTEX or not v.attributes.no_output_until_end_of_input:
            continue
        if feeds[v.name]:
            source = feeds[v.name][0]
            path = " -> ".join(_path(description, source, v.name))
            raise PlanError(
                f"vertex {v.name!r} declares noOutputUntilEndOfInput but reads the unbounded "
                f"source {source!r} ({path}); an unbounded input never ends, so the vertex "
                "would never emit. Remove the attribute or make the source bounded.",
                vertex=v.name,
                source=source,
            )


@dataclass(frozen=True)
class Adjusted:
    """A vertex's attributes after the adjustment stage."""

    attributes: VertexAttributes
    #: The declaring end-of-input vertex at the head of its chain, when inherited.
    inherited_from: str | None = None


def adjust(description: PipelineDescription) -> dict[str, Adjusted]:
    """The adjusted attributes of every step (the seed's adjustment stage).

    A vertex with exactly one input, that input being a vertex whose (adjusted) attributes
    say ``noOutputUntilEndOfInput``, is chained to it and inherits the attribute: it only
    ever sees that input after it ended, so it too emits only after its input ended. This
    repeats down the chain (the seed's figure: StreamNode3 after StreamNode2). A vertex with
    more inputs (a join with another branch) or on another branch keeps its declared
    attributes. Sources and sinks are returned as declared.
    """
    result: dict[str, Adjusted] = {}
    kinds = {v.name: v.kind for v in description.vertices}
    for v in _ordered(description):
        declared = v.attributes
        if (
            v.kind is VertexKind.VERTEX
            and not declared.no_output_until_end_of_input
            and len(v.inputs) == 1
            and kinds[v.inputs[0]] is VertexKind.VERTEX
            and result[v.inputs[0]].attributes.no_output_until_end_of_input
        ):
            upstream = result[v.inputs[0]]
            result[v.name] = Adjusted(
                attributes=declared.model_copy(update={"no_output_until_end_of_input": True}),
                inherited_from=upstream.inherited_from or v.inputs[0],
            )
        else:
            result[v.name] = Adjusted(attributes=declared)
    return result


def _chained(adjusted: Mapping[str, Adjusted], upstream: str, downstream: str) -> bool:
    """True when ``downstream`` inherited end-of-input from ``upstream``'s chain."""
    down = adjusted[downstream]
    up = adjusted[upstream]
    return down.inherited_from is not None and down.inherited_from == (
        up.inherited_from or upstream
    )


def _fusion_groups(
    ordered: Sequence[VertexDescription],
    successors: Mapping[str, list[str]],
    adjusted: Mapping[str, Adjusted],
    fusable: Collection[str],
    blocked: Collection[str],
) -> list[list[str]]:
    """Maximal chains of fusable ``notCacheRecord`` Python vertices, in pipeline order.

    ``u → w`` fuses when both are fusable Python vertices declaring notCacheRecord, ``u``
    is ``w``'s only input and ``w`` is ``u``'s only consumer (anything else needs ``u``'s
    output as a DataFrame), and ``u`` is not in ``blocked`` (materialized or thinned to
    the latest row per key: that step must see ``u``'s whole output first).
    """

    def eligible(v: VertexDescription) -> bool:
        return (
            v.kind is VertexKind.VERTEX
            and v.python
            and v.name in fusable
            and adjusted[v.name].attributes.not_cache_record
        )

    by_name = {v.name: v for v in ordered}
    next_of: dict[str, str] = {}
    for w in ordered:
        if not eligible(w) or len(w.inputs) != 1:
            continue
        u = by_name[w.inputs[0]]
        if eligible(u) and successors[u.name] == [w.name] and u.name not in blocked:
            next_of[u.name] = w.name
    heads = [u for u in next_of if u not in next_of.values()]
    groups: list[list[str]] = []
    for head in heads:
        chain = [head]
        while chain[-1] in next_of:
            chain.append(next_of[chain[-1]])
        groups.append(chain)
    order = {v.name: i for i, v in enumerate(ordered)}
    return sorted(groups, key=lambda g: order[g[0]])


def plan(
    description: PipelineDescription,
    *,
    overrides: Mapping[str, AttributeOverride] | Mapping[str, Any] | str | None = None,
    fusable: Collection[str] | None = None,
    optimizations: Optimizations | None = None,
) -> Plan:
    """Plan ``description``: parse overrides, validate, adjust, then decide edges and phases.

    Edges leaving an end-of-input chain are *blocking* (the chain's tail is materialized
    once), the others *pipelined*; phases follow the blocking edges; streaming idempotent
    vertices keep only their latest row per key per micro-batch; chains of
    ``notCacheRecord`` Python vertices are fused; and each step gets its tap.

    ``overrides`` is a spec-shaped mapping/YAML (see :func:`.attributes.parse_overrides`)
    or an already parsed ``{vertex: {field: value}}``. ``fusable`` names the Python vertices
    the runtime can fuse (Arrow batch vertices); ``None`` means every Python vertex, which
    is what the operator assumes from a spec. ``optimizations`` switches uses off (all on
    by default); the attributes are still validated and adjusted.

    Raises :class:`PlanError` (see :func:`validate`, :func:`.attributes.parse_overrides`)
    or :class:`PipelineError` for a malformed graph.
    """
    opts = optimizations or Optimizations()
    if overrides is not None:
        parsed = _as_parsed(overrides)
        description = apply_overrides(description, parsed)
    ordered = _ordered(description)
    validate(description)
    adjusted = adjust(description)
    feeds = unbounded_sources(description)
    bounded = {v.name: not feeds[v.name] for v in ordered}
    successors: dict[str, list[str]] = {v.name: [] for v in ordered}
    for v in ordered:
        for i in v.inputs:
            successors[i].append(v.name)

    # Blocking edges: out of an end-of-input chain, except into the chain's own members.
    blocking: set[tuple[str, str]] = set()
    if opts.materialize:
        for v in ordered:
            for i in v.inputs:
                eoi = adjusted[i].attributes.no_output_until_end_of_input
                if eoi and not _chained(adjusted, i, v.name):
                    blocking.add((i, v.name))
    materialized = {u for (u, _) in blocking}
    latest = {
        v.name
        for v in ordered
        if opts.latest_per_key
        and v.kind is VertexKind.VERTEX
        and adjusted[v.name].attributes.idempotent is not None
        and not bounded[v.name]
    }
    groups: list[list[str]] = []
    if opts.fuse:
        allowed = fusable if fusable is not None else [v.name for v in ordered if v.python]
        groups = _fusion_groups(ordered, successors, adjusted, set(allowed), materialized | latest)
    group_of = {name: "+".join(g) for g in groups for name in g}
    fused_edges = {(g[k], g[k + 1]) for g in groups for k in range(len(g) - 1)}

    phase: dict[str, int] = {}
    for v in ordered:
        phase[v.name] = max(
            (phase[i] + (1 if (i, v.name) in blocking else 0) for i in v.inputs), default=0
        )

    vertices: list[PlanVertex] = []
    for v in ordered:
        adj = adjusted[v.name]
        tap = _tap(v, group_of, groups, materialized, latest)
        vertices.append(
            PlanVertex(
                name=v.name,
                kind=v.kind,
                inputs=list(v.inputs),
                bounded=bounded[v.name],
                python=v.python,
                declared=v.attributes,
                adjusted=adj.attributes,
                inherited_from=adj.inherited_from,
                phase=phase[v.name],
                materialize=v.name in materialized,
                latest_per_key=v.name in latest,
                fusion_group=group_of.get(v.name),
                tap=tap,
                notes=_notes(
                    v, adj, bounded[v.name], opts, materialized, latest, group_of, phase, successors
                ),
            )
        )
    edges = [
        PlanEdge(
            upstream=i,
            downstream=v.name,
            kind=EdgeKind.BLOCKING if (i, v.name) in blocking else EdgeKind.PIPELINED,
            fused=(i, v.name) in fused_edges,
        )
        for v in ordered
        for i in v.inputs
    ]
    return Plan(
        pipeline=description.name,
        vertices=vertices,
        edges=edges,
        phases=_phases(ordered, phase, bounded, blocking, materialized),
        fusions=[FusionGroup(name="+".join(g), vertices=g) for g in groups],
        optimizations=opts,
    )


def _as_parsed(
    overrides: Mapping[str, AttributeOverride] | Mapping[str, Any] | str,
) -> dict[str, AttributeOverride]:
    if isinstance(overrides, Mapping) and not _spec_shaped(overrides):
        # Already {vertex: {attribute: value}}: run it through the parser anyway, so that
        # unknown names and bad values fail with the same messages.
        entries = [{"name": k, "attributes": v} for k, v in overrides.items()]
        return parse_overrides({"vertices": entries})
    return parse_overrides(overrides)


def _spec_shaped(m: Mapping[str, Any]) -> bool:
    """True for a SparkApplication, its spec, or its pipeline (not ``{vertex: attrs}``).

    Decided by shape, not key names alone: "spec", "pipeline" and "vertices" are valid
    vertex names too.
    """
    spec, pipeline, vertices = m.get("spec"), m.get("pipeline"), m.get("vertices")
    return (
        isinstance(vertices, list)
        or (isinstance(pipeline, Mapping) and "vertices" in pipeline)
        or (isinstance(spec, Mapping) and "pipeline" in spec)
    )


def _tap(
    v: VertexDescription,
    group_of: Mapping[str, str],
    groups: Sequence[list[str]],
    materialized: Collection[str],
    latest: Collection[str],
) -> TapPlacement:
    if v.kind is VertexKind.SINK:
        return TapPlacement.NONE
    if v.name in group_of and not any(g[-1] == v.name for g in groups):
        return TapPlacement.NONE
    if v.name in materialized:
        return TapPlacement.MATERIALIZED_OUTPUT
    if v.name in latest:
        return TapPlacement.LATEST_PER_KEY_OUTPUT
    return TapPlacement.OUTPUT


def _notes(
    v: VertexDescription,
    adj: Adjusted,
    bounded: bool,
    opts: Optimizations,
    materialized: Collection[str],
    latest: Collection[str],
    group_of: Mapping[str, str],
    phase: Mapping[str, int],
    successors: Mapping[str, list[str]],
) -> list[str]:
    notes: list[str] = []
    attrs = adj.attributes
    if adj.inherited_from is not None:
        notes.append(
            f"inherits noOutputUntilEndOfInput from {adj.inherited_from!r}: its single input "
            "is that chain, so it too emits only after the input ended"
        )
    if attrs.no_output_until_end_of_input:
        if not opts.materialize:
            notes.append("end-of-input: materialization switched off; edges stay pipelined")
        elif v.name in materialized:
            later = sorted({phase[s] for s in successors[v.name]})
            notes.append(
                "end-of-input: output written once (reliable files) in phase "
                f"{phase[v.name]} and read back by phase(s) {', '.join(map(str, later))}, "
                "instead of being recomputed by every downstream job or micro-batch"
            )
        elif successors[v.name]:
            notes.append("end-of-input: chained into its successor, which is materialized")
    if attrs.idempotent is not None:
        keys = ", ".join(attrs.idempotent.key)
        if bounded:
            notes.append(f"idempotent by [{keys}]: bounded, so its one output is final; kept as is")
        elif v.name in latest:
            notes.append(
                f"idempotent by [{keys}]: only the latest row per key per micro-batch goes "
                "downstream (a streaming aggregation already emits one row per group per "
                "micro-batch; it is then left as is)"
            )
        else:
            notes.append(f"idempotent by [{keys}]: latest-per-key switched off")
    if attrs.not_cache_record:
        if not v.python:
            notes.append(
                "notCacheRecord: no effect on a JVM vertex (fusion is for Python vertices)"
            )
        elif v.name in group_of:
            notes.append(
                f"notCacheRecord: runs in the fused Python pass {group_of[v.name]!r}; batches "
                "are handed on without a copy"
            )
        elif not opts.fuse:
            notes.append("notCacheRecord: fusion switched off")
        else:
            notes.append("notCacheRecord: no adjacent notCacheRecord Python vertex to fuse with")
    if v.name in group_of and group_of[v.name].split("+")[-1] != v.name:
        notes.append(
            f"no tap: its batches go straight to the next function of {group_of[v.name]!r} "
            "without reaching the JVM; sample the group's last vertex"
        )
    return notes


def _phases(
    ordered: Sequence[VertexDescription],
    phase: Mapping[str, int],
    bounded: Mapping[str, bool],
    blocking: Collection[tuple[str, str]],
    materialized: Collection[str],
) -> list[PlanPhase]:
    count = max(phase.values(), default=0) + 1
    phases = [PlanPhase(index=k, steps=[]) for k in range(count)]
    for v in ordered:
        p = phases[phase[v.name]]
        if v.kind is VertexKind.SINK:
            (p.batch_sinks if bounded[v.name] else p.streaming_sinks).append(v.name)
        else:
            p.steps.append(v.name)
        if v.name in materialized:
            p.materializes.append(v.name)
        for i in v.inputs:
            if (i, v.name) in blocking and i not in p.waits_for:
                p.waits_for.append(i)
    return phases

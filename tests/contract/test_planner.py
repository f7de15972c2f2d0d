"""validate → adjust → Plan on PipelineDescriptions alone (no Spark)."""

from __future__ import annotations

import json

import pytest

from sparkglass.runtime.contract.description import (
    IdempotentAttribute,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
)
from sparkglass.runtime.contract.errors import PipelineError, PlanError
from sparkglass.runtime.contract.plan import EdgeKind, Optimizations, TapPlacement
from sparkglass.runtime.contract.planner import adjust, plan, validate

EOI = VertexAttributes(no_output_until_end_of_input=True)
NCR = VertexAttributes(not_cache_record=True)


def src(name: str, bounded: bool = True) -> VertexDescription:
    return VertexDescription(name=name, kind=VertexKind.SOURCE, bounded=bounded)


def vtx(name: str, *inputs: str, attrs: VertexAttributes | None = None, python: bool = False):
    return VertexDescription(
        name=name, inputs=list(inputs), attributes=attrs or VertexAttributes(), python=python
    )


def sink(name: str, input: str) -> VertexDescription:
    return VertexDescription(name=name, kind=VertexKind.SINK, inputs=[input])


def flights(**attrs: VertexAttributes) -> PipelineDescription:
    """The demo's graph; ``attrs`` maps vertex names (underscored) to attributes."""
    a = {k.replace("_", "-"): v for k, v in attrs.items()}
    return PipelineDescription(
        name="flights",
        vertices=[
            src("flights", bounded=False),
            src("schedule"),
            src("airports"),
            vtx("parse", "flights", attrs=a.get("parse")),
            vtx("delays-by-carrier", "parse", attrs=a.get("delays-by-carrier")),
            vtx("busiest-origins", "schedule", "airports", attrs=a.get("busiest-origins")),
            vtx("enrich-origin", "parse", "busiest-origins", attrs=a.get("enrich-origin")),
            sink("carrier-delays", "delays-by-carrier"),
            sink("enriched-flights", "enrich-origin"),
        ],
    )


# ------------------------------------------------------------------ validate
def test_end_of_input_on_a_stream_names_vertex_and_source():
    with pytest.raises(PlanError) as err:
        validate(flights(delays_by_carrier=EOI))
    assert err.value.vertex == "delays-by-carrier"
    assert err.value.source == "flights"
    assert "flights -> parse -> delays-by-carrier" in str(err.value)


def test_end_of_input_on_a_join_with_a_stream_is_an_error_too():
    with pytest.raises(PlanError) as err:
        plan(flights(enrich_origin=EOI))
    assert (err.value.vertex, err.value.source) == ("enrich-origin", "flights")


def test_end_of_input_on_a_bounded_branch_is_fine():
    validate(flights(busiest_origins=EOI))


def test_boundedness_comes_from_sources_not_vertex_flags():
    # An operator-built description leaves vertices at the default bounded=True.
    d = flights(delays_by_carrier=EOI)
    assert all(v.bounded for v in d.vertices if v.kind is not VertexKind.SOURCE)
    with pytest.raises(PlanError, match="flights"):
        plan(d)


def test_override_can_introduce_the_error():
    with pytest.raises(PlanError, match=r"'parse'.*'flights'"):
        plan(flights(), overrides={"parse": {"noOutputUntilEndOfInput": True}})


def test_graph_errors_come_first():
    d = PipelineDescription(name="p", vertices=[src("s"), vtx("v", "nope")])
    with pytest.raises(PipelineError, match="unknown input 'nope'"):
        plan(d)


# -------------------------------------------------------------------- adjust
def seed_figure() -> PipelineDescription:
    """The seed's figure: node2 declares end-of-input; node3 (single input) inherits, and so
    does node4 after it; ``other`` (not downstream of node2) and the two-input ``join`` do not.
    """
    return PipelineDescription(
        name="figure",
        vertices=[
            src("src"),
            vtx("node1", "src"),
            vtx("node2", "node1", attrs=EOI),
            vtx("node3", "node2"),
            vtx("node4", "node3"),
            vtx("other", "node1"),
            vtx("join", "node2", "other"),
            sink("out3", "node4"),
            sink("out-join", "join"),
        ],
    )


def test_adjustment_rules_of_the_seed_figure():
    adjusted = adjust(seed_figure())
    eoi = {n for n, a in adjusted.items() if a.attributes.no_output_until_end_of_input}
    assert eoi == {"node2", "node3", "node4"}
    assert adjusted["node3"].inherited_from == "node2"
    assert adjusted["node4"].inherited_from == "node2"
    assert adjusted["node2"].inherited_from is None
    for unaffected in ("node1", "other", "join"):
        assert adjusted[unaffected].inherited_from is None


def test_seed_figure_edges_phases_and_materialization():
    p = plan(seed_figure())
    assert p.edge("node2", "node3").kind is EdgeKind.PIPELINED  # chained
    assert p.edge("node3", "node4").kind is EdgeKind.PIPELINED
    assert p.edge("node4", "out3").kind is EdgeKind.BLOCKING
    assert p.edge("node2", "join").kind is EdgeKind.BLOCKING
    assert p.edge("node1", "other").kind is EdgeKind.PIPELINED
    assert {v.name for v in p.vertices if v.materialize} == {"node2", "node4"}
    assert p.vertex("node3").declared.no_output_until_end_of_input is False
    assert p.vertex("node3").adjusted.no_output_until_end_of_input is True
    assert [v.name for v in p.vertices if v.phase == 1] == ["join", "out3", "out-join"]
    assert p.phases[0].materializes == ["node2", "node4"]
    assert p.phases[1].waits_for == ["node4", "node2"] or set(p.phases[1].waits_for) == {
        "node2",
        "node4",
    }
    assert p.phases[1].batch_sinks == ["out3", "out-join"]
    assert p.vertex("node2").tap is TapPlacement.MATERIALIZED_OUTPUT
    assert p.vertex("node3").tap is TapPlacement.OUTPUT


def test_flights_plan_with_the_demo_attributes():
    d = flights(
        busiest_origins=EOI,
        delays_by_carrier=VertexAttributes(idempotent=IdempotentAttribute(key=["carrier"])),
    )
    p = plan(d)
    assert p.edge("busiest-origins", "enrich-origin").kind is EdgeKind.BLOCKING
    assert p.edge("parse", "enrich-origin").kind is EdgeKind.PIPELINED
    # The join has two inputs: it does not inherit, and it is streaming.
    assert p.vertex("enrich-origin").adjusted.no_output_until_end_of_input is False
    assert p.vertex("enrich-origin").phase == 1
    assert p.vertex("busiest-origins").materialize
    # The other branch is not held back by the bounded phase.
    assert p.vertex("delays-by-carrier").phase == 0
    assert p.phases[0].streaming_sinks == ["carrier-delays"]
    assert p.phases[1].streaming_sinks == ["enriched-flights"]
    assert p.phases[1].waits_for == ["busiest-origins"]
    dbc = p.vertex("delays-by-carrier")
    assert dbc.latest_per_key and dbc.tap is TapPlacement.LATEST_PER_KEY_OUTPUT


def test_idempotent_on_a_bounded_vertex_is_kept_as_is():
    d = flights(busiest_origins=VertexAttributes(idempotent=IdempotentAttribute(key=["origin"])))
    v = plan(d).vertex("busiest-origins")
    assert not v.latest_per_key
    assert any("bounded" in n for n in v.notes)


def test_optimizations_off_keeps_attributes_but_not_their_use():
    d = flights(busiest_origins=EOI)
    p = plan(d, optimizations=Optimizations(materialize=False))
    assert all(e.kind is EdgeKind.PIPELINED for e in p.edges)
    assert len(p.phases) == 1
    assert p.vertex("busiest-origins").adjusted.no_output_until_end_of_input


# -------------------------------------------------------------------- fusion
def python_chain(*attrs: VertexAttributes) -> PipelineDescription:
    names = [f"p{k}" for k in range(len(attrs))]
    vertices = [src("s", bounded=False)]
    prev = "s"
    for name, a in zip(names, attrs, strict=True):
        vertices.append(vtx(name, prev, attrs=a, python=True))
        prev = name
    vertices.append(sink("out", prev))
    return PipelineDescription(name="chain", vertices=vertices)


def test_three_not_cache_record_python_vertices_fuse():
    p = plan(python_chain(NCR, NCR, NCR))
    assert [g.vertices for g in p.fusions] == [["p0", "p1", "p2"]]
    assert p.edge("p0", "p1").fused and p.edge("p1", "p2").fused
    assert not p.edge("p2", "out").fused
    assert p.vertex("p0").tap is TapPlacement.NONE
    assert p.vertex("p2").tap is TapPlacement.OUTPUT
    assert p.vertex("p1").fusion_group == "p0+p1+p2"


def test_a_vertex_without_the_attribute_breaks_the_chain():
    p = plan(python_chain(NCR, VertexAttributes(), NCR, NCR))
    assert [g.vertices for g in p.fusions] == [["p2", "p3"]]
    assert p.vertex("p0").fusion_group is None


def test_no_fusion_when_not_fusable_or_switched_off_or_branching():
    assert plan(python_chain(NCR, NCR), fusable=["p0"]).fusions == []
    assert plan(python_chain(NCR, NCR), optimizations=Optimizations(fuse=False)).fusions == []
    d = python_chain(NCR, NCR)
    d.vertices.append(sink("tap-p0", "p0"))  # p0 has a second consumer
    assert plan(d).fusions == []


def test_jvm_vertex_with_not_cache_record_is_not_fused():
    d = python_chain(NCR, NCR)
    d.vertices[1].python = False
    p = plan(d)
    assert p.fusions == []
    assert any("JVM" in n for n in p.vertex("p0").notes)


# ---------------------------------------------------------------------- JSON
def test_plan_json_is_camel_case_and_round_trips():
    from sparkglass.runtime.contract.plan import Plan

    p = plan(flights(busiest_origins=EOI))
    data = p.to_json_dict()
    text = json.dumps(data)
    assert '"inheritedFrom"' in text and '"noOutputUntilEndOfInput"' in text
    assert '"waitsFor"' in text and '"streamingSinks"' in text
    assert Plan.model_validate(json.loads(text)) == p
    v = json.loads(text)["vertices"][5]
    assert v["name"] == "busiest-origins" and v["materialize"] is True


def test_unsorted_description_is_planned_in_topological_order():
    d = flights(busiest_origins=EOI)
    d.vertices.reverse()
    names = [v.name for v in plan(d).vertices]
    assert names.index("busiest-origins") < names.index("enrich-origin")


def test_overrides_parsed_form_even_for_a_vertex_called_pipeline():
    d = PipelineDescription(
        name="p", vertices=[src("s"), vtx("pipeline", "s"), sink("out", "pipeline")]
    )
    p = plan(d, overrides={"pipeline": {"noOutputUntilEndOfInput": True}})
    assert p.vertex("pipeline").declared.no_output_until_end_of_input
    entry = {"name": "pipeline", "attributes": {"notCacheRecord": True}}
    spec = {"spec": {"pipeline": {"vertices": [entry]}}}
    assert plan(d, overrides=spec).vertex("pipeline").declared.not_cache_record

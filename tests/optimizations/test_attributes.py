"""The parsing stage: decorators and spec-shaped overrides."""

from __future__ import annotations

import pytest

from sparkglass.runtime.contract.attributes import (
    apply_overrides,
    attributes_of,
    idempotent,
    idempotent_order_by,
    no_output_until_end_of_input,
    not_cache_record,
    parse_overrides,
)
from sparkglass.runtime.contract.description import (
    ATTRIBUTES_ATTR,
    PipelineDescription,
    VertexAttributes,
    VertexDescription,
    VertexKind,
)
from sparkglass.runtime.contract.errors import PlanError


def test_decorators_stack_and_return_the_function():
    @no_output_until_end_of_input
    @idempotent(key="carrier", order_by="sched_dep")
    @not_cache_record
    def f(x):
        return x

    attrs = attributes_of(f)
    assert attrs.no_output_until_end_of_input
    assert attrs.not_cache_record
    assert attrs.idempotent is not None and attrs.idempotent.key == ["carrier"]
    assert idempotent_order_by(attrs, f) == "sched_dep"
    assert f(3) == 3
    assert getattr(f, ATTRIBUTES_ATTR) == attrs


def test_called_forms_and_undecorated():
    @no_output_until_end_of_input()
    @not_cache_record()
    def g(x):
        return x

    assert attributes_of(g).no_output_until_end_of_input and attributes_of(g).not_cache_record
    assert attributes_of(lambda x: x) == VertexAttributes()


def test_idempotent_needs_a_key():
    with pytest.raises(PlanError, match="key"):
        idempotent(key=[])


def test_pipeline_vertex_reads_the_decorators(spark):
    from sparkglass.runtime.pipeline import Pipeline

    @idempotent(key=["carrier", "origin"])
    def v(df):
        return df

    p = Pipeline("p", spark)
    p.source("s", spark.range(3))
    p.vertex("v", "s", v)
    attrs = p.describe().vertex("v").attributes
    assert attrs.idempotent is not None and attrs.idempotent.key == ["carrier", "origin"]


SPEC = """
apiVersion: sparkglass.io/v1alpha1
kind: SparkApplication
spec:
  pipeline:
    vertices:
      - name: busiest-origins
        inputs: [schedule, airports]
        attributes: {noOutputUntilEndOfInput: true}
      - name: delays-by-carrier
        attributes:
          idempotent: {key: [carrier]}
      - name: parse
"""


def test_parse_overrides_from_a_sparkapplication_yaml():
    parsed = parse_overrides(SPEC)
    assert parsed["busiest-origins"] == {"no_output_until_end_of_input": True}
    assert parsed["delays-by-carrier"]["idempotent"].key == ["carrier"]
    assert parsed["parse"] == {}


@pytest.mark.parametrize(
    "spec",
    [
        {"pipeline": {"vertices": [{"name": "x", "attributes": {"notCacheRecord": True}}]}},
        {"vertices": [{"name": "x", "attributes": {"not_cache_record": True}}]},
        [{"name": "x", "attributes": {"notCacheRecord": True}}],
    ],
)
def test_parse_overrides_shapes(spec):
    assert parse_overrides(spec) == {"x": {"not_cache_record": True}}


def test_unknown_attribute_names_vertex_and_allowed_names():
    with pytest.raises(PlanError) as err:
        parse_overrides([{"name": "parse", "attributes": {"sorted": True}}])
    msg = str(err.value)
    assert "'parse'" in msg and "'sorted'" in msg
    for allowed in ("noOutputUntilEndOfInput", "idempotent", "notCacheRecord"):
        assert allowed in msg
    assert err.value.vertex == "parse"


@pytest.mark.parametrize(
    ("attributes", "match"),
    [
        ({"noOutputUntilEndOfInput": "yes"}, "true or false"),
        ({"idempotent": {"key": []}}, "idempotent"),
        ({"idempotent": {"keys": ["a"]}}, "idempotent"),
        ({"idempotent": 3}, "idempotent"),
        ("notCacheRecord", "mapping"),
    ],
)
def test_bad_values(attributes, match):
    with pytest.raises(PlanError, match=match):
        parse_overrides([{"name": "v", "attributes": attributes}])


def test_duplicate_and_nameless_entries():
    with pytest.raises(PlanError, match="twice"):
        parse_overrides([{"name": "v"}, {"name": "v"}])
    with pytest.raises(PlanError, match="name"):
        parse_overrides([{"attributes": {}}])


def _description() -> PipelineDescription:
    return PipelineDescription(
        name="p",
        vertices=[
            VertexDescription(name="s", kind=VertexKind.SOURCE),
            VertexDescription(
                name="v",
                inputs=["s"],
                attributes=VertexAttributes(not_cache_record=True),
            ),
            VertexDescription(name="out", kind=VertexKind.SINK, inputs=["v"]),
        ],
    )


def test_apply_overrides_merges_only_named_attributes():
    d = _description()
    got = apply_overrides(
        d, parse_overrides([{"name": "v", "attributes": {"idempotent": {"key": "k"}}}])
    )
    attrs = got.vertex("v").attributes
    assert attrs.not_cache_record and attrs.idempotent is not None
    assert attrs.idempotent.key == ["k"]
    # the input is not modified
    assert d.vertex("v").attributes.idempotent is None
    off = apply_overrides(got, parse_overrides([{"name": "v", "attributes": {"idempotent": None}}]))
    assert off.vertex("v").attributes.idempotent is None


def test_apply_overrides_unknown_vertex_and_source():
    with pytest.raises(PlanError, match=r"unknown vertex 'nope'.*s, v, out"):
        apply_overrides(_description(), {"nope": {"not_cache_record": True}})
    with pytest.raises(PlanError, match="source 's' cannot have attributes"):
        apply_overrides(_description(), {"s": {"not_cache_record": True}})

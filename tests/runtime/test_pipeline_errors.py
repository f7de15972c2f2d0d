"""Every PipelineError case names the offending vertex."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from sparkglass.runtime import Pipeline, PipelineError


@pytest.fixture
def pipeline(spark: SparkSession) -> Pipeline:
    p = Pipeline("errors", spark)
    p.source("numbers", spark.range(10))
    return p


@pytest.mark.parametrize(
    "bad", ["Parse", "parse_step", "-parse", "parse-", "a" * 64, "", "pars e", "ünï"]
)
def test_bad_vertex_names_are_rejected_with_the_rule(pipeline: Pipeline, bad: str) -> None:
    with pytest.raises(PipelineError, match=r"DNS-1123|non-empty") as info:
        pipeline.vertex(bad, "numbers", lambda df: df)
    assert info.value.vertex in (bad, None)
    if bad:
        assert repr(bad) in str(info.value)


def test_good_names_are_accepted(pipeline: Pipeline) -> None:
    for name in ["parse", "delays-by-carrier", "a", "x1", "1x", "a" * 63]:
        pipeline.vertex(name, "numbers", lambda df: df)


def test_duplicate_name(pipeline: Pipeline) -> None:
    pipeline.vertex("double", "numbers", lambda df: df)
    with pytest.raises(PipelineError, match="duplicate vertex name 'double'") as info:
        pipeline.vertex("double", "numbers", lambda df: df)
    assert info.value.vertex == "double"


def test_duplicate_of_a_source_name(pipeline: Pipeline, spark: SparkSession) -> None:
    with pytest.raises(PipelineError, match="'numbers'"):
        pipeline.source("numbers", spark.range(1))


def test_unknown_input_names_the_vertex_and_the_input(pipeline: Pipeline) -> None:
    pipeline.vertex("square", "numbrs", lambda df: df)
    with pytest.raises(PipelineError, match="'square' reads unknown input 'numbrs'") as info:
        pipeline.describe()
    assert info.value.vertex == "square"
    assert "numbers" in str(info.value)  # lists what exists


def test_cycle_names_a_vertex_on_it(pipeline: Pipeline) -> None:
    pipeline.vertex("a", ["numbers", "c"], lambda x, y: x)
    pipeline.vertex("b", "a", lambda df: df)
    pipeline.vertex("c", "b", lambda df: df)
    with pytest.raises(PipelineError, match="cycle") as info:
        pipeline.start()
    assert info.value.vertex in {"a", "b", "c"}
    assert "a" in str(info.value) and "c" in str(info.value)


def test_self_loop(pipeline: Pipeline) -> None:
    pipeline.vertex("me", "me", lambda df: df)
    with pytest.raises(PipelineError, match="cycle through vertex 'me'"):
        pipeline.describe()


def test_sink_as_input(pipeline: Pipeline) -> None:
    pipeline.sink("out", "numbers", lambda df: None)
    pipeline.vertex("after", "out", lambda df: df)
    with pytest.raises(PipelineError, match="'after' reads sink 'out'") as info:
        pipeline.describe()
    assert info.value.vertex == "after"


def test_source_needs_a_dataframe(pipeline: Pipeline) -> None:
    with pytest.raises(PipelineError, match="source 'rows' needs a DataFrame, got list"):
        pipeline.source("rows", [1, 2, 3])  # type: ignore[arg-type]


def test_vertex_must_return_a_dataframe(pipeline: Pipeline) -> None:
    pipeline.vertex("broken", "numbers", lambda df: 42)
    with pytest.raises(PipelineError, match="'broken' returned int") as info:
        pipeline.output("broken")
    assert info.value.vertex == "broken"


def test_stream_sink_must_return_a_stream_writer(spark: SparkSession) -> None:
    p = Pipeline("stream-errors", spark)
    p.source("ticks", spark.readStream.format("rate").load())
    p.sink("out", "ticks", lambda df: None)
    with pytest.raises(PipelineError, match="sink 'out' reads a stream") as info:
        p.start()
    assert info.value.vertex == "out"
    p.stop()


def test_bad_pipeline_name() -> None:
    with pytest.raises(PipelineError, match="DNS-1123"):
        Pipeline("My Pipeline")

"""Many taps in one stage stay JIT-compiled.

Whole-stage code generation writes a stage into one method, and HotSpot does not compile a
method of more than 8,000 bytes of bytecode (``-XX:+DontCompileHugeMethods``, the default):
it runs interpreted, hundreds of times slower. A tap's capture branch (the struct and the
``CaptureUdf`` call) is written into a method of its own (``TapCapture``), so only the gate's
field read and a call stay in the stage's method. The size is read from Spark's own
compilation of the plan (``debug.codegenStringSeq``: the largest method of each stage's
class), a deterministic check where a timing would not be.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from tests.support.spark_conf import SetSparkConf

pytestmark = pytest.mark.spark

ENABLED = "spark.sparkglass.sampling.enabled"
NATIVE_GATE = "spark.sparkglass.sampling.nativeGate"
WHOLE_STAGE = "spark.sql.codegen.wholeStage"
FACTORY_MODE = "spark.sql.codegen.factoryMode"
#: HotSpot's HugeMethodLimit: a larger method is never JIT-compiled.
HUGE_METHOD_BYTES = 8_000
TAPS = 50
ROWS = 1_000


def tap_chain(spark: Any, name: str, taps: int) -> tuple[Pipeline, Any, list[str]]:
    """``taps`` tapped vertices in a chain of ``id + 1`` maps (the source is the first):
    the pipeline, its output and the vertex names."""
    p = Pipeline(name, spark)
    vertices = [p.source(f"{name}-0", spark.range(0, ROWS, numPartitions=2))]
    for i in range(1, taps):
        vertices.append(
            p.vertex(f"{name}-{i}", vertices[-1], lambda df: df.selectExpr("id + 1 AS id"))
        )
    return p, p.output(vertices[-1]), vertices


def stage_stats(spark: Any, df: Any) -> list[tuple[str, int]]:
    """Per whole-stage subtree of ``df``'s plan: (generated source, largest method's bytecode
    bytes after Janino compiled it; -1 when it did not compile)."""
    debug = getattr(getattr(spark._jvm.org.apache.spark.sql.execution.debug, "package$"), "MODULE$")
    stages = debug.codegenStringSeq(df._jdf.queryExecution().executedPlan())
    out = []
    for i in range(stages.size()):
        stage = stages.apply(i)
        out.append((str(stage._2()), int(stage._3().maxMethodCodeSize())))
    return out


def test_fifty_taps_in_one_stage_keep_every_generated_method_under_the_jit_limit(
    spark: Any, set_spark_conf: SetSparkConf
) -> None:
    set_spark_conf({ENABLED: "true"})
    p, tapped, _ = tap_chain(spark, "many-taps-size", TAPS)
    try:
        (stage,) = stage_stats(spark, tapped)  # one stage: range, 50 filters, the maps
        source, largest = stage
        assert 0 < largest < HUGE_METHOD_BYTES, largest
        # Every capture is a method of its own, called behind its gate.
        assert len(re.findall(r"private boolean \w*sgCapture_\d+\(", source)) == TAPS
        assert source.count(".active && ") == TAPS
        ids = sorted(r.id for r in tapped.where(f"id < {TAPS + 3}").collect())
        assert ids == list(range(TAPS - 1, TAPS + 3))
    finally:
        p.stop()


def test_the_udf_gate_keeps_its_inline_capture(spark: Any, set_spark_conf: SetSparkConf) -> None:
    """``nativeGate=false``, the escape hatch, is the tap as it was: UDF gate, inline capture."""
    set_spark_conf({ENABLED: "true", NATIVE_GATE: "false"})
    p, tapped, _ = tap_chain(spark, "many-taps-udf", 2)
    try:
        ((source, largest),) = stage_stats(spark, tapped)
        assert largest > 0
        assert "sgCapture" not in source
        assert re.search(
            r"CASE WHEN sg_gate_\d+\(\) THEN sg_capture_\d+\(struct\(",
            str(tapped._jdf.queryExecution().executedPlan().toString()),
        )
    finally:
        p.stop()


def test_a_capture_with_too_many_inputs_for_a_method_is_inlined(
    spark: Any, set_spark_conf: SetSparkConf
) -> None:
    """130 long columns are 260 parameter slots, past the JVM's 255: the capture's code stays
    inline, as before, and the stage still compiles. (A nondeterministic column keeps the
    optimizer from pushing the tap below the map, where it would read ``id`` alone; past 100
    columns a stage is not code-generated whole unless ``maxFields`` says so.)"""
    set_spark_conf({ENABLED: "true", "spark.sql.codegen.maxFields": "200"})
    p = Pipeline("many-taps-wide", spark)
    wide = spark.range(0, ROWS, numPartitions=2).selectExpr(
        "rand(7) AS r", *[f"id + {i} AS c{i}" for i in range(130)]
    )
    out = p.output(p.source("many-taps-wide-0", wide))
    try:
        ((source, largest),) = stage_stats(spark, out)
        assert largest > 0, "the stage did not compile"
        assert "sgCapture" not in source
        assert ".active && " in source
        assert out.count() == ROWS
    finally:
        p.stop()


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param({}, id="whole-stage"),
        pytest.param({WHOLE_STAGE: "false"}, id="expression-codegen"),
        pytest.param({WHOLE_STAGE: "false", FACTORY_MODE: "NO_CODEGEN"}, id="interpreted"),
    ],
)
def test_a_round_on_a_tap_deep_in_fifty_captures_its_rows(
    spark: Any, set_spark_conf: SetSparkConf, mode: dict[str, str]
) -> None:
    """A round on the 40th of 50 taps returns that vertex's rows (``id + 39``), through the
    split capture (whole-stage and expression code generation) and through ``eval``."""
    set_spark_conf({ENABLED: "true", **mode})
    suffix = "-".join(v.lower().replace("_", "") for v in mode.values()) or "ws"
    p, tapped, vertices = tap_chain(spark, f"many-taps-round-{suffix}", TAPS)
    depth = 39
    try:
        c = registry.coordinator_for(spark)
        for _attempt in range(4):  # a loaded machine can miss the window
            started = c.start_round(vertices[depth], 3_000)
            assert started.status is SampleStatus.PENDING, started
            # The job runs again and again over the window: however late the round reaches
            # the taps, rows pass them while it is open.
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                assert tapped.count() == ROWS
            result = c.wait(started.round_id, 90)
            if result.status is not SampleStatus.NO_DATA:
                break
        assert result.status is SampleStatus.COMPLETE, result
        rows = [r.data for s in result.samples for r in s.records]
        assert rows
        ids = [int(m) for r in rows for m in re.findall(r'"id":\s*(\d+)', r)]
        assert len(ids) == len(rows)
        assert all(depth <= i < ROWS + depth for i in ids), ids[:10]
    finally:
        p.stop()

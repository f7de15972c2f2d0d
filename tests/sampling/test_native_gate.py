"""The code-generated tap gate (``NativeTapGate``, ``sg_tap_gate_native``) on real local Spark.

The shared session has no ``spark.sql.extensions`` (a static conf), so the gate is registered
by name with ``NativeGates.register``, as ``TapUdfs.register`` registers the UDF gate; the
capture stays the ``CaptureUdf``. A round goes through the application's coordinator.

The native gate is the default of every tap: the DSL's (``install_tap``, through
``NativeGates.registerTap``) and the extension's; ``spark.sparkglass.sampling.nativeGate=false``
brings back the UDF gate, and so does a native gate that cannot be registered.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry, tap
from sparkglass.runtime.sampling.jvm_transport import JvmTransport
from sparkglass.runtime.sampling.rounds import TapInfo
from tests.support.spark_conf import SetSparkConf, spark_conf

pytestmark = pytest.mark.spark

NATIVE_CLASS = "io.sparkglass.extensions.NativeTapGate"
SCALA_UDF_CLASS = "org.apache.spark.sql.catalyst.expressions.ScalaUDF"
GATE_UDF_CLASS = "io.sparkglass.sampling.GateUdf"
ENABLED = "spark.sparkglass.sampling.enabled"
NATIVE_GATE = "spark.sparkglass.sampling.nativeGate"
WHOLE_STAGE = "spark.sql.codegen.wholeStage"


def register_native_tap(spark: Any) -> tuple[str, str, str]:
    """A fresh tap key with its native gate and its capture registered: (key, gate, capture)."""
    n = uuid.uuid4().hex[:8]
    key = f"native-test/{n}"
    gate, capture = f"sg_ngate_{n}", f"sg_ncapture_{n}"
    jvm, js = spark._jvm, spark._jsparkSession
    # The UDF pair registers the capture; its gate name is left unused.
    jvm.io.sparkglass.sampling.TapUdfs.register(js, key, f"sg_unused_gate_{n}", capture)
    jvm.io.sparkglass.extensions.NativeGates.register(js, key, gate)
    return key, gate, capture


def condition(gate: str, capture: str) -> str:
    return f"CASE WHEN {gate}() THEN {capture}(struct(*)) ELSE true END"


def expressions(plan: Any) -> Iterator[Any]:
    """Every expression of every node of a physical plan (Py4J walk)."""
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        children = node.children()
        nodes += [children.apply(i) for i in range(children.size())]
        todo = [node.expressions().apply(i) for i in range(node.expressions().size())]
        while todo:
            e = todo.pop()
            yield e
            kids = e.children()
            todo += [kids.apply(i) for i in range(kids.size())]


def codegen_text(spark: Any, df: Any) -> str:
    """What ``df.explain("codegen")`` prints: the whole-stage generated Java source."""
    utils = spark._jvm.org.apache.spark.sql.api.python.PythonSQLUtils
    return str(utils.explainString(df._jdf.queryExecution(), "codegen"))


def is_udf_gate(e: Any) -> bool:
    """A ``ScalaUDF`` registered as ``sg_gate_N``: the DSL's UDF gate."""
    name = e.udfName()
    return bool(name.isDefined()) and re.fullmatch(r"sg_gate_\d+", str(name.get())) is not None


def gate_classes(plan: Any) -> list[str]:
    """The tap gates in a physical plan: ``NativeTapGate`` / ``GateUdf`` class names (a
    ``ScalaUDF`` wraps the Java UDF, so the UDF gate is found by its registered name)."""
    found = []
    for e in expressions(plan):
        name = e.getClass().getName()
        if name == NATIVE_CLASS:
            found.append(name)
        elif name == SCALA_UDF_CLASS and is_udf_gate(e):
            found.append(GATE_UDF_CLASS)
    return found


def dsl_output(spark: Any, name: str) -> tuple[Pipeline, Any]:
    """A bounded DSL pipeline (range → double) and its tapped output."""
    p = Pipeline(name, spark)
    p.source("nums", spark.range(0, 50, numPartitions=2))
    p.vertex("double", "nums", lambda df: df.selectExpr("id", "id * 2 AS doubled"))
    return p, p.output("double")


def test_dsl_taps_use_the_native_gate_by_default_and_the_udf_gate_when_turned_off(
    spark: Any, set_spark_conf: SetSparkConf
) -> None:
    """The default plan of a DSL tap holds ``NativeTapGate`` (analyzed and executed plans,
    explain, generated code); ``nativeGate=false`` holds the ``GateUdf`` instead. Same rows."""
    set_spark_conf({ENABLED: "true"})
    on, tapped = dsl_output(spark, "native-default")
    qe = tapped._jdf.queryExecution()
    assert "sg_tap_gate_native(native-default/double/" in str(qe.analyzed().toString())
    # two taps: the source's and the vertex's, both native
    assert gate_classes(qe.executedPlan()) == [NATIVE_CLASS, NATIVE_CLASS]
    explained = str(qe.executedPlan().toString())
    assert re.search(r"\*\(\d+\) Filter CASE WHEN sg_tap_gate_native\(native-default/", explained)
    assert not re.search(r"sg_gate_\d+\(\)", explained)
    assert ".active &&" in codegen_text(spark, tapped)

    set_spark_conf({NATIVE_GATE: "false"})
    off, udf_tapped = dsl_output(spark, "native-off")
    qe = udf_tapped._jdf.queryExecution()
    assert gate_classes(qe.executedPlan()) == [GATE_UDF_CLASS, GATE_UDF_CLASS]
    explained = str(qe.executedPlan().toString())
    assert re.search(r"CASE WHEN sg_gate_\d+\(\) THEN sg_capture_\d+\(struct\(", explained)
    assert "sg_tap_gate_native" not in explained
    assert sorted(udf_tapped.collect()) == sorted(tapped.collect())
    assert len(tapped.collect()) == 50
    on.stop()
    off.stop()


def test_a_native_gate_that_cannot_be_registered_falls_back_to_the_udf_gate(
    spark: Any,
    set_spark_conf: SetSparkConf,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Sampling never fails a query: the taps get the UDF gate, counted, logged at most once."""

    def broken(self: Any, tap_key: str, gate: str, capture: str) -> None:
        raise RuntimeError("no native gate here")

    monkeypatch.setattr(JvmTransport, "register_native_gate", broken)
    set_spark_conf({ENABLED: "true"})
    before = tap.native_gate_fallbacks()
    with caplog.at_level(logging.WARNING, logger=tap.__name__):
        p, tapped = dsl_output(spark, "native-fallback")
    assert tap.native_gate_fallbacks() == before + 2  # the source's tap and the vertex's
    warnings = [r for r in caplog.records if "native tap gate failed" in r.getMessage()]
    assert len(warnings) == (1 if before == 0 else 0)
    plan = tapped._jdf.queryExecution().executedPlan()
    assert gate_classes(plan) == [GATE_UDF_CLASS, GATE_UDF_CLASS]
    assert sorted(r.doubled for r in tapped.collect()) == [2 * i for i in range(50)]
    p.stop()


def stream_plan(p: Pipeline) -> str:
    """The executed plan of the pipeline's (one) streaming query's last micro-batch."""
    (query,) = p.queries.values()
    return str(query._jsq.explainInternal(False))


@pytest.mark.parametrize("whole_stage", ["true", "false"])
def test_a_dsl_round_captures_rows_behind_the_native_gate_with_codegen_on_and_off(
    spark: Any, set_spark_conf: SetSparkConf, whole_stage: str
) -> None:
    """The default (native) gate of a DSL tap captures the vertex's rows in whole-stage
    generated code and, with ``spark.sql.codegen.wholeStage=false``, in interpreted ``eval``
    (the expression serialized with each task)."""
    set_spark_conf({ENABLED: "true", WHOLE_STAGE: whole_stage})
    p = Pipeline(f"native-codegen-{whole_stage}", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate")
        .option("rowsPerSecond", 400)
        .option("numPartitions", 2)
        .load(),
    )
    p.vertex("triple", "ticks", lambda df: df.selectExpr("value", "value * 3 AS tripled"))
    p.sink(
        "out",
        "triple",
        lambda df: df.writeStream.format("noop").trigger(processingTime="200 milliseconds"),
    )
    p.start()
    try:
        deadline = time.monotonic() + 90
        while p.progress().micro_batches < 1:
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.1)
        plan = stream_plan(p)
        assert f"sg_tap_gate_native({p.name}/triple/" in plan, plan
        generated = re.search(r"\*\(\d+\) Filter CASE WHEN sg_tap_gate_native", plan)
        assert bool(generated) == (whole_stage == "true"), plan
        if whole_stage == "false":
            assert "*(" not in plan, plan
        c = registry.coordinator_for(spark)
        for _attempt in range(4):  # a loaded machine's window can miss every micro-batch
            started = c.start_round("triple", 2_000)
            assert started.status is SampleStatus.PENDING, started
            result = c.wait(started.round_id, 90)
            if result.status is not SampleStatus.NO_DATA:
                break
        assert result.status is SampleStatus.COMPLETE, result
        rows = [r for s in result.samples for r in s.records]
        assert rows and result.total_record_count > 0
        assert all('"tripled"' in r.data for r in rows)
        # Each task's cursor keeps its own partition's sampler: rows come from both
        # partitions, each within its rate limit (100/s, a bucket of one second, 2 s window).
        per_partition = {s.subtask_index: len(s.records) for s in result.samples if s.records}
        assert set(per_partition) == {0, 1}, per_partition
        assert all(n <= 100 * (2 + 1) for n in per_partition.values()), per_partition
    finally:
        p.stop()


def test_the_extension_knows_every_kind_of_gate(spark) -> None:
    """``TapFunctions.containsGate`` (the rule leaves a plan that holds a gate alone) finds the
    native gate, the DSL's UDF gate (``sg_gate_N``) and the extension's (``sg_tap_gate``),
    and not the capture alone."""
    ext = spark._jvm.io.sparkglass.extensions.TapFunctions
    key, gate, capture = register_native_tap(spark)
    n = key.rsplit("/", 1)[1]
    udf_gate = f"sg_gate_{int(n, 16)}"
    spark._jvm.io.sparkglass.sampling.TapUdfs.register(
        spark._jsparkSession, key, udf_gate, f"sg_ucapture_{n}"
    )

    def condition_of(sql: str) -> Any:
        return spark.range(3).filter(sql)._jdf.queryExecution().analyzed().condition()

    assert ext.containsGate(condition_of(condition(gate, capture)))
    assert ext.containsGate(condition_of(condition(udf_gate, capture)))
    assert ext.containsGate(ext.gate(key))
    assert not ext.containsGate(condition_of(f"{capture}(struct(*))"))


def test_idle_plan_has_the_native_gate_in_generated_code_and_no_gate_udf(spark) -> None:
    _, gate, capture = register_native_tap(spark)
    df = spark.range(0, 10_000, numPartitions=2).selectExpr("id", "id * 3 AS t")
    tapped = df.filter(condition(gate, capture))
    plan = tapped._jdf.queryExecution().executedPlan()
    classes = [e.getClass().getName() for e in expressions(plan)]
    assert NATIVE_CLASS in classes
    gate_udfs = [
        e
        for e in expressions(plan)
        if e.getClass().getName() == SCALA_UDF_CLASS
        and e.function().getClass().getName() == GATE_UDF_CLASS
    ]
    assert gate_udfs == []
    code = codegen_text(spark, tapped)
    assert "Found 1 WholeStageCodegen subtrees" in code
    assert "io.sparkglass.sampling.TapSlot" in code
    assert ".active &&" in code  # the idle path: a field read in the generated loop
    assert ".cursor();" in code  # the active path: the task's cursor, made once per task
    assert GATE_UDF_CLASS not in code
    # Idle: every row passes, none is captured, and the answer is the untapped one.
    assert tapped.count() == 10_000
    assert sorted(r.t for r in tapped.where("id < 5").collect()) == [0, 3, 6, 9, 12]


def test_interpreted_mode_evaluates_the_gate(spark: Any) -> None:
    _, gate, capture = register_native_tap(spark)
    with spark_conf(spark, {WHOLE_STAGE: "false"}):
        df = spark.range(0, 1_000, numPartitions=2).filter(condition(gate, capture))
        assert df.count() == 1_000


def test_a_round_through_the_coordinator_captures_rows_behind_the_native_gate(
    spark, sampling_conf
) -> None:
    sampling_conf(enabled=True)
    key, gate, capture = register_native_tap(spark)
    vertex = f"native-{key.rsplit('/', 1)[1]}"
    stream = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 400)
        .option("numPartitions", 2)
        .load()
        .selectExpr("value", "value * 3 AS tripled")
        .filter(condition(gate, capture))
    )
    query = (
        stream.writeStream.format("noop")
        .trigger(processingTime="200 milliseconds")
        .queryName(vertex)
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while query.lastProgress is None:
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.1)
        app = registry.REGISTRY.application(spark)
        app.coordinator.register_tap(
            TapInfo(vertex=vertex, tap_key=key, data_type="struct<value:bigint,tripled:bigint>")
        )
        for _attempt in range(4):  # a loaded machine's window can miss every micro-batch
            started = app.coordinator.start_round(vertex, sampling_window_ms=2_000)
            assert started.status is SampleStatus.PENDING, started
            result = app.coordinator.wait(started.round_id, 90)
            if result.status is not SampleStatus.NO_DATA:
                break
        assert result.status is SampleStatus.COMPLETE, result
        assert result.total_record_count > 0
        rows = [r for s in result.samples for r in s.records]
        assert rows and all('"tripled"' in r.data for r in rows[:5])
        assert spark._jvm.io.sparkglass.sampling.TapUdfs.activeTaps() == 0
    finally:
        query.stop()


def test_the_extension_places_udf_gates_when_the_native_gate_is_turned_off(tmp_path) -> None:
    """``spark.sql.extensions`` + ``spark.sparkglass.sampling.nativeGate=false``: the taps
    ``StreamTapRule`` places use the UDF gate (the default, the native gate, is checked by
    ``test_plain_streaming.py``), and a round through the control endpoint (that file's plain
    streaming job) returns the query's rows."""
    from sparkglass.runtime.control.client import ControlClient

    # Its job and helpers, by path (the tests are not a package).
    spec = importlib.util.spec_from_file_location(
        "sg_plain_streaming_helpers", Path(__file__).with_name("test_plain_streaming.py")
    )
    assert spec is not None and spec.loader is not None
    plain = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = plain  # its dataclass looks its module up there
    spec.loader.exec_module(plain)
    TOKEN, rows, sample, start_job = plain.TOKEN, plain.rows, plain.sample, plain.start_job

    job = start_job(
        {
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.sampling.nativeGate": "false",
            "spark.sparkglass.control.token": TOKEN,
        },
        tmp_path,
    )
    try:
        ready = job.event("ready")
        assert sorted(ready["taps"]) == ["query/doubler", "view/ticks"]
        assert "sg_tap_gate()" in ready["plan"], ready["plan"]
        assert "sg_tap_gate_native" not in ready["plan"], ready["plan"]
        with ControlClient(ready["url"], TOKEN) as client:
            result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result
        got = rows(result)
        assert got and all(r["doubled"] == 2 * r["value"] for r in got)
    finally:
        job.stop()

"""The code-generated tap gate (``NativeTapGate``, ``sg_tap_gate_native``) on real local Spark.

The shared session has no ``spark.sql.extensions`` (a static conf), so the gate is registered
by name with ``NativeGates.register``, as ``TapUdfs.register`` registers the UDF gate; the
capture stays the ``CaptureUdf``. A round goes through the application's coordinator.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.rounds import TapInfo

pytestmark = pytest.mark.spark

NATIVE_CLASS = "io.sparkglass.extensions.NativeTapGate"
SCALA_UDF_CLASS = "org.apache.spark.sql.catalyst.expressions.ScalaUDF"
GATE_UDF_CLASS = "io.sparkglass.sampling.GateUdf"


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
    assert GATE_UDF_CLASS not in code
    # Idle: every row passes, none is captured, and the answer is the untapped one.
    assert tapped.count() == 10_000
    assert sorted(r.t for r in tapped.where("id < 5").collect()) == [0, 3, 6, 9, 12]


def test_interpreted_mode_evaluates_the_gate(spark) -> None:
    _, gate, capture = register_native_tap(spark)
    saved = {k: spark.conf.get(k, None) for k in ("spark.sql.codegen.wholeStage",)}
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        df = spark.range(0, 1_000, numPartitions=2).filter(condition(gate, capture))
        assert df.count() == 1_000
    finally:
        for k, v in saved.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


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
        started = app.coordinator.start_round(vertex, sampling_window_ms=2_000)
        assert started.status is SampleStatus.PENDING, started
        result = app.coordinator.wait(started.round_id, 90)
        assert result.status is SampleStatus.COMPLETE, result
        assert result.total_record_count > 0
        rows = [r for s in result.samples for r in s.records]
        assert rows and all('"tripled"' in r.data for r in rows[:5])
        assert spark._jvm.io.sparkglass.sampling.TapUdfs.activeTaps() == 0
    finally:
        query.stop()


def test_the_extension_places_native_gates_behind_its_conf_flag(tmp_path) -> None:
    """``spark.sql.extensions`` + ``spark.sparkglass.sampling.nativeGate=true``: the taps
    ``StreamTapRule`` places use the native gate, and a round through the control endpoint
    (the plain streaming job of ``test_plain_streaming.py``) returns the query's rows."""
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
            "spark.sparkglass.sampling.nativeGate": "true",
            "spark.sparkglass.control.token": TOKEN,
        },
        tmp_path,
    )
    try:
        ready = job.event("ready")
        assert sorted(ready["taps"]) == ["query/doubler", "view/ticks"]
        assert "sg_tap_gate_native(query/doubler)" in ready["plan"], ready["plan"]
        assert "sg_tap_gate()" not in ready["plan"], ready["plan"]
        with ControlClient(ready["url"], TOKEN) as client:
            result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result
        got = rows(result)
        assert got and all(r["doubled"] == 2 * r["value"] for r in got)
    finally:
        job.stop()

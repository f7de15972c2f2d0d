"""Installing the sampling tap at a vertex output.

With ``spark.sparkglass.sampling.enabled=true``, :func:`install_tap` adds to a vertex's
DataFrame a filter (:func:`tap_expression`) whose gate and capture (``runtime/jvm``) cost one
volatile read per row when no round runs, build the row, redacted, only when the gate
admitted it, and always keep the row (forward-first). With sampling disabled nothing is
added: the physical plan is exactly the vertex's own. The taps of an application share its
coordinator and control endpoint
(:class:`~sparkglass.runtime.sampling.registry.SamplingApplication`); docs/architecture.md,
"The JVM half", has the whole path.
"""

from __future__ import annotations

import functools
import itertools
import logging
import uuid
from collections.abc import Callable
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkglass.runtime.contract.redaction import quote
from sparkglass.runtime.contract.round_request import RoundKind
from sparkglass.runtime.contract.sampling_settings import settings_from_spark
from sparkglass.runtime.sampling.jvm_transport import JvmTransport
from sparkglass.runtime.sampling.programs import TapView, program_compiler, tap_view
from sparkglass.runtime.sampling.registry import REGISTRY, AttachedPipeline
from sparkglass.runtime.sampling.rounds import MaterializedOutput, MicroBatches, TapInfo

log = logging.getLogger(__name__)

#: Prefixes of the per-tap function names (the capture's, and the UDF gate's, show in the
#: physical plan; the native gate shows as ``sg_tap_gate_native(<tap key>)``).
GATE_PREFIX = "sg_gate_"
CAPTURE_PREFIX = "sg_capture_"
#: Conf: ``false`` makes the DSL's taps use the ``GateUdf`` instead of the native gate.
NATIVE_GATE_CONF = "spark.sparkglass.sampling.nativeGate"

_udf_counter = itertools.count(1)
_fallback_count = 0


class TappedPipeline(AttachedPipeline, Protocol):
    """What a tap needs of its pipeline: a name, a description, whether its queries run and
    what micro-batches they ran (``sparkglass.runtime.pipeline.Pipeline``)."""

    def queries_running(self) -> bool | None: ...

    def micro_batches(self, vertex: str, since_ms: int) -> MicroBatches | None: ...


def tap_expression(gate: str, capture: str, view: TapView | None = None) -> str:
    """The SQL filter condition of a tap, always true::

        CASE WHEN sg_gate_N() THEN sg_capture_N(struct(<the row, redacted>)) ELSE true END

    The gate and capture (``runtime/jvm``) are both nondeterministic, so the optimizer never
    folds or moves them. The gate is by default the code-generated ``NativeTapGate`` (it
    shows as ``sg_tap_gate_native(<tap key>)`` in the plan: an idle tap is a field read
    inside whole-stage generated code); ``spark.sparkglass.sampling.nativeGate=false``
    registers the ``GateUdf`` (a ``ScalaUDF``, shown as ``sg_gate_N()``) instead, and so does
    a session that cannot take the native gate (counted by :func:`native_gate_fallbacks`,
    logged once). The capture is the ``CaptureUdf`` either way. The struct is the row after
    the application's redaction rules (:mod:`sparkglass.runtime.contract.redaction`):
    dropped columns are not in it, masked and hashed ones are replaced (a hash is keyed: the
    sampling jar's ``sg_redact_hash`` reads the application's key on the executor, so the
    plan never holds it), so no redacted value leaves the executor. Each round carries a
    program compiled on the driver (:mod:`sparkglass.runtime.sampling.programs`): its
    filter, the columns it renders with Spark's ``to_json`` and, for rounds of kind
    ``violations`` and ``errors``, a label.
    """
    row = ", ".join(view.select) if view is not None else "*"
    return f"CASE WHEN {gate}() THEN {capture}(struct({row})) ELSE true END"


def native_gate_enabled(spark: SparkSession) -> bool:
    """Whether taps use the code-generated gate: true unless
    ``spark.sparkglass.sampling.nativeGate`` is ``false`` (the JVM extension reads it alike)."""
    raw = spark.conf.get(NATIVE_GATE_CONF, None)
    return raw is None or str(raw).strip().lower() != "false"


def native_gate_fallbacks() -> int:
    """Taps of this process that got the UDF gate because the native gate failed."""
    return _fallback_count


def _native_gate_failed(vertex: str, exc: Exception) -> None:
    global _fallback_count
    _fallback_count += 1
    if _fallback_count == 1:
        log.warning(
            "the native tap gate failed at vertex %s (%s); taps use the UDF gate instead "
            "(further fallbacks are counted, not logged)",
            vertex,
            exc,
        )


def _tap_filter(
    df: DataFrame,
    transport: JvmTransport,
    vertex: str,
    tap_key: str,
    gate: str,
    capture: str,
    view: TapView,
    native: bool,
) -> DataFrame:
    """``df`` behind the tap condition, its gate native when ``native`` and that works, else
    the UDF gate. Raises when even the UDF gate cannot be placed."""
    condition = tap_expression(gate, capture, view)
    if native:
        try:
            transport.register_native_gate(tap_key, gate, capture)
            return df.filter(F.expr(condition))
        except Exception as exc:  # never break the pipeline for sampling: the UDF gate
            _native_gate_failed(vertex, exc)
    transport.register_udfs(tap_key, gate, capture)
    return df.filter(F.expr(condition))


def install_tap(
    pipeline: TappedPipeline,
    vertex: str,
    df: DataFrame,
    *,
    kind: RoundKind = RoundKind.OUTPUT,
    label: tuple[str, str] | None = None,
    expectation_names: tuple[str, ...] = (),
) -> DataFrame:
    """Return ``df`` with a tap at its output when sampling is enabled, else ``df`` itself.

    ``kind`` says which rounds the tap serves (``violations``: a tap before an
    ``expect_or_drop`` with ``label`` = ``(SQL of the failed expectations' names, column)``).
    Also makes sure the application's coordinator and control endpoint run and know this
    pipeline. Raises :class:`~sparkglass.runtime.sampling.registry.SamplingUnavailableError`
    (plugin missing) and
    :class:`~sparkglass.runtime.contract.sampling_settings.SamplingSettingsError` (bad conf,
    redaction rules included).
    """
    spark = df.sparkSession
    settings = settings_from_spark(spark)
    if not settings.enabled:
        if control_enabled(spark):
            REGISTRY.attach(pipeline, spark).coordinator.register_vertices([vertex])
        return df
    view = tap_view(df, label=label, expectation_names=expectation_names)
    app = REGISTRY.application(spark)
    app.require_plugin()
    REGISTRY.attach(pipeline, spark)
    n = next(_udf_counter)
    gate, capture = f"{GATE_PREFIX}{n}", f"{CAPTURE_PREFIX}{n}"
    suffix = "" if kind is RoundKind.OUTPUT else f"{kind.value}/"
    tap_key = f"{pipeline.name}/{vertex}/{suffix}{uuid.uuid4().hex[:12]}"
    try:
        tapped = _tap_filter(
            df, app.transport, vertex, tap_key, gate, capture, view, native_gate_enabled(spark)
        )
    except Exception as exc:  # never break the pipeline for sampling
        log.warning("cannot tap vertex %s (%s); it will not be sampleable", vertex, exc)
        return df
    is_running: Callable[[], bool | None] = pipeline.queries_running
    app.coordinator.register_tap(
        TapInfo(
            vertex=vertex,
            tap_key=tap_key,
            data_type=view.data_type,
            is_running=is_running,
            micro_batches=functools.partial(pipeline.micro_batches, vertex),
            kind=kind.value,
            compile=program_compiler(spark, vertex, view, kind),
        )
    )
    return tapped


def read_rows(df: DataFrame, limit: int, max_chars: int) -> list[tuple[int, str]]:
    """Up to ``limit`` rows of bounded ``df`` as ``(partition index, to_json row)`` pairs,
    rendered as the tap renders them (redacted, null fields included) and cut to
    ``max_chars + 1`` characters on the executors, so no wide row reaches the driver whole
    (one character more than kept tells the caller the row was cut).

    Written with SQL text only (no ``pyspark.sql.functions``): in a Spark Declarative
    Pipeline's driver process pyspark is in Spark Connect mode, where those build Connect
    columns a classic DataFrame refuses (``NOT_EXPECTED_TYPE``)."""
    view = tap_view(df)
    redacted = df.selectExpr(*view.select)
    row = ", ".join(quote(c) for c in redacted.columns)
    rendered = redacted.selectExpr(
        "spark_partition_id() AS partition",
        f"substring(to_json(struct({row}), map('ignoreNullFields', 'false')), 1, "
        f"{int(max_chars) + 1}) AS data",
    ).limit(limit)
    return [(int(r["partition"]), str(r["data"])) for r in rendered.collect()]


def install_materialized_tap(
    pipeline: TappedPipeline, vertex: str, df: DataFrame, written_at_ms: int
) -> DataFrame:
    """Make a materialized vertex sampleable from its written output; ``df`` (the read-back)
    is returned untouched, so no downstream read of the files passes a tap.

    Rounds on it return each written row at most once (``materializedAt`` says when it was
    written). Raises as :func:`install_tap`.
    """
    spark = df.sparkSession
    if not settings_from_spark(spark).enabled:
        if control_enabled(spark):
            REGISTRY.attach(pipeline, spark).coordinator.register_vertices([vertex])
        return df
    app = REGISTRY.application(spark)
    app.require_plugin()
    REGISTRY.attach(pipeline, spark)
    app.coordinator.register_tap(
        TapInfo(
            vertex=vertex,
            tap_key=f"{pipeline.name}/{vertex}/materialized",
            data_type=tap_view(df).data_type,
            materialized=MaterializedOutput(functools.partial(read_rows, df), written_at_ms),
        )
    )
    return df


def control_enabled(spark: SparkSession) -> bool:
    """``spark.sparkglass.control.enabled=true``: serve the endpoint even with sampling off."""
    return str(spark.conf.get("spark.sparkglass.control.enabled", "false")).lower() == "true"


def detach(pipeline: AttachedPipeline, spark: SparkSession) -> None:
    """The pipeline stopped: stop the endpoint when no attached pipeline is left."""
    REGISTRY.detach(pipeline, spark)

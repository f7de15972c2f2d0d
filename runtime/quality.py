"""Applying a vertex's expectations to its output DataFrame.

At a vertex with expectations (:mod:`sparkglass.runtime.contract.expectations`) the output
is counted (:func:`count_expectations`: a code-generated counter of the sampling jar, else
Spark's ``observe``), tapped for rounds of kind ``violations``, then ``expect_or_fail`` and
``expect_or_drop`` are enforced, in that order (:func:`apply_expectations`). Error rows
(:mod:`sparkglass.runtime.contract.error_rows`) are split off before any of this by
:func:`route_errors`. docs/architecture.md, "Expectations", says why a counter of our own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sparkglass.runtime.contract.error_rows import ERROR_COLUMN, MAX_ERROR_CHARS
from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.expectations import Expectation, ExpectationAction
from sparkglass.runtime.contract.round_request import INTERNAL_PREFIX, RoundKind
from sparkglass.runtime.contract.sampling_settings import settings_from_spark

log = logging.getLogger(__name__)

#: Prefix of the observed-metrics names counting expectation outcomes per vertex.
EXPECTATION_PREFIX = "sg_expect_"
#: Observed metric with the rows counted alongside the failures.
ROWS_METRIC = "__rows"
#: The violations tap's column with the names of the expectations a row failed.
FAILED_COLUMN = f"{INTERNAL_PREFIX}failed"
#: Conf: ``false`` counts expectations with Spark's ``observe`` instead of the sampling jar's
#: code-generated counter.
NATIVE_COUNT_CONF = "spark.sparkglass.expectations.nativeCount"
#: The JVM class registering the code-generated counter (in the sampling jar).
COUNTERS_CLASS = "io.sparkglass.quality.ExpectationCounters"

_fallback_count = 0


def passes(expectation: Expectation) -> Column:
    """True where a row passes (the condition is true; NULL fails)."""
    return F.coalesce(F.expr(expectation.condition).cast("boolean"), F.lit(False))


def failed_names_sql(expectations: Sequence[Expectation]) -> str:
    """SQL of the array of the names of the expectations a row failed."""
    cases = ", ".join(
        f"CASE WHEN coalesce(CAST(({e.condition}) AS BOOLEAN), false) THEN NULL ELSE '{e.name}' END"
        for e in expectations
    )
    return f"filter(array({cases}), x -> x IS NOT NULL)"


def check_conditions(df: DataFrame, vertex: str, expectations: Sequence[Expectation]) -> None:
    """Raise :class:`PlanError` naming the vertex and the expectation when a condition does
    not parse or resolve against the vertex's columns (Spark's message included)."""
    for e in expectations:
        try:
            df.select(passes(e)).schema  # noqa: B018 - analysis only
        except Exception as exc:
            raise PlanError(
                f"vertex {vertex!r}: expectation {e.name!r}: condition {e.condition!r} is not "
                f"a valid predicate over the vertex's columns: {_first_line(exc)}",
                vertex=vertex,
            ) from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def observe_expectations(
    df: DataFrame, vertex: str, expectations: Sequence[Expectation]
) -> DataFrame:
    """``df`` observed (Spark's ``observe``, one aggregate per micro-batch) as
    ``<EXPECTATION_PREFIX><vertex>``: the row count and, per expectation, the rows failing
    it. This is all an expectation costs a streaming vertex besides its tap."""
    metrics = [
        F.sum(F.when(passes(e), F.lit(0)).otherwise(F.lit(1))).alias(e.name) for e in expectations
    ]
    return df.observe(
        f"{EXPECTATION_PREFIX}{vertex}", F.count(F.lit(1)).alias(ROWS_METRIC), *metrics
    )


class ExpectationTally:
    """One vertex's expectation counts on the JVM (``io.sparkglass.quality.ExpectationTally``,
    a Spark accumulator kept per micro-batch), as :func:`count_expectations` made it.

    ``names``: the expectations in the order the counter counts them."""

    def __init__(self, vertex: str, names: tuple[str, ...], jvm: Any, counters: Any) -> None:
        self.vertex = vertex
        self.names = names
        self.jvm = jvm
        self._counters = counters
        self._dropped_seen = 0

    def take(self, query_id: str, batch_id: int) -> tuple[int, dict[str, int]] | None:
        """``(rows, failed rows per expectation)`` of micro-batch ``batch_id`` of streaming
        query ``query_id``, removed from the driver's tally (one Py4J call); ``None`` when no
        task of it saw a row of this vertex (not a query of this vertex, or an empty
        micro-batch). Call it once the micro-batch has ended (its progress event): Spark
        merges each task's counts before the batch's job ends. Logs a warning when the driver
        dropped micro-batches nobody took (it keeps 65,536 partition entries)."""
        dropped, _, counts = str(self.jvm.take(query_id, str(batch_id))).partition(";")
        if int(dropped) > self._dropped_seen:
            log.warning(
                "vertex %s: the counts of %d micro-batch(es) were dropped before the query "
                "listener took them; expectation totals miss their rows",
                self.vertex,
                int(dropped) - self._dropped_seen,
            )
            self._dropped_seen = int(dropped)
        if not counts:
            return None
        values = [int(v) for v in counts.split(",")]
        return values[0], dict(zip(self.names, values[1:], strict=True))

    def release(self) -> None:
        """Unregister the tally from the driver (its pipeline stopped)."""
        with contextlib.suppress(Exception):  # the session is gone: so is the tally
            self._counters.release(self.jvm)


def native_count_enabled(spark: Any) -> bool:
    """Whether expectations use the code-generated counter: true unless
    :data:`NATIVE_COUNT_CONF` is ``false``."""
    raw = spark.conf.get(NATIVE_COUNT_CONF, None)
    return raw is None or str(raw).strip().lower() != "false"


def count_expectations(
    df: DataFrame, vertex: str, expectations: Sequence[Expectation]
) -> tuple[DataFrame, ExpectationTally | None]:
    """``df`` with the rows failing each of ``expectations`` counted (every row kept), and
    the tally to read the counts from per micro-batch.

    With the sampling jar on the driver and shipped to the executors (:func:`jar_on_executors`),
    the count is a ``Filter`` on the code-generated ``sg_expect_count(...)``, always true.
    Otherwise (or with :data:`NATIVE_COUNT_CONF` ``false``) it is :func:`observe_expectations`
    and the tally is ``None``: the counts then come in each micro-batch's observed metrics."""
    spark = df.sparkSession
    if native_count_enabled(spark):
        try:
            if not jar_on_executors(spark):
                raise RuntimeError("the sampling jar is not shipped to the executors")
            counters = getattr(spark._jvm, COUNTERS_CLASS)
            tally = counters.tally(spark._jsparkSession, len(expectations))
            jcol = counters.counter(
                spark._jsparkSession, [passes(e)._jc for e in expectations], tally
            )
        except Exception as exc:  # no jar, Spark Connect: observe counts the same rows
            _native_count_failed(vertex, exc)
        else:
            from pyspark.sql.classic.column import Column as ClassicColumn

            names = tuple(e.name for e in expectations)
            return df.filter(ClassicColumn(jcol)), ExpectationTally(vertex, names, tally, counters)
    return observe_expectations(df, vertex, expectations), None


def jar_on_executors(spark: Any) -> bool:
    """Whether executors load the sampling jar too: a local master (one JVM), or a jar named
    ``*sparkglass*`` in ``spark.jars``, ``spark.executor.extraClassPath`` or the jars the
    SparkContext ships (``listJars``). The counter runs in tasks: on executors without the
    jar it would fail them, so it is used only then."""
    master = str(spark.sparkContext.master or "")
    if master.startswith("local") and not master.startswith("local-cluster"):
        return True
    shipped = ",".join(
        str(v)
        for v in (
            spark.conf.get("spark.jars", ""),
            spark.conf.get("spark.executor.extraClassPath", ""),
            spark.sparkContext._jsc.sc().listJars().mkString(","),
        )
    )
    return "sparkglass" in shipped


def _native_count_failed(vertex: str, exc: Exception) -> None:
    global _fallback_count
    _fallback_count += 1
    if _fallback_count == 1:
        log.info(
            "expectations at vertex %s are counted with Spark's observe: the code-generated "
            "counter is not available (%s; it needs the sampling jar on the driver)",
            vertex,
            _first_line(exc),
        )


def apply_expectations(
    pipeline: Any, vertex: str, df: DataFrame, expectations: Sequence[Expectation]
) -> tuple[DataFrame, ExpectationTally | None]:
    """``df`` with ``expectations`` counted, tapped, enforced, and the tally counting them
    (``None``: no expectations, a bounded vertex, or counted with ``observe``). In order:

    1. the counter: on a streaming vertex, the rows that failed each expectation and all rows
       (so passed = rows − failed) are counted per micro-batch, and the pipeline's query
       listener adds them up. The count is :func:`count_expectations`: a code-generated
       expression of the sampling jar (``io.sparkglass.quality.ExpectationCounter``) counting
       into a Spark accumulator kept per micro-batch, so expectations cost what their
       conditions cost; without the jar (or with
       ``spark.sparkglass.expectations.nativeCount=false``), Spark's observed metrics named
       ``sg_expect_<vertex>`` (``observe``, which costs a whole-stage code generation break
       and per-row aggregate updates);
    2. the violations tap (with sampling enabled): rounds of kind ``violations`` capture rows
       here, before any is dropped, with the names of the expectations they failed (the
       names are computed only for rows the gate admits);
    3. ``expect_or_fail``: the first failing row raises ``raise_error`` with a message naming
       the vertex, the expectation, its condition and the row rendered with the
       application's redaction, which fails the task and so the micro-batch;
    4. ``expect_or_drop``: failing rows are filtered out.

    A row passes when the condition is true; false and NULL fail.

    Raises :class:`PlanError` for a condition that does not fit the vertex's columns.
    """
    if not expectations:
        return df, None
    check_conditions(df, vertex, expectations)
    tally = None
    if df.isStreaming:
        df, tally = count_expectations(df, vertex, expectations)
    if settings_from_spark(df.sparkSession).enabled:
        from sparkglass.runtime.sampling.tap import install_tap  # Spark-side, with the plugin

        df = install_tap(
            pipeline,
            vertex,
            df,
            kind=RoundKind.VIOLATIONS,
            label=(failed_names_sql(expectations), FAILED_COLUMN),
            expectation_names=tuple(e.name for e in expectations),
        )
    for e in expectations:
        if e.action is ExpectationAction.FAIL:
            df = df.filter(_fail_check(df, vertex, e))
    drops = [passes(e) for e in expectations if e.action is ExpectationAction.DROP]
    for condition in drops:
        df = df.filter(condition)
    return df, tally


def route_errors(pipeline: Any, vertex: str, df: DataFrame) -> DataFrame:
    """``df`` without its error rows and without :data:`ERROR_COLUMN` (``df`` itself when it
    has no such column).

    With sampling enabled an ``errors`` tap sits before the split: rounds of kind ``errors``
    capture error rows there (the row redacted like any other, the error as the label). The
    split itself is one null check per row, evaluated by Spark's generated code.
    """
    if ERROR_COLUMN not in df.columns:
        return df
    if settings_from_spark(df.sparkSession).enabled:
        from sparkglass.runtime.sampling.tap import install_tap  # Spark-side, with the plugin

        df = install_tap(
            pipeline,
            vertex,
            df,
            kind=RoundKind.ERRORS,
            label=(f"substring(`{ERROR_COLUMN}`, 1, {MAX_ERROR_CHARS})", ERROR_LABEL_COLUMN),
        )
    return df.filter(F.col(ERROR_COLUMN).isNull()).drop(ERROR_COLUMN)


#: The errors tap's label column (the error of an error row).
ERROR_LABEL_COLUMN = f"{INTERNAL_PREFIX}error_label"


def _fail_check(df: DataFrame, vertex: str, e: Expectation) -> Column:
    from sparkglass.runtime.sampling.programs import tap_view  # redaction of the row shown

    view = tap_view(df)
    row = F.to_json(F.struct(*[F.expr(s) for s in view.select]), {"ignoreNullFields": "false"})
    message = F.concat(
        F.lit(
            f"expectation {e.name!r} failed at vertex {vertex!r} "
            f"(expect_or_fail: {e.condition}): row "
        ),
        row,
    )
    return F.when(passes(e), F.lit(True)).otherwise(F.raise_error(message).cast("boolean"))

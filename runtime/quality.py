"""Applying a vertex's expectations to its output DataFrame.

At a vertex with expectations (:mod:`sparkglass.runtime.contract.expectations`) the output
goes through, in this order:

1. the counter: on a streaming vertex, Spark observed metrics named ``sg_expect_<vertex>``
   count, per micro-batch, the rows that failed each expectation and all rows (so passed =
   rows − failed); the pipeline's query listener adds them up;
2. the violations tap (with sampling enabled): rounds of kind ``violations`` capture rows
   here, before any is dropped, with the names of the expectations they failed (the names
   are computed only for rows the gate admits);
3. ``expect_or_fail``: the first failing row raises ``raise_error`` with a message naming
   the vertex, the expectation, its condition and the row rendered with the application's
   redaction, which fails the task and so the micro-batch;
4. ``expect_or_drop``: failing rows are filtered out.

A row passes when the condition is true; false and NULL fail.

Error rows (:mod:`sparkglass.runtime.contract.error_rows`) are split off before any of this by
:func:`route_errors`: the errors tap sees them, expectations and everything downstream do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sparkglass.runtime.contract.error_rows import ERROR_COLUMN, MAX_ERROR_CHARS
from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.expectations import Expectation, ExpectationAction
from sparkglass.runtime.contract.round_request import INTERNAL_PREFIX, RoundKind
from sparkglass.runtime.contract.sampling_settings import settings_from_spark

#: Prefix of the observed-metrics names counting expectation outcomes per vertex.
EXPECTATION_PREFIX = "sg_expect_"
#: Observed metric with the rows counted alongside the failures.
ROWS_METRIC = "__rows"
#: The violations tap's column with the names of the expectations a row failed.
FAILED_COLUMN = f"{INTERNAL_PREFIX}failed"


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


def apply_expectations(
    pipeline: Any, vertex: str, df: DataFrame, expectations: Sequence[Expectation]
) -> DataFrame:
    """``df`` with ``expectations`` counted, tapped, enforced (see module docstring).

    Raises :class:`PlanError` for a condition that does not fit the vertex's columns.
    """
    if not expectations:
        return df
    check_conditions(df, vertex, expectations)
    if df.isStreaming:
        df = observe_expectations(df, vertex, expectations)
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
    return df


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

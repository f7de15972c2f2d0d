"""Python batch vertices that skip the rows they raise on (``on_error="emit_error"``).

A Python batch vertex (``Pipeline.python_vertex``) runs ``fn(batch)`` on each Arrow batch;
by default an exception fails the task, as any task failure (Spark retries it, then fails the
micro-batch). With ``on_error="emit_error"`` the vertex runs :func:`map_with_error_rows`
instead: a batch on which ``fn`` raises is run again one row at a time, so the rows ``fn``
handles go on and each row it raises on becomes an *error row*
(:mod:`sparkglass.runtime.contract.error_rows`) with the exception's type and message; the
pipeline routes those to the vertex's ``errors`` output. A batch without an exception costs
one extra null column. This fits row-wise functions (each output row depends on its own
input row), the usual shape of a parsing or enrichment step; it is not fused with its
neighbours (error rows leave between the passes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from sparkglass.runtime.contract.error_rows import ERROR_COLUMN, error_text
from sparkglass.runtime.contract.errors import PipelineError
from sparkglass.runtime.optimizations.fusion import ArrowBatchFunction


def error_row(
    record: Mapping[str, Any], schema: Iterable[pa.Field], message: str
) -> dict[str, Any]:
    """The error row of ``record`` for an output whose Arrow fields are ``schema`` (a
    ``pyarrow.Schema``; the async vertex uses it too): ``record``'s values for the output's
    columns that convert to their Arrow type (the others null: a value of another type must
    not fail the task that is skipping its record) and ``message`` in :data:`ERROR_COLUMN`."""
    row: dict[str, Any] = {}
    for f in schema:
        if f.name == ERROR_COLUMN:
            continue
        value = record.get(f.name)
        if value is not None:
            try:
                pa.array([value], type=f.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                value = None
        row[f.name] = value
    row[ERROR_COLUMN] = message
    return row


def output_type(schema: StructType | str) -> StructType:
    """``schema`` as a ``StructType`` (a DDL string is parsed by Spark, on the driver)."""
    if isinstance(schema, StructType):
        return schema
    from pyspark.sql.types import _parse_datatype_string

    parsed = _parse_datatype_string(schema)
    if not isinstance(parsed, StructType):
        raise PipelineError(f"schema must describe a struct, got {schema!r}", vertex=None)
    return parsed


def map_with_error_rows(
    df: DataFrame,
    vertex: str,
    fn: ArrowBatchFunction,
    schema: StructType | str,
    secret_columns: tuple[str, ...] = (),
) -> DataFrame:
    """``df`` through ``fn`` (one ``mapInArrow``) with ``schema`` plus :data:`ERROR_COLUMN`:
    null for ``fn``'s rows, the error for each input row ``fn`` raised on (see the module
    docstring). ``secret_columns``: input columns whose values are masked in messages.
    Raises :class:`PipelineError` naming ``vertex`` when ``schema`` already has the column.
    """
    declared = output_type(schema)
    if ERROR_COLUMN in declared.names:
        raise PipelineError(
            f"vertex {vertex!r}: the output schema may not have a column named {ERROR_COLUMN!r}",
            vertex=vertex,
        )
    full = StructType([*declared.fields, StructField(ERROR_COLUMN, StringType(), True)])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow = to_arrow_schema(full, timezone="UTC")
        for batch in batches:
            try:
                out = fn(batch)
            except Exception:
                yield from _row_by_row(batch, fn, arrow, secret_columns)
                continue
            yield _with_error_column(out, arrow)

    return df.mapInArrow(run, full)


def _with_error_column(batch: pa.RecordBatch, arrow: pa.Schema) -> pa.RecordBatch:
    """``batch`` with a null error column, in the schema ``arrow``: every batch of one task
    must have the same schema (nullability included) for Spark's Arrow stream."""
    columns = [*batch.columns, pa.nulls(batch.num_rows, pa.string())]
    return pa.RecordBatch.from_arrays(columns, schema=arrow)


def _row_by_row(
    batch: pa.RecordBatch,
    fn: ArrowBatchFunction,
    arrow: pa.Schema,
    secrets: tuple[str, ...],
) -> Iterator[pa.RecordBatch]:
    """``batch`` through ``fn`` one row at a time: ``fn``'s output for the rows it takes and
    an error row for each it raises on, in input order, as few batches as the types allow."""
    out: list[pa.RecordBatch] = []
    for i in range(batch.num_rows):
        row = batch.slice(i, 1)
        try:
            result = fn(row)
        except Exception as exc:
            record = row.to_pylist()[0]
            bad = error_row(record, arrow, error_text(exc, record, secrets))
            out.append(pa.RecordBatch.from_pylist([bad], schema=arrow))
            continue
        if result.num_rows:
            out.append(_with_error_column(result, arrow))
    if out:
        # One batch back to the JVM instead of one per row.
        yield from pa.Table.from_batches(out, schema=arrow).combine_chunks().to_batches()

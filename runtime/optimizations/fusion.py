"""Python batch vertices and their fusion (the use of ``not_cache_record``).

A Python batch vertex is an Arrow function ``pyarrow.RecordBatch → pyarrow.RecordBatch``
run on the executors with ``DataFrame.mapInArrow``. Run one by one, each vertex is its own
Python pass: the JVM converts its rows to Arrow, ships them to a Python worker, reads the
result back into JVM rows, and converts them to Arrow again for the next vertex — a copy
per vertex boundary.

When adjacent vertices both declare ``not_cache_record`` (they keep no reference to the
batches they get or return), the planner fuses them: one ``mapInArrow`` whose function
hands each batch from one vertex function straight to the next, the same Arrow object, no
copy and no JVM round trip. Without the attribute a function might hold on to a batch it
was given (for a later comparison, say), so each keeps its own pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sparkglass.runtime.failing_row import failing_row_error

#: What a Python batch vertex computes: one Arrow batch in, one out.
ArrowBatchFunction = Callable[[pa.RecordBatch], pa.RecordBatch]


class FusedSchemaError(ValueError):
    """A vertex inside a fused pass returned columns other than its declared schema."""


def _schema_names(schema: StructType | str) -> list[str] | None:
    # A DDL string is parsed by Spark; names are only checked for StructType schemas.
    return schema.names if isinstance(schema, StructType) else None


@dataclass(frozen=True)
class ArrowVertexFunction:
    """A vertex function running ``fn`` on each Arrow batch (``DataFrame → DataFrame``).

    ``schema`` is the output schema (a ``StructType`` or DDL string), as ``mapInArrow``
    needs it. Calling it on a DataFrame gives that vertex's own Python pass.
    """

    name: str
    fn: ArrowBatchFunction
    schema: StructType | str

    def __call__(self, df: DataFrame) -> DataFrame:
        return run_fused(df, [self])


def run_fused(df: DataFrame, functions: Sequence[ArrowVertexFunction]) -> DataFrame:
    """``df`` through ``functions`` in order, as one Python pass (one ``mapInArrow``).

    Each batch goes from one function to the next as the same Arrow object. The result has
    the last function's schema. Raises ``ValueError`` for an empty list; a function inside
    the pass returning other columns than its declared ``StructType`` fails the task with
    :class:`FusedSchemaError` naming the vertex.
    """
    if not functions:
        raise ValueError("run_fused needs at least one vertex function")
    from sparkglass.runtime.sampling.programs import redacted_column_names

    return df.mapInArrow(_pass(functions, redacted_column_names(df)), functions[-1].schema)


BatchPass = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _pass(functions: Sequence[ArrowVertexFunction], secrets: tuple[str, ...]) -> BatchPass:
    """The ``mapInArrow`` function applying ``functions`` in order to each batch, no copies.
    A function that raises fails the task naming the row it raised on
    (:mod:`sparkglass.runtime.failing_row`; ``secrets``: the input's redacted columns)."""
    steps = [(f.name, f.fn, _schema_names(f.schema)) for f in functions]
    last = len(steps) - 1

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for k, (name, fn, names) in enumerate(steps):
                try:
                    out = fn(batch)
                except Exception as exc:
                    # Chained (or, under redaction rules, not) by failing_row_error itself.
                    raise failing_row_error(name, fn, batch, exc, secrets=secrets)  # noqa: B904
                batch = out
                # Spark checks the last schema itself; inside the pass nobody would, and a
                # wrong intermediate schema must fail as it would unfused, naming the vertex.
                if k < last and names is not None and batch.schema.names != names:
                    raise FusedSchemaError(
                        f"vertex {name!r} returned columns {batch.schema.names}, declared {names}"
                    )
            yield batch

    return run

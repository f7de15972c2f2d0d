"""What a sampling round asks for beyond its vertex and window: kind, filter, columns.

Every field is optional and the defaults are the plain round of the FLIP (every row of the
vertex output, every column), so the request is an addition to the FLIP fields
(:class:`RoundRequest`). Shapes are checked here (Spark-free, for the service and the
operator); the driver checks the filter and the columns against the vertex's schema and the
application's redaction. Errors raise
:class:`~sparkglass.runtime.contract.errors.InvalidParameterError` naming the field.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.expectations import NAME_PATTERN

MAX_FILTER_LENGTH = 4096
#: Deepest nesting of a filter: parentheses, plus a chain of NOT or sign operators. Spark's
#: parser and analyzer recurse once per level (a 2,040-deep filter held a cold driver for
#: 21 s before it failed); readable predicates nest a few levels.
MAX_FILTER_DEPTH = 32
MAX_COLUMNS = 200
MAX_COLUMN_NAME_LENGTH = 256
#: Column names the runtime uses inside a tap; no request may name them.
INTERNAL_PREFIX = "__sg_"


class RoundKind(StrEnum):
    """Which rows a round returns."""

    OUTPUT = "output"
    VIOLATIONS = "violations"
    ERRORS = "errors"


class RoundRequest(BaseModel):
    """The optional parts of a round request:

    - ``kind``: ``output`` (the vertex's output rows), ``violations`` (only rows that failed an
      expectation of the vertex, before any ``expect_or_drop`` dropped them, each with the
      names of the expectations it failed; ``expectation`` narrows to one) or ``errors`` (rows
      the vertex could not process, each with its error: corrupt CSV/JSON records, and the
      error rows of vertices that skip what they cannot process, see
      :mod:`sparkglass.runtime.contract.error_rows`).
    - ``filter``: a Spark SQL predicate over the vertex's (redacted) columns, evaluated on the
      executors only for rows the gate admits; the rate limit counts matching rows.
    - ``columns``: the columns to return, in order.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    kind: RoundKind = RoundKind.OUTPUT
    filter: str | None = Field(default=None, max_length=MAX_FILTER_LENGTH)
    columns: tuple[str, ...] | None = None
    # The driver puts the name inside a SQL string literal: the model refuses anything but a
    # DNS-1123 label even when built directly, not through round_request().
    expectation: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)

    def is_plain(self) -> bool:
        """True for the FLIP's plain round (no kind, filter or columns)."""
        return self == PLAIN

    def key(self) -> str:
        """A stable text identifying the request (rounds and cached results are per key)."""
        if self.is_plain():
            return ""
        return self.model_dump_json(by_alias=True, exclude_defaults=True)

    def query_params(self) -> dict[str, str]:
        """The request as query parameters of the driver endpoint and the REST service."""
        out: dict[str, str] = {}
        if self.kind is not RoundKind.OUTPUT:
            out["kind"] = self.kind.value
        if self.filter is not None:
            out["filter"] = self.filter
        if self.columns is not None:
            out["columns"] = ",".join(self.columns)
        if self.expectation is not None:
            out["expectation"] = self.expectation
        return out


PLAIN = RoundRequest()

_COLUMN = re.compile(r"^[^,`\x00-\x1f]+$")


_QUOTED = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`", re.DOTALL)
_UNARY_CHAIN = re.compile(r"(?:(?<![\w.])NOT\b\s*|[-+~!]\s*)+", re.IGNORECASE)


def filter_depth(text: str) -> int:
    """How deep ``text`` nests, counted without parsing it (see :data:`MAX_FILTER_DEPTH`): the
    deepest parenthesis plus the longest run of NOT and sign operators, outside quoted text."""
    plain = _QUOTED.sub("''", text)
    deepest = depth = 0
    for char in plain:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(depth - 1, 0)
    chain = max(
        (
            len(re.findall(r"NOT|[-+~!]", m.group(), re.IGNORECASE))
            for m in _UNARY_CHAIN.finditer(plain)
        ),
        default=0,
    )
    return deepest + chain


def round_request(
    kind: str | None = None,
    filter: str | None = None,
    columns: str | list[str] | tuple[str, ...] | None = None,
    expectation: str | None = None,
) -> RoundRequest:
    """A checked :class:`RoundRequest` from query-parameter or spec values.

    ``columns`` is a list or one comma-separated string. Raises
    :class:`InvalidParameterError` naming ``kind``, ``filter``, ``columns`` or
    ``expectation`` with what is allowed.
    """
    if kind is None or kind == "":
        parsed_kind = RoundKind.OUTPUT
    else:
        try:
            parsed_kind = RoundKind(kind)
        except ValueError:
            raise InvalidParameterError(
                f"kind={kind!r} is not allowed: one of {', '.join(k.value for k in RoundKind)}",
                field="kind",
            ) from None
    if filter is not None:
        if not filter.strip():
            raise InvalidParameterError("filter may not be empty", field="filter")
        if len(filter) > MAX_FILTER_LENGTH:
            raise InvalidParameterError(
                f"filter is {len(filter)} characters: allowed 1–{MAX_FILTER_LENGTH}",
                field="filter",
            )
        depth = filter_depth(filter)
        if depth > MAX_FILTER_DEPTH:
            raise InvalidParameterError(
                f"filter nests {depth} levels (parentheses, NOT and signs): allowed at most "
                f"{MAX_FILTER_DEPTH}",
                field="filter",
            )
        if INTERNAL_PREFIX in filter.lower():
            raise InvalidParameterError(
                f"filter may not name the runtime's own columns ({INTERNAL_PREFIX}*)",
                field="filter",
            )
    names: tuple[str, ...] | None = None
    if columns is not None:
        raw = columns.split(",") if isinstance(columns, str) else list(columns)
        names = tuple(c.strip() for c in raw)
        if not names or len(names) > MAX_COLUMNS:
            raise InvalidParameterError(
                f"columns names {len(names)} columns: allowed 1–{MAX_COLUMNS}", field="columns"
            )
        for name in names:
            if (
                not name
                or len(name) > MAX_COLUMN_NAME_LENGTH
                or not _COLUMN.match(name)
                or name.lower().startswith(INTERNAL_PREFIX)
            ):
                raise InvalidParameterError(
                    f"columns: {name!r} is not a column name (1–{MAX_COLUMN_NAME_LENGTH} "
                    "characters, no comma, backtick or control character)",
                    field="columns",
                )
        if len({n.lower() for n in names}) != len(names):
            raise InvalidParameterError("columns names a column twice", field="columns")
    if expectation is not None:
        if parsed_kind is not RoundKind.VIOLATIONS:
            raise InvalidParameterError(
                "expectation is allowed only with kind=violations", field="expectation"
            )
        # fullmatch: with re.match, NAME_PATTERN's ``$`` would also accept a trailing newline.
        if not re.fullmatch(NAME_PATTERN, expectation) or len(expectation) > 63:
            raise InvalidParameterError(
                f"expectation={expectation!r} is not an expectation name (a DNS-1123 label)",
                field="expectation",
            )
    return RoundRequest(kind=parsed_kind, filter=filter, columns=names, expectation=expectation)

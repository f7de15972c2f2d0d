"""Round programs: what the executors do with a row a tap admitted, compiled on the driver.

A tap hands its capture UDF the vertex's row after the application's redaction
(:class:`TapView`). A round's :class:`~sparkglass.runtime.contract.round_request.RoundRequest`
becomes a program (``io.sparkglass.sampling.RowProgram``): Catalyst expressions bound to that
row (the filter, the rendering of the requested columns with ``to_json``, the label),
serialized and sent to the executors with the round. The request is checked here, on the
driver, before any executor sees it (:func:`compile_program`; docs/architecture.md, "Filters
and columns").
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from sparkglass.runtime.contract.errors import InvalidParameterError, SamplingSettingsError
from sparkglass.runtime.contract.redaction import (
    KEY_BYTES,
    KEY_CONF,
    KEY_ENV,
    REDACT_CONF,
    RedactionAction,
    RedactionRule,
    ensure_key_file,
    hashes,
    parse_redaction,
    quote,
    redacted_columns,
    redacted_select,
)
from sparkglass.runtime.contract.round_request import INTERNAL_PREFIX, RoundKind, RoundRequest

log = logging.getLogger(__name__)

#: The Java class that compiles and runs programs.
PROGRAM_CLASS = "io.sparkglass.sampling.RowProgram"
#: The Java class that holds the allowlist of what a filter may use (checked on the parsed
#: expression before Spark's analyzer sees it, and on the analysed one): its refusals say what
#: is allowed.
ALLOWLIST_CLASS = "io.sparkglass.sampling.FilterAllowlist$Refused"
#: Label given to corrupt records in ``errors`` rounds.
CORRUPT_RECORD_ERROR = "corrupt record: the source could not parse this input"


class RoundProgramError(InvalidParameterError):
    """A round's filter or columns do not fit the vertex (``field`` names which)."""


@dataclass(frozen=True)
class TapView:
    """The row a tap captures: the vertex's columns after redaction.

    ``select``: the SQL expressions building it (each keeps its column's name); ``columns``:
    the names in it (``label_column`` last when set), dropped columns never among them;
    ``redacted``: the vertex's columns a rule names, with the action; ``schema_json``: the
    Spark type (JSON) of the row the capture receives; ``data_type``: the rendered row as
    ``struct<...>`` without the label column; ``corrupt_column``: the corrupt-record column
    when the vertex has one. Every program renders only ``columns`` (through ``renders``
    when the captured row is not yet redacted), never every field of ``schema_json``.
    """

    select: tuple[str, ...]
    columns: tuple[str, ...]
    redacted: dict[str, RedactionAction]
    schema_json: str
    data_type: str
    corrupt_column: str | None = None
    label_column: str | None = None
    expectation_names: tuple[str, ...] = field(default=())
    #: Column → the SQL expression rendering it redacted, for a tap whose captured row is
    #: the vertex's raw row (the session extension's taps): masked and hashed columns.
    renders: dict[str, str] = field(default_factory=dict)


def _corrupt_record_column(spark: SparkSession) -> str:
    """The session's default corrupt-record column (``spark.sql.columnNameOfCorruptRecord``)."""
    return str(spark.conf.get("spark.sql.columnNameOfCorruptRecord", "_corrupt_record"))


#: The sampling jar's class of the ``hash`` redaction: the keyed function and its key lookup.
HASH_CLASS = "io.sparkglass.sampling.RedactionHash"
#: The sampling jar's class finding the columns that hold a source's raw input.
CORRUPT_CLASS = "io.sparkglass.extensions.CorruptRecordColumns"
#: ``columnNameOfCorruptRecord -> name`` (a Scala map) or ``=name`` (a Java one), any case.
_CORRUPT_OPTION = re.compile(r"(?i)columnNameOfCorruptRecord(?: -> |=)([^,)}]+)")


def _java_class(spark: SparkSession, name: str) -> Any | None:
    """The JVM class ``name``, or ``None`` when it is not loaded (no sampling jar)."""
    jvm = getattr(spark, "_jvm", None)  # a Spark Connect session has none
    if jvm is None:
        return None
    found = getattr(jvm, name)
    return found if isinstance(found, JavaClass) else None


def corrupt_record_columns(df: DataFrame) -> tuple[str, ...]:
    """The columns of ``df`` that hold a source's raw input line, in column order: its
    corrupt-record columns however a reader option (``columnNameOfCorruptRecord``) named them
    and through renames, and any column named like ``spark.sql.columnNameOfCorruptRecord``
    (``io.sparkglass.extensions.CorruptRecordColumns`` reads the analysed plan). Without the
    sampling jar: the columns named by a source's option or the session's default, by name."""
    default = _corrupt_record_column(df.sparkSession)
    finder = _java_class(df.sparkSession, CORRUPT_CLASS)
    if finder is not None:
        return tuple(str(c) for c in finder.of(df._jdf, default))
    declared = {default.lower(), *_declared_by_sources(df)}
    return tuple(c for c in df.columns if c.lower() in declared)


def _declared_by_sources(df: DataFrame) -> set[str]:
    """Names the sources of ``df`` give their corrupt-record column (lower case)."""
    names: set[str] = set()
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    for i in range(int(leaves.size())):
        leaf = leaves.apply(i)
        for path in (
            ("dataSource", "options"),
            ("relation", "options"),
            ("options",),
            ("extraOptions",),
        ):
            target = leaf
            try:
                for accessor in path:
                    target = getattr(target, accessor)()
            except Py4JError:
                continue
            names.update(m.strip().lower() for m in _CORRUPT_OPTION.findall(str(target)))
    return names


def ensure_hash_function(spark: SparkSession) -> bool:
    """Make the ``hash`` redaction usable in ``spark``: a key must be there, and the keyed
    function is registered in the session. False when the sampling jar is not loaded (nothing
    can be hashed then; callers mask instead).

    The key is looked up as the executors will (``RedactionHash``): the conf
    ``spark.sparkglass.sampling.redact.secret``, else ``$SPARKGLASS_REDACTION_KEY``; with
    neither, in local mode (the executors are this JVM) the key file of
    :func:`~sparkglass.runtime.contract.redaction.ensure_key_file`, created once. The key
    never passes through Python. Raises :class:`SamplingSettingsError` (field the key's conf)
    with no key outside local mode, or a key that is not hex of at least 32 bytes.
    """
    hashing = _java_class(spark, HASH_CLASS)
    if hashing is None:
        return False
    source = str(hashing.keySource(spark._jsparkSession))
    if source == "missing" and _local_master(spark):
        path = ensure_key_file()
        try:
            hashing.installKeyFile(str(path))
        except Py4JJavaError as exc:
            raise SamplingSettingsError(
                f"{_java_message(exc)}; remove it, or set {KEY_CONF} (or ${KEY_ENV})",
                field=KEY_CONF,
            ) from None
        source = "installed"
    if source not in ("conf", "sparkConf", "installed", "env"):
        raise SamplingSettingsError(_key_problem(source), field=KEY_CONF)
    hashing.register(spark._jsparkSession)
    return True


def _local_master(spark: SparkSession) -> bool:
    master = str(spark.conf.get("spark.master", "") or "")
    return master == "local" or master.startswith("local[")


def _key_problem(source: str) -> str:
    fix = (
        f"set {KEY_CONF} when the application is submitted (spark-submit --conf; the operator "
        f"sets it from the Secret <app>-control-token), or ${KEY_ENV} in the environment of "
        f"the driver and of every executor, to hex text of at least {KEY_BYTES} random bytes "
        "(openssl rand -hex 32)"
    )
    if source == "missing":
        return (
            "redaction rules hash columns but this application has no redaction key (without "
            f"one, a hash could be looked up in a table of the column's values): {fix}"
        )
    kind, _, where = source.partition(":")
    name = f"${KEY_ENV}" if where == "env" else KEY_CONF
    if kind == "unexpanded":
        return (
            f"{name} holds an unexpanded $(...) reference: the application's Secret has no "
            f"redaction key (a Secret made by an older operator): {fix}"
        )
    return f"{name} is not a redaction key (hex text of at least {KEY_BYTES} bytes): {fix}"


def rendered_actions(
    spark: SparkSession, rules: list[RedactionRule], redacted: dict[str, RedactionAction]
) -> dict[str, RedactionAction]:
    """How each redacted column is rendered: as ``redacted`` says, with the hash key checked
    and the keyed function registered when a rule hashes (see :func:`ensure_hash_function`);
    without the sampling jar hashed columns are masked, never hashed unkeyed."""
    if not hashes(rules) or ensure_hash_function(spark):
        return redacted
    return {
        c: RedactionAction.MASK if a is RedactionAction.HASH else a for c, a in redacted.items()
    }


def redacted_column_names(df: DataFrame) -> tuple[str, ...]:
    """The columns of ``df`` the application's redaction rules name (any action), and its
    corrupt-record columns when there are rules: their values are masked in error messages
    (:mod:`sparkglass.runtime.contract.error_rows`)."""
    spark = df.sparkSession
    rules = parse_redaction(spark.conf.get(REDACT_CONF, None))
    if not rules:
        return ()
    return tuple(redacted_columns(rules, df.columns, corrupt_record_columns(df)))


def tap_view(
    df: DataFrame,
    *,
    label: tuple[str, str] | None = None,
    expectation_names: tuple[str, ...] = (),
) -> TapView:
    """The redacted row of ``df`` (rules from ``spark.sparkglass.sampling.redact``).

    ``label``: ``(SQL expression, column name)`` added last (the violations tap's failed
    expectation names, the errors tap's error). The runtime's own columns (``__sg_*``, such
    as the error column) are never part of the row. Every column holding a source's raw input
    (:func:`corrupt_record_columns`) is masked when there are rules; the first one left in
    the row is the view's ``corrupt_column`` (what ``errors`` rounds label). Raises
    :class:`~sparkglass.runtime.contract.errors.SamplingSettingsError` for bad rules, and
    for a ``hash`` rule without a usable key (:func:`ensure_hash_function`).
    """
    spark = df.sparkSession
    rules = parse_redaction(spark.conf.get(REDACT_CONF, None))
    corrupt = corrupt_record_columns(df)
    visible = [c for c in df.columns if not c.lower().startswith(INTERNAL_PREFIX)]
    redacted = redacted_columns(rules, visible, corrupt)
    select = redacted_select(visible, rendered_actions(spark, rules, redacted))
    plain = df.selectExpr(*select)
    data_type = plain.schema.simpleString()
    if label is not None:
        select = [*select, f"{label[0]} AS {quote(label[1])}"]
    row = df.selectExpr(*select)
    raw_input = {c.lower() for c in corrupt}
    corrupt_present = next((c for c in plain.columns if c.lower() in raw_input), None)
    return TapView(
        select=tuple(select),
        columns=tuple(row.columns),
        redacted=redacted,
        schema_json=row.schema.json(),
        data_type=data_type,
        corrupt_column=corrupt_present,
        label_column=label[1] if label is not None else None,
        expectation_names=expectation_names,
    )


@dataclass(frozen=True)
class CompiledProgram:
    """A program for one round: ``program`` (base64, for the JVM) and the ``data_type`` of
    the records it renders (``struct<...>``)."""

    program: str
    data_type: str


def _java_message(exc: Exception) -> str:
    """Spark's message for ``exc`` without the logical plan its ``getMessage`` appends (an
    AnalysisException's ``getSimpleMessage``): the user gets the line that says what is
    wrong ("did you mean …"), not the engine's internals. The full text goes to the debug
    log."""
    java = getattr(exc, "java_exception", None)
    text = str(exc)
    if java is not None:
        try:
            text = str(java.getMessage())
            log.debug("Spark's full message: %s", text)
            text = str(java.getSimpleMessage())
        except Exception:  # not an AnalysisException: cut below
            pass
    # Whatever the message, a plan starts on its own line (";\n'Filter …", "== SQL ==").
    # (A ParseException's message starts with a line break.)
    return text.strip().split("\n", 1)[0].rstrip(";").strip()


def _mentions(text: str, column: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(column)}(?!\w)", text, re.IGNORECASE) is not None


def compile_program(
    spark: SparkSession,
    view: TapView,
    filter_sql: str | None,
    columns: tuple[str, ...] | None,
    label_sql: str | None,
    *,
    user_filter: str | None,
) -> CompiledProgram:
    """Compile a program over ``view``: Catalyst expressions bound to the tap's row, for

    - the filter (the request's, and for ``violations``/``errors`` rounds the runtime's own),
    - the rendering of the requested columns with ``to_json`` (null fields included),
    - the label (the failed expectations; the error of a corrupt record, or the error of an
      error row a vertex emitted, see :mod:`sparkglass.runtime.contract.error_rows`).

    An unknown column or a predicate that does not parse or resolve raises
    :class:`RoundProgramError` (``field`` ``filter`` or ``columns``) with Spark's message; so
    does a filter naming a redacted column (it would reveal the value one row at a time), a
    nondeterministic filter, and one using anything but the cheap built-ins of the allowlist
    (``io.sparkglass.sampling.FilterAllowlist``: the filter runs on the application's task
    threads, so ``rlike``, ``repeat``, user-defined functions, reflection and subqueries are
    refused, a ``round`` scale is bounded, a LIKE pattern is a string literal and may not
    backtrack). The allowlist is checked on the parsed filter before Spark's analyzer
    evaluates any part of it.

    ``filter_sql`` is the whole filter (the request's ``user_filter`` and the runtime's own);
    ``user_filter`` alone is checked against the redaction. Raises :class:`RoundProgramError`.
    """
    visible = [c for c in view.columns if c != view.label_column]
    by_lower = {c.lower(): c for c in visible}
    chosen: list[str] = visible
    if columns is not None:
        chosen = []
        for name in columns:
            found = by_lower.get(name.lower())
            if found is None:
                if view.redacted.get(_original(view, name)) is RedactionAction.DROP:
                    raise RoundProgramError(
                        f"columns: column {name!r} is redacted (dropped) for this application",
                        field="columns",
                    )
                raise RoundProgramError(
                    f"columns: no column {name!r} at this vertex; columns: {', '.join(visible)}",
                    field="columns",
                )
            chosen.append(found)
    if user_filter is not None:
        for column, action in view.redacted.items():
            if action is RedactionAction.DROP and _mentions(user_filter, column):
                raise RoundProgramError(
                    f"filter: column {column!r} is redacted for this application; a filter "
                    "may not name a redacted column",
                    field="filter",
                )
    jvm: Any = spark._jvm
    gateway: Any = spark.sparkContext._gateway
    # Always name the columns: the captured row may hold more than is visible (the label
    # column, a tap's own; at the extension's taps the raw row with its redacted columns),
    # and only the visible ones may ever be rendered.
    array = gateway.new_array(jvm.java.lang.String, len(chosen))
    renders = gateway.new_array(jvm.java.lang.String, len(chosen))
    for i, name in enumerate(chosen):
        array[i] = name
        renders[i] = view.renders.get(name)
    try:
        if user_filter is not None:
            _check_no_alias(spark, user_filter)
        raw = getattr(jvm, PROGRAM_CLASS).compile(
            spark._jsparkSession,
            view.schema_json,
            filter_sql,
            array,
            label_sql,
            renders,
            user_filter is not None,
        )
    except RoundProgramError:
        raise
    except Exception as exc:  # Spark's ParseException / AnalysisException through Py4J
        message = _java_message(exc)
        where = "filter" if filter_sql is not None else "columns"
        raise RoundProgramError(f"{where}: {message}", field=where) from None
    answer = json.loads(str(raw))
    if user_filter is not None:
        refs = {r.lower() for r in answer["references"]}
        for column, action in view.redacted.items():
            if column.lower() in refs:
                raise RoundProgramError(
                    f"filter: column {column!r} is redacted ({action.value}) for this "
                    "application; a filter may not name a redacted column",
                    field="filter",
                )
        if not answer["deterministic"]:  # none of the allowed is not: kept as a backstop
            raise RoundProgramError(
                "filter: must be deterministic (no rand(), uuid() or other nondeterministic "
                "function)",
                field="filter",
            )
        for pattern, escape in answer["likePatterns"]:
            problem = _like_problem(pattern, escape)
            if problem is not None:
                raise RoundProgramError(f"filter: {problem}", field="filter")
    return CompiledProgram(program=str(answer["program"]), data_type=str(answer["dataType"]))


def _check_no_alias(spark: SparkSession, user_filter: str) -> None:
    """Spark reads a trailing word as a column alias (``carrier = 'UA' AND`` is
    ``carrier = 'UA' AS `AND```, outside ANSI mode), so an incomplete predicate would run as
    a shorter one. A filter takes no alias: raises :class:`RoundProgramError` naming it.
    Spark's ``ParseException`` passes through (the caller words it)."""
    parser: Any = spark._jsparkSession.sessionState().sqlParser()
    parsed = parser.parseExpression(user_filter)
    if str(parsed.getClass().getSimpleName()) in ("Alias", "UnresolvedAlias", "MultiAlias"):
        name = str(parsed.name()) if hasattr(parsed, "name") else "?"
        raise RoundProgramError(
            f"filter: does not parse as one predicate: Spark reads its end as a column alias "
            f"(AS {name}); an AND or OR without its right side?",
            field="filter",
        )


def _like_problem(pattern: str, escape: str) -> str | None:
    """Why a LIKE pattern may not run on the executors, or ``None`` when it may.

    Spark runs LIKE as a Java regular expression (``%`` → ``.*``) that backtracks: with
    several ``%`` apart (``%a%b%c``) one non-matching value costs time polynomial in its
    length. Allowed are the shapes that cost time linear in it, the ones Spark itself turns
    into string tests: a constant pattern whose only ``%`` are one leading and one trailing
    (``abc%``, ``%abc``, ``%abc%``), or a single ``%`` inside (``abc%def``); ``_`` anywhere.
    """
    wildcards: list[int] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            i += 2
            continue
        if pattern[i] == "%":
            wildcards.append(i)
        i += 1
    inner = [w for w in wildcards if w not in (0, len(pattern) - 1)]
    if not inner or (len(wildcards) == 1 and len(pattern) > 1):
        return None
    return (
        f"LIKE/ILIKE pattern {pattern!r} is not allowed: a filter runs in the application's "
        "tasks and a '%' in the middle of a pattern that has others backtracks; use at most "
        "a leading and a trailing '%' (abc%, %abc, %abc%) or a single one inside (abc%def)"
    )


def _original(view: TapView, name: str) -> str:
    for column in view.redacted:
        if column.lower() == name.lower():
            return column
    return name


def program_compiler(
    spark: SparkSession, vertex: str, view: TapView, kind: RoundKind
) -> Callable[[RoundRequest], CompiledProgram]:
    """The function a tap's rounds compile their request with (cached per request)."""

    @functools.lru_cache(maxsize=64)
    def compile_request(request: RoundRequest) -> CompiledProgram:
        filters: list[str] = []
        label: str | None = None
        if request.kind is RoundKind.VIOLATIONS:
            assert view.label_column is not None, "violations need the violations tap"
            col = quote(view.label_column)
            if request.expectation is not None:
                filters.append(f"array_contains({col}, '{request.expectation}')")
            else:
                filters.append(f"size({col}) > 0")
            label = f"array_join({col}, ',')"
        elif request.kind is RoundKind.ERRORS and view.label_column is not None:
            # The errors tap of a vertex that emits error rows: its label is the error.
            col = quote(view.label_column)
            filters.append(f"{col} IS NOT NULL")
            label = col
        elif request.kind is RoundKind.ERRORS:
            if view.corrupt_column is None:
                raise RoundProgramError(
                    f"kind: vertex {vertex!r} has no error rows to sample (no corrupt-record "
                    "column: read CSV/JSON with mode PERMISSIVE and the column in the schema; "
                    "or an async vertex with on_failure='emit_error', a Python vertex with "
                    "on_error='emit_error')",
                    field="kind",
                )
            filters.append(f"{quote(view.corrupt_column)} IS NOT NULL")
            label = f"'{CORRUPT_RECORD_ERROR}'"
        if request.filter is not None:
            # Checked alone first: it must be one whole predicate (``a) OR (true`` does not
            # parse), over visible columns, before it is combined with the runtime's own.
            checked = compile_program(
                spark, view, request.filter, request.columns, None, user_filter=request.filter
            )
            if not filters:
                return checked
            filters.append(f"({request.filter})")
        whole = " AND ".join(filters) if filters else None
        return compile_program(spark, view, whole, request.columns, label, user_filter=None)

    # Read by the coordinator to name the expectations a violations round may ask for.
    compile_request.expectation_names = view.expectation_names  # type: ignore[attr-defined]
    return compile_request

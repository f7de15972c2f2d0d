"""Redaction of sampled rows: per-application rules applied before a row leaves the executor.

An application names columns (exact names or shell-style patterns such as ``*_email``,
matched case-insensitively like Spark resolves columns) and what happens to them::

    sampling:
      redact:
        - {columns: [tailnum], action: hash}
        - {columns: ["*_email", ssn], action: drop}

``drop`` removes the column from every sampled row, ``mask`` replaces a non-null value by
``"***"`` (null stays null), ``hash`` replaces it by the hex SHA-256 of its string form. The
tap renders only the redacted row, on the executor, so a redacted value never reaches the
driver, the store, a status or a log. When a column matches several rules the strongest
action wins (drop, then mask, then hash). Nothing in a round request can change these rules:
a round's column subset and filter apply to the redacted row, and a filter may not name a
redacted column (that would reveal it one row at a time).

When an application has any rule, the corrupt-record column of CSV/JSON sources
(``spark.sql.columnNameOfCorruptRecord``, default ``_corrupt_record``) is masked too unless a
rule names it: it holds the raw input line, redacted columns included.

The rules reach the driver in :data:`REDACT_CONF` (JSON or YAML list; the operator writes it
from ``spec.sampling.redact``). Spark-free: the operator validates the spec with it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from enum import StrEnum

import yaml
from pydantic import Field, TypeAdapter, ValidationError

from sparkglass.runtime.contract.description import CamelModel
from sparkglass.runtime.contract.errors import SamplingSettingsError

#: Spark conf holding the application's redaction rules.
REDACT_CONF = "spark.sparkglass.sampling.redact"
#: What a masked value becomes.
MASK = "***"
MAX_RULES = 100


class RedactionAction(StrEnum):
    """What a rule does to the columns it names (strongest first)."""

    DROP = "drop"
    MASK = "mask"
    HASH = "hash"


_STRENGTH = {RedactionAction.DROP: 3, RedactionAction.MASK: 2, RedactionAction.HASH: 1}


class RedactionRule(CamelModel):
    """Columns (names or shell-style patterns) and what happens to them in sampled rows."""

    columns: list[str] = Field(
        min_length=1,
        max_length=100,
        description="Column names or patterns (*, ?, [..]); case-insensitive; top-level columns.",
    )
    action: RedactionAction = Field(description="drop, mask or hash.")

    def matches(self, column: str) -> bool:
        """True when ``column`` is one this rule names."""
        lowered = column.lower()
        return any(fnmatch.fnmatchcase(lowered, pattern.lower()) for pattern in self.columns)


_RULES = TypeAdapter(list[RedactionRule])


def parse_redaction(raw: object, *, field: str = REDACT_CONF) -> list[RedactionRule]:
    """Rules from a list of mappings or JSON/YAML text (``None`` or empty: no rule).

    Raises :class:`SamplingSettingsError` naming ``field`` and the entry for a rule naming no
    column, an empty or blank pattern, an unknown action, or more than 100 rules.
    """
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SamplingSettingsError(
                f"{field} is not valid JSON/YAML: {exc}", field=field
            ) from None
        if raw is None:
            return []
    try:
        rules = _RULES.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{field}[{'].'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise SamplingSettingsError(
            f"invalid redaction rules ({problems}); each rule is "
            "{columns: [name or pattern, ...], action: drop|mask|hash}",
            field=field,
        ) from None
    if len(rules) > MAX_RULES:
        raise SamplingSettingsError(f"{field}: at most {MAX_RULES} rules", field=field)
    for i, rule in enumerate(rules):
        for pattern in rule.columns:
            if not pattern.strip():
                raise SamplingSettingsError(
                    f"{field}[{i}].columns: a column name or pattern may not be blank",
                    field=field,
                )
    return rules


def redacted_columns(
    rules: Sequence[RedactionRule], columns: Iterable[str], corrupt_record_column: str
) -> dict[str, RedactionAction]:
    """Column → action for each of ``columns`` a rule names (the strongest rule wins), plus
    the corrupt-record column (masked) when there are rules and none names it."""
    out: dict[str, RedactionAction] = {}
    for column in columns:
        actions = [r.action for r in rules if r.matches(column)]
        if actions:
            out[column] = max(actions, key=_STRENGTH.__getitem__)
        elif rules and column.lower() == corrupt_record_column.lower():
            out[column] = RedactionAction.MASK
    return out


def quote(column: str) -> str:
    """``column`` as a Spark SQL identifier."""
    return "`" + column.replace("`", "``") + "`"


def redacted_select(columns: Sequence[str], redacted: dict[str, RedactionAction]) -> list[str]:
    """Spark SQL expressions rendering ``columns`` redacted, in order (dropped ones left out);
    each keeps its column's name."""
    out: list[str] = []
    for column in columns:
        action = redacted.get(column)
        q = quote(column)
        if action is RedactionAction.DROP:
            continue
        if action is RedactionAction.MASK:
            out.append(f"CASE WHEN {q} IS NULL THEN NULL ELSE '{MASK}' END AS {q}")
        elif action is RedactionAction.HASH:
            out.append(f"sha2(CAST({q} AS STRING), 256) AS {q}")
        else:
            out.append(q)
    return out

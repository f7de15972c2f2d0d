"""Redaction of sampled rows: per-application rules applied before a row leaves the executor.

An application names top-level columns (exact names or shell-style patterns such as
``*_email``, matched case-insensitively like Spark resolves columns) and what happens to
them: ``drop``, ``mask`` or ``hash`` (HMAC-SHA-256 under the application's key,
:data:`KEY_CONF`). The tap renders only the redacted row, on the executor, so a redacted
value never reaches the driver, the store, a status or a log, and nothing in a round request
can change the rules. They reach the driver in :data:`REDACT_CONF`; Spark-free, so the
operator validates the spec with it. The rules in full (strongest action, nested fields,
corrupt-record columns, where the key comes from): docs/security.md, "Redaction of sampled
rows", and docs/architecture.md, "Redaction".
"""

from __future__ import annotations

import fnmatch
import logging
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from enum import StrEnum
from pathlib import Path

import platformdirs
import yaml
from pydantic import Field, TypeAdapter, ValidationError, field_validator

from sparkglass.runtime.contract.description import CamelModel
from sparkglass.runtime.contract.errors import SamplingSettingsError

log = logging.getLogger(__name__)

#: Spark conf holding the application's redaction rules.
REDACT_CONF = "spark.sparkglass.sampling.redact"
#: What a masked value becomes.
MASK = "***"
MAX_RULES = 100
#: The SQL function of the ``hash`` action (``io.sparkglass.sampling.RedactionHash``).
HASH_FUNCTION = "sg_redact_hash"
#: Spark conf holding the hash key, hex (a name Spark's default ``spark.redaction.regex``
#: hides: it contains ``secret``).
KEY_CONF = "spark.sparkglass.sampling.redact.secret"
#: Environment variable holding the hash key, hex, when :data:`KEY_CONF` is not set.
KEY_ENV = "SPARKGLASS_REDACTION_KEY"
#: Bytes of a generated key (its hex text is twice as long); the shortest key accepted.
KEY_BYTES = 32
#: Name of the local-mode key file in the user's data directory.
KEY_FILE_NAME = "redaction.key"
#: Mode of the key file.
KEY_FILE_MODE = 0o600


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

    @field_validator("columns")
    @classmethod
    def _top_level_only(cls, columns: list[str]) -> list[str]:
        # A dotted name reads as a path into a struct; rules never reach inside one, so such
        # a rule would be accepted and redact nothing.
        for pattern in columns:
            if "." in pattern and _literal(pattern) is None:
                head = pattern.split(".", 1)[0] or pattern
                raise ValueError(
                    f"{pattern!r} names a nested field: redaction rules name top-level columns "
                    f"only, and a struct column is redacted whole (name {head!r}); a top-level "
                    f"column whose name contains '.' is named in backticks (`{pattern}`)"
                )
        return columns

    def matches(self, column: str) -> bool:
        """True when ``column`` is one this rule names."""
        lowered = column.lower()
        for pattern in self.columns:
            literal = _literal(pattern)
            if literal is not None:
                if literal.lower() == lowered:
                    return True
            elif fnmatch.fnmatchcase(lowered, pattern.lower()):
                return True
        return False


def _literal(pattern: str) -> str | None:
    """The name a backticked pattern (```a.b```, ``` `` ``` for a backtick) names literally,
    else ``None``."""
    text = pattern.strip()
    if len(text) >= 2 and text.startswith("`") and text.endswith("`"):
        return text[1:-1].replace("``", "`")
    return None


_RULES = TypeAdapter(list[RedactionRule])


def parse_redaction(raw: object, *, field: str = REDACT_CONF) -> list[RedactionRule]:
    """Rules from a list of mappings or JSON/YAML text (``None`` or empty: no rule), shaped
    like ``spec.sampling.redact``::

        - {columns: [tailnum], action: hash}
        - {columns: ["*_email", ssn], action: drop}

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
    rules: Sequence[RedactionRule],
    columns: Iterable[str],
    corrupt_record_columns: str | Iterable[str],
) -> dict[str, RedactionAction]:
    """Column → action for each of ``columns`` a rule names (the strongest rule wins), plus
    the corrupt-record columns (one name, or every column holding a source's raw input;
    case-insensitive), masked, when there are rules and none names them."""
    corrupt = (
        {corrupt_record_columns.lower()}
        if isinstance(corrupt_record_columns, str)
        else {c.lower() for c in corrupt_record_columns}
    )
    out: dict[str, RedactionAction] = {}
    for column in columns:
        actions = [r.action for r in rules if r.matches(column)]
        if actions:
            out[column] = max(actions, key=_STRENGTH.__getitem__)
        elif rules and column.lower() in corrupt:
            out[column] = RedactionAction.MASK
    return out


def hashes(rules: Sequence[RedactionRule]) -> bool:
    """Whether any rule hashes (then the application needs a key)."""
    return any(r.action is RedactionAction.HASH for r in rules)


def quote(column: str) -> str:
    """``column`` as a Spark SQL identifier."""
    return "`" + column.replace("`", "``") + "`"


def redacted_select(columns: Sequence[str], redacted: dict[str, RedactionAction]) -> list[str]:
    """Spark SQL expressions rendering ``columns`` redacted, in order (dropped ones left out);
    each keeps its column's name. A hashed column calls :data:`HASH_FUNCTION`, which the
    session must resolve (the sampling jar's ``RedactionHash``)."""
    out: list[str] = []
    for column in columns:
        action = redacted.get(column)
        q = quote(column)
        if action is RedactionAction.DROP:
            continue
        if action is RedactionAction.MASK:
            out.append(f"CASE WHEN {q} IS NULL THEN NULL ELSE '{MASK}' END AS {q}")
        elif action is RedactionAction.HASH:
            out.append(f"{HASH_FUNCTION}(CAST({q} AS STRING)) AS {q}")
        else:
            out.append(q)
    return out


def key_file_path() -> Path:
    """Where the local-mode key lives: ``<user data dir>/sparkglass/redaction.key``
    (platformdirs; ``$XDG_DATA_HOME/sparkglass`` on Linux)."""
    return Path(platformdirs.user_data_dir("sparkglass", appauthor=False)) / KEY_FILE_NAME


def ensure_key_file(path: Path | None = None) -> Path:
    """The local-mode key file at ``path`` (default :func:`key_file_path`), created once if
    absent: :data:`KEY_BYTES` random bytes as hex, mode 0600 from the start, in a directory
    created 0700. The key is never returned nor logged; the JVM reads the file.

    An existing file must be a regular file of this user (not a symbolic link), or another
    local user could choose the key; a mode wider than 0600 is narrowed. Raises
    :class:`SamplingSettingsError` naming the file (never its content) and :data:`KEY_ENV`.
    """
    path = path or key_file_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, KEY_FILE_MODE)
    except FileExistsError:
        _check_existing_key_file(path)
        return path
    except OSError as exc:
        raise _key_file_error(path, f"cannot be created ({exc.strerror})") from None
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES) + "\n")
    log.info("generated the redaction key file %s (set %s to choose a key)", path, KEY_CONF)
    return path


def _check_existing_key_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        kind = "is a symbolic link" if path.is_symlink() else f"cannot be read ({exc.strerror})"
        raise _key_file_error(path, kind) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise _key_file_error(
                path, f"is not a regular file owned by uid {os.geteuid()} (owner {info.st_uid})"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            log.warning("redaction key file %s had mode %o; setting %o", path, mode, KEY_FILE_MODE)
            os.fchmod(fd, KEY_FILE_MODE)
    finally:
        os.close(fd)


def _key_file_error(path: Path, problem: str) -> SamplingSettingsError:
    return SamplingSettingsError(
        f"redaction key file {path} {problem}; remove it, or set {KEY_CONF} (or ${KEY_ENV}) "
        "to a key of your own",
        field=KEY_CONF,
    )

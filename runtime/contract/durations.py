"""The one duration grammar of sparkglass: CRDs, operator, service and driver all use it.

Go/Kubernetes-style compound durations: one or more ``<decimal><unit>`` with the units
``ms``, ``s``, ``m`` and ``h``, e.g. ``3s``, ``1500ms``, ``0.5s``, ``1m30s``, ``1s500ms``, ``2h``.
Every such string is also a valid CEL ``duration()`` (and Go ``time.ParseDuration``), so the
CRDs' ``pattern`` (:data:`DURATION_PATTERN`, verbatim) and their CEL range rules accept
exactly what the runtime parses. Not durations: a bare number (``3``), a space (``3 s``),
a sign (``-1s``), other unit spellings (``3sec``, ``1min``, ``3S``), the empty string.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from sparkglass.runtime.contract.errors import SamplingSettingsError

#: The grammar as the CRDs spell it (``pattern:`` of every duration field in ``crds/*.yaml``).
#: Kubernetes matches a ``pattern`` with Go's RE2, where ``$`` is the end of the text.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"

#: What error messages offer as valid durations.
DURATION_EXAMPLES = "3s, 1500ms, 0.5s or 1m30s"

# fullmatch, because Python's ``$`` would also accept a trailing newline that RE2 rejects.
_WHOLE = re.compile(DURATION_PATTERN)
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str | int | float, *, field: str) -> int:
    """Milliseconds in a duration: ``"3s"`` → 3000, ``"1m30s"`` → 90000, ``"1s500ms"`` → 1500.

    ``text`` is a string in the grammar of this module; a Python ``int``/``float`` (never a
    string) is taken as seconds (``2`` → 2000). Fractions of a millisecond round to the
    nearest one (half up). Raises :class:`SamplingSettingsError` (an
    :class:`~sparkglass.runtime.contract.errors.InvalidParameterError` and ``ValueError``)
    whose message starts with ``field`` and gives examples, for anything else: a bool,
    a negative or non-finite number, or a string that is not such a duration.
    """
    if isinstance(text, bool):
        raise _not_a_duration(field, text)
    if isinstance(text, int | float):
        if not math.isfinite(text) or text < 0:
            raise SamplingSettingsError(
                f"{field}: expected a number of seconds of 0 or more, got {text!r}", field=field
            )
        return _to_ms(Fraction(str(text)) * 1_000)
    if not isinstance(text, str) or not _WHOLE.fullmatch(text):
        raise _not_a_duration(field, text)
    return _to_ms(sum(Fraction(m.group(1)) * _UNIT_MS[m.group(2)] for m in _PART.finditer(text)))


def format_duration_ms(ms: int) -> str:
    """``ms`` as a duration of the grammar: 3000 → ``"3s"``, 1500 → ``"1500ms"``.

    ``parse_duration_ms(format_duration_ms(ms))`` is ``ms`` for every ``ms`` ≥ 0.
    """
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _to_ms(value: Fraction | int) -> int:
    # Exact arithmetic: no float drift (0.1s is 100 ms) and no overflow on long inputs.
    return math.floor(value + Fraction(1, 2))


def _not_a_duration(field: str, text: object) -> SamplingSettingsError:
    return SamplingSettingsError(
        f"{field}: expected a duration such as {DURATION_EXAMPLES} (one or more "
        f"<number><unit>, units ms, s, m, h; no spaces or sign), got {text!r}",
        field=field,
    )


__all__ = [
    "DURATION_EXAMPLES",
    "DURATION_PATTERN",
    "SamplingSettingsError",
    "format_duration_ms",
    "parse_duration_ms",
]

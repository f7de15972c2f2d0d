"""The ``spark.sparkglass.sampling.*`` configuration, validated (docs/architecture.md).

:class:`SamplingSettings` holds the keys of :data:`CONF_KEYS` within :data:`RANGES`; the
table of keys, defaults and ranges is in docs/architecture.md, "Caps and defaults".
Durations are in the one grammar of :mod:`sparkglass.runtime.contract.durations`, the same
the CRDs accept (``1500ms``, ``3s``, ``1m30s``). A bad value raises
:class:`SamplingSettingsError` naming the conf key and the allowed range. Spark-free: the
service and the operator read an application's settings with it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

# Re-exported: these names were defined here before the grammar had a module of its own.
from sparkglass.runtime.contract.durations import format_duration_ms, parse_duration_ms
from sparkglass.runtime.contract.errors import SamplingSettingsError

PREFIX = "spark.sparkglass.sampling."


class _Range:
    """An inclusive range with its human-readable form (used in error messages)."""

    def __init__(self, low: int, high: int, text: str) -> None:
        self.low, self.high, self.text = low, high, text


#: Allowed ranges by model field; ``text`` is what errors print.
RANGES: dict[str, _Range] = {
    "max_sample_rate": _Range(1, 10_000, "1–10000 records/s per subtask"),
    "max_record_length": _Range(1, 1_000_000, "1–1000000 characters"),
    "sampling_window_ms": _Range(1_000, 30_000, "1s–30s"),
    "refresh_interval_ms": _Range(1_000, 86_400_000, "1s–24h"),
    "timeout_ms": _Range(1_000, 600_000, "1s–10m"),
    "tostring_budget_ms": _Range(1, 1_000, "1–1000 ms per second"),
    "min_micro_batches": _Range(0, 100, "0–100 micro-batches"),
}

#: Conf key suffix by model field.
CONF_KEYS: dict[str, str] = {
    "enabled": "enabled",
    "max_sample_rate": "max-sample-rate",
    "max_record_length": "max-record-length",
    "sampling_window_ms": "sampling-window",
    "refresh_interval_ms": "refresh-interval",
    "timeout_ms": "timeout",
    "tostring_budget_ms": "tostring-budget-ms",
    "min_micro_batches": "min-micro-batches",
}
_DURATIONS = {"sampling_window_ms", "refresh_interval_ms", "timeout_ms"}


class SamplingSettings(BaseModel):
    """Validated sampling settings; durations in ms. JSON keys are camelCase."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    enabled: bool = Field(default=False, description="Master switch; off installs no tap.")
    max_sample_rate: int = Field(default=100, description="Records/s per subtask, 1–10000.")
    max_record_length: int = Field(default=10_000, description="Characters kept per record.")
    sampling_window_ms: int = Field(default=3_000, description="Round length, 1s–30s.")
    refresh_interval_ms: int = Field(default=60_000, description="Result cache lifetime.")
    timeout_ms: int = Field(default=30_000, description="Deadline of a whole round.")
    tostring_budget_ms: int = Field(default=50, description="Rendering ms per second per tap.")
    min_micro_batches: int = Field(
        default=1, description="Micro-batches a round on a streaming vertex waits for, 0–100."
    )

    @classmethod
    def from_conf(cls, get: Mapping[str, str] | Callable[[str], str | None]) -> SamplingSettings:
        """Read ``spark.sparkglass.sampling.*`` from a mapping or a ``key -> value|None`` getter.

        Example: ``SamplingSettings.from_conf(lambda k: spark.conf.get(k, None))``.
        Raises :class:`SamplingSettingsError` naming the conf key and its allowed range for an
        out-of-range or malformed value, and for a duration key set to an empty string; other
        keys set to an empty string take their default.
        """
        lookup: Callable[[str], str | None] = get.get if isinstance(get, Mapping) else get
        values: dict[str, Any] = {}
        for name, suffix in CONF_KEYS.items():
            key = PREFIX + suffix
            raw = lookup(key)
            # An empty duration is rejected like any other non-duration (the CRDs reject it
            # too); elsewhere empty has always meant "unset".
            if raw is None or (name not in _DURATIONS and str(raw).strip() == ""):
                continue
            values[name] = _parse(name, key, str(raw))
        return cls.validated(values, key_of=lambda n: PREFIX + CONF_KEYS[n])

    @classmethod
    def validated(
        cls, values: Mapping[str, Any], *, key_of: Callable[[str], str] | None = None
    ) -> SamplingSettings:
        """Build from field values, checking every range; errors name ``key_of(field)``."""
        key_of = key_of or (lambda n: n)
        try:
            settings = cls(**values)
        except ValidationError as exc:
            name = str(exc.errors()[0]["loc"][0])
            raise SamplingSettingsError(
                f"{key_of(name)}: {exc.errors()[0]['msg']}", field=key_of(name)
            ) from exc
        for name, rng in RANGES.items():
            value = getattr(settings, name)
            if not rng.low <= value <= rng.high:
                shown = format_duration_ms(value) if name in _DURATIONS else str(value)
                raise SamplingSettingsError(
                    f"{key_of(name)}={shown} is out of range: allowed {rng.text}",
                    field=key_of(name),
                )
        if settings.timeout_ms < settings.sampling_window_ms:
            raise SamplingSettingsError(
                f"{key_of('timeout_ms')}={format_duration_ms(settings.timeout_ms)} is out of "
                f"range: must be at least {key_of('sampling_window_ms')}="
                f"{format_duration_ms(settings.sampling_window_ms)} (allowed 1s–10m)",
                field=key_of("timeout_ms"),
            )
        return settings


def _parse(name: str, key: str, raw: str) -> Any:
    if name == "enabled":
        lowered = raw.strip().lower()
        if lowered not in ("true", "false"):
            raise SamplingSettingsError(f"{key}: expected true or false, got {raw!r}", field=key)
        return lowered == "true"
    if name in _DURATIONS:
        return parse_duration_ms(raw, field=key)
    try:
        return int(raw.strip())
    except ValueError:
        raise SamplingSettingsError(
            f"{key}: expected an integer in {RANGES[name].text}, got {raw!r}", field=key
        ) from None


def settings_from_spark(spark: Any) -> SamplingSettings:
    """The settings of a live SparkSession (runtime conf, so ``spark.conf.set`` counts)."""
    return SamplingSettings.from_conf(lambda k: spark.conf.get(k, None))


#: Field of a SparkApplication's ``spec.sampling`` by model field (durations there are text such
#: as ``3s``; the model's own JSON names them ``samplingWindowMs`` etc. in ms).
SPEC_FIELDS: dict[str, str] = {
    "enabled": "enabled",
    "max_sample_rate": "maxSampleRate",
    "max_record_length": "maxRecordLength",
    "sampling_window_ms": "samplingWindow",
    "refresh_interval_ms": "refreshInterval",
    "timeout_ms": "timeout",
    "tostring_budget_ms": "tostringBudgetMs",
    "min_micro_batches": "minMicroBatches",
}


def settings_from_spec(spec: Mapping[str, Any]) -> SamplingSettings:
    """Settings from the camelCase shape of ``spec.sampling`` (``{"samplingWindow": "3s"}``) or
    of :class:`SamplingSettings`' own JSON (``{"samplingWindowMs": 3000}``, what a driver's
    ``GET /api/v1/settings`` answers); unknown keys are ignored, missing ones take the defaults
    and stay out of ``model_fields_set`` (so a caller can tell given from defaulted).

    Raises :class:`SamplingSettingsError` naming the spec field and its allowed range.
    """
    values: dict[str, Any] = {}
    for name, spec_key in SPEC_FIELDS.items():
        if spec.get(spec_key) is not None:
            raw = spec[spec_key]
            values[name] = parse_duration_ms(raw, field=spec_key) if name in _DURATIONS else raw
        elif spec.get(to_camel(name)) is not None:  # the model's JSON: durations in ms
            values[name] = spec[to_camel(name)]
    return SamplingSettings.validated(values, key_of=lambda n: SPEC_FIELDS[n])


def client_deadline_ms(timeout_ms: int, grace_ms: int) -> int:
    """How long a client that opened a round (the service, the operator) waits for its result
    before it declares ``TIMEOUT`` itself, in ms.

    The driver ends every round within ``timeout`` of its start (with ``TIMEOUT`` at the
    latest); ``grace_ms`` covers the client's own polling, a busy driver and, in Kubernetes
    mode, the operator's hop. The one rule for every client, so that none gives up first.
    """
    return timeout_ms + grace_ms

"""One duration grammar: admission, the operator, the service and the driver agree on each string.

Every row of :data:`ROWS` (a string and its milliseconds, or ``None`` when it is not a
duration) goes to all four consumers:

- the CRDs: every duration field's ``pattern`` read from ``crds/*.yaml`` (with ``re``), then,
  where ``cel-python`` is installed, the field's CEL rules and CEL's own ``duration()`` value;
- the operator: ``DataSampleSpec.parse`` / ``SparkApplicationSpec.parse``;
- the service: ``Settings(sampling_window=...)``;
- the driver: ``SamplingSettings.from_conf`` for each duration conf key.

A consumer that also checks a range must reject an in-grammar value outside it as out of
range, and nothing else may differ. The ranges themselves are compared in
:func:`test_crd_ranges_are_the_drivers`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sparkglass.operator.specs import (
    MAX_START_TIMEOUT_SECONDS,
    DataSampleSpec,
    SparkApplicationSpec,
    parse_duration,
)
from sparkglass.runtime.contract.durations import (
    DURATION_PATTERN,
    format_duration_ms,
    parse_duration_ms,
)
from sparkglass.runtime.contract.errors import InvalidParameterError, SamplingSettingsError
from sparkglass.runtime.contract.sampling_settings import RANGES, SamplingSettings
from sparkglass.service.settings import Settings
from tests.support.crd_schema import yaml_documents

try:
    import celpy
    from celpy import celtypes
except ImportError:  # the CRD column then checks the pattern only
    celpy = None

REPO = Path(__file__).resolve().parents[2]
CRD_FILES = sorted((REPO / "crds").glob("*.yaml"))
P = "spark.sparkglass.sampling."

#: (text, milliseconds or None when it is not a duration).
ROWS: list[tuple[str, int | None]] = [
    ("1s500ms", 1_500),
    ("1m30s", 90_000),
    ("0.5s", 500),
    ("1500ms", 1_500),
    ("3s", 3_000),
    ("30s", 30_000),
    ("10m", 600_000),
    ("0.25m", 15_000),
    ("2h", 7_200_000),
    ("1h30m", 5_400_000),
    ("999ms", 999),
    ("3", None),
    ("2.5", None),
    ("3 s", None),
    ("1min", None),
    ("-1s", None),
    ("", None),
    ("3sec", None),
    ("3S", None),
    (" 3s", None),
    ("3s ", None),
    # Python's `$` matches before a final newline: each consumer must anchor with \Z/fullmatch.
    ("3s\n", None),
    ("s3", None),
    (".5s", None),
    ("1.s", None),
    ("500us", None),
    ("1d", None),
    ("1s-1ms", None),
]

#: Every duration field of the CRDs (kind, path under the schema root); found by a walk too.
CRD_DURATION_FIELDS = {
    ("DataSample", ".spec.samplingWindow"),
    ("DataSample", ".spec.applicationStartTimeout"),
    ("SparkApplication", ".spec.sampling.samplingWindow"),
    ("SparkApplication", ".spec.sampling.refreshInterval"),
    ("SparkApplication", ".spec.sampling.timeout"),
}

#: The driver's conf key whose range a CRD duration field restates.
CRD_FIELD_RANGE = {
    ".spec.samplingWindow": "sampling_window_ms",
    ".spec.sampling.samplingWindow": "sampling_window_ms",
    ".spec.sampling.refreshInterval": "refresh_interval_ms",
    ".spec.sampling.timeout": "timeout_ms",
}

BAD = "not a duration"
OUT = "out of range"
Outcome = int | str


# ---------------------------------------------------------------------------- the CRDs


def _schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in CRD_FILES:
        for crd in yaml_documents(path):
            if not crd or crd["spec"]["group"] != "sparkglass.io":
                continue
            for version in crd["spec"]["versions"]:
                yield crd["spec"]["names"]["kind"], version["schema"]["openAPIV3Schema"]


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _is_duration_field(node: dict[str, Any]) -> bool:
    # A duration field either has a CEL duration rule or a pattern with duration units.
    rules = [r["rule"] for r in node.get("x-kubernetes-validations") or []]
    pattern = node.get("pattern", "")
    return any("duration(self)" in r for r in rules) or bool(re.search(r"\bms\|s\b", pattern))


def crd_duration_fields() -> dict[tuple[str, str], dict[str, Any]]:
    """Every duration field of the CRDs, by (kind, path)."""
    return {
        (kind, path): node
        for kind, schema in _schemas()
        for path, node in _walk(schema)
        if node.get("type") == "string" and _is_duration_field(node)
    }


def _cel_rules_hold(node: dict[str, Any], text: str) -> bool:
    assert celpy is not None
    env = celpy.Environment()
    for rule in node.get("x-kubernetes-validations") or []:
        program = env.program(env.compile(rule["rule"]))
        if not program.evaluate({"self": celpy.json_to_cel(text)}):
            return False
    return True


def crd_outcome(node: dict[str, Any], text: str) -> Outcome | None:
    """What the API server would do; ``None`` (no value) when only the pattern is known."""
    # The API server matches with Go's RE2, where `$` is the end of the text; Python's `$`
    # also matches before a final newline, so `\Z` stands in for it here.
    pattern = re.sub(r"(?<!\\)\$", r"\\Z", node["pattern"])
    if re.search(pattern, text) is None or len(text) > node.get("maxLength", math.inf):
        return BAD
    if celpy is None:
        return None
    if not _cel_rules_hold(node, text):
        return OUT
    return round(celtypes.DurationType(text).total_seconds() * 1000)


# ------------------------------------------------------------------- the runtime consumers


@dataclass(frozen=True)
class Consumer:
    """One place that reads durations; ``allowed`` is its range in ms (None: grammar only)."""

    name: str
    allowed: tuple[int, int] | None
    outcome: Callable[[str], Outcome | None]


def _classify(exc: InvalidParameterError, field: str) -> str:
    assert exc.field == field and field in str(exc), exc
    if "expected a duration" in str(exc):
        assert "3s" in str(exc) and "1500ms" in str(exc), "the error gives examples"
        return BAD
    assert "out of range" in str(exc), exc
    return OUT


def _cause(exc: ValidationError) -> InvalidParameterError:
    (error,) = exc.errors()
    cause = (error.get("ctx") or {}).get("error")
    assert isinstance(cause, InvalidParameterError), error
    return cause


def operator_data_sample(text: str) -> Outcome:
    try:
        spec = DataSampleSpec.parse(
            {"applicationRef": {"name": "app"}, "vertex": "parse", "samplingWindow": text}
        )
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("samplingWindow",)
        return _classify(_cause(exc), "samplingWindow")
    assert spec.sampling_window is not None
    return round(parse_duration(spec.sampling_window) * 1000)


def operator_start_timeout(text: str) -> Outcome:
    try:
        spec = DataSampleSpec.parse(
            {"applicationRef": {"name": "app"}, "vertex": "parse", "applicationStartTimeout": text}
        )
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("applicationStartTimeout",)
        return _classify(_cause(exc), "applicationStartTimeout")
    return round(parse_duration(spec.application_start_timeout) * 1000)


#: Ranges (ms) of CRD duration fields that are the operator's own, not a driver setting's.
OPERATOR_RANGES = {".spec.applicationStartTimeout": (0, round(MAX_START_TIMEOUT_SECONDS * 1000))}


def operator_sampling(field: str, attribute: str) -> Callable[[str], Outcome]:
    def outcome(text: str) -> Outcome:
        body = {"image": "img:1", "mainApplicationFile": "local:///job.py"}
        try:
            spec = SparkApplicationSpec.parse({**body, "sampling": {field: text}})
        except ValidationError as exc:
            assert exc.errors()[0]["loc"] == ("sampling", field)
            return _classify(_cause(exc), field)
        return round(parse_duration(getattr(spec.sampling, attribute)) * 1000)

    return outcome


def service_window(text: str) -> Outcome:
    try:
        settings = Settings(sampling_window=text)
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("sampling_window",)
        return _classify(_cause(exc), "sampling_window")
    assert settings.sampling_window == text  # handed on as written
    assert settings.sampling_window_ms is not None
    return settings.sampling_window_ms


def driver(key: str, name: str) -> Callable[[str], Outcome]:
    def outcome(text: str) -> Outcome:
        # The smallest window, so that timeout >= sampling-window never hides a timeout value.
        conf = {P + "sampling-window": "1s"} if key != "sampling-window" else {}
        try:
            settings = SamplingSettings.from_conf({**conf, P + key: text})
        except SamplingSettingsError as exc:
            return _classify(exc, P + key)
        return int(getattr(settings, name))

    return outcome


def _range(name: str) -> tuple[int, int]:
    return RANGES[name].low, RANGES[name].high


CONSUMERS = [
    Consumer("operator DataSample.spec.samplingWindow", None, operator_data_sample),
    Consumer(
        "operator DataSample.spec.applicationStartTimeout",
        OPERATOR_RANGES[".spec.applicationStartTimeout"],
        operator_start_timeout,
    ),
    *(
        Consumer(f"operator SparkApplication.spec.sampling.{f}", None, operator_sampling(f, a))
        for f, a in (
            ("samplingWindow", "sampling_window"),
            ("refreshInterval", "refresh_interval"),
            ("timeout", "timeout"),
        )
    ),
    Consumer("service sampling_window", _range("sampling_window_ms"), service_window),
    *(
        Consumer(f"driver {P}{key}", _range(name), driver(key, name))
        for key, name in (
            ("sampling-window", "sampling_window_ms"),
            ("refresh-interval", "refresh_interval_ms"),
            ("timeout", "timeout_ms"),
        )
    ),
]


def expected(ms: int | None, allowed: tuple[int, int] | None) -> Outcome:
    if ms is None:
        return BAD
    if allowed is not None and not allowed[0] <= ms <= allowed[1]:
        return OUT
    return ms


def _crd_range(node: dict[str, Any]) -> tuple[int, int] | None:
    bounds = [
        parse_duration_ms(b, field="CEL")
        for r in node.get("x-kubernetes-validations") or []
        for b in re.findall(r"duration\('([^']*)'\)", r["rule"])
    ]
    return (min(bounds), max(bounds)) if bounds else None


# ----------------------------------------------------------------------------- the tests


def test_every_crd_duration_field_uses_the_one_pattern() -> None:
    fields = crd_duration_fields()
    assert set(fields) == CRD_DURATION_FIELDS
    for (kind, path), node in fields.items():
        assert node["pattern"] == DURATION_PATTERN, f"{kind}{path}: use DURATION_PATTERN"


@pytest.mark.parametrize(("text", "ms"), ROWS, ids=[repr(t) for t, _ in ROWS])
def test_all_four_agree(text: str, ms: int | None) -> None:
    want: dict[str, Outcome | None] = {}
    got: dict[str, Outcome | None] = {}
    for (kind, path), node in sorted(crd_duration_fields().items()):
        name = f"CRD {kind}{path}"
        got[name] = crd_outcome(node, text)
        if celpy is None:
            want[name] = BAD if ms is None else None
        else:
            want[name] = expected(ms, _crd_range(node))
    for consumer in CONSUMERS:
        got[consumer.name] = consumer.outcome(text)
        want[consumer.name] = expected(ms, consumer.allowed)
    assert got == want


def test_the_table_covers_both_sides_of_every_range() -> None:
    # Otherwise test_all_four_agree could pass without ever seeing an out-of-range value.
    for consumer in CONSUMERS:
        outcomes = {expected(ms, consumer.allowed) for _, ms in ROWS}
        assert BAD in outcomes and any(isinstance(o, int) for o in outcomes), consumer.name
        if consumer.allowed is not None:
            assert OUT in outcomes, consumer.name


def test_crd_ranges_are_the_drivers() -> None:
    for (kind, path), node in crd_duration_fields().items():
        want = OPERATOR_RANGES.get(path) or _range(CRD_FIELD_RANGE[path])
        assert _crd_range(node) == want, f"{kind}{path}"


def test_crd_duration_defaults_are_in_the_grammar() -> None:
    for (kind, path), node in crd_duration_fields().items():
        if "default" in node:
            parse_duration_ms(node["default"], field=f"{kind}{path}")


# ------------------------------------------------------------------- the module itself


def test_numbers_are_seconds_and_bools_are_not() -> None:
    assert parse_duration_ms(2, field="x") == 2_000
    assert parse_duration_ms(0.25, field="x") == 250
    assert parse_duration_ms(0, field="x") == 0
    for bad in (True, False):
        with pytest.raises(SamplingSettingsError, match=r"^x: expected a duration"):
            parse_duration_ms(bad, field="x")
    for bad_number in (-1, -0.5, math.nan, math.inf):
        with pytest.raises(SamplingSettingsError, match=r"^x: expected a number of seconds"):
            parse_duration_ms(bad_number, field="x")


def test_errors_name_the_field_and_give_examples() -> None:
    with pytest.raises(SamplingSettingsError) as err:
        parse_duration_ms("1min", field="spec.samplingWindow")
    assert err.value.field == "spec.samplingWindow"
    assert isinstance(err.value, InvalidParameterError) and isinstance(err.value, ValueError)
    message = str(err.value)
    assert message.startswith("spec.samplingWindow: expected a duration such as 3s, 1500ms")
    assert "1m30s" in message and "units ms, s, m, h" in message and "'1min'" in message


def test_exact_arithmetic_and_rounding() -> None:
    assert parse_duration_ms("0.1s", field="x") == 100  # 0.1 * 1000 in floats is 100.000...01
    assert parse_duration_ms("0.0005s", field="x") == 1  # half a millisecond rounds up
    assert parse_duration_ms("0.4ms", field="x") == 0
    assert parse_duration_ms("1h1m1s1ms", field="x") == 3_661_001
    assert parse_duration_ms("9" * 40 + "h", field="x") == int("9" * 40) * 3_600_000


def test_a_trailing_newline_is_not_a_duration() -> None:
    # Go's RE2 (the API server) ends ``$`` at the end of the text; Python's before a newline.
    with pytest.raises(SamplingSettingsError):
        parse_duration_ms("3s\n", field="x")


@pytest.mark.parametrize("ms", [0, 1, 999, 1_000, 1_500, 3_000, 90_000, 600_000, 86_400_000])
def test_format_is_in_the_grammar_and_round_trips(ms: int) -> None:
    text = format_duration_ms(ms)
    assert re.fullmatch(DURATION_PATTERN, text)
    assert parse_duration_ms(text, field="x") == ms

"""The Spark-free contract of expectation declarations and overrides, redaction
rules, round requests (shapes checked for the service, the operator and the CLI)."""

from __future__ import annotations

import json

import pytest

from sparkglass.runtime.contract.errors import (
    InvalidParameterError,
    PlanError,
    SamplingSettingsError,
)
from sparkglass.runtime.contract.expectations import (
    Expectation,
    ExpectationAction,
    expect,
    expect_or_drop,
    expect_or_fail,
    expectations_conf,
    expectations_of,
    merge_expectations,
    parse_expectation_overrides,
)
from sparkglass.runtime.contract.redaction import (
    RedactionAction,
    parse_redaction,
    redacted_columns,
    redacted_select,
)
from sparkglass.runtime.contract.round_request import PLAIN, RoundKind, round_request


def test_decorators_stack_in_reading_order_and_keep_the_function() -> None:
    @expect("has-carrier", "carrier IS NOT NULL")
    @expect_or_drop("valid-delay", "dep_delay > -120")
    @expect_or_fail("known-origin", "origin IS NOT NULL")
    def parse(df: object) -> object:
        return df

    assert parse(7) == 7
    got = [(e.name, e.action) for e in expectations_of(parse)]
    assert got == [
        ("has-carrier", ExpectationAction.WARN),
        ("valid-delay", ExpectationAction.DROP),
        ("known-origin", ExpectationAction.FAIL),
    ]


@pytest.mark.parametrize(
    ("name", "condition", "fragment"),
    [("Bad Name", "x > 1", "name"), ("ok", "", "condition"), ("x" * 64, "x > 1", "name")],
)
def test_bad_declarations_name_the_field(name: str, condition: str, fragment: str) -> None:
    with pytest.raises(PlanError, match=fragment):
        expect(name, condition)


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(PlanError, match="'dup' is declared twice"):

        @expect("dup", "a > 1")
        @expect_or_drop("dup", "b > 1")
        def f(df: object) -> object:
            return df


def test_spec_overrides_replace_by_name_and_append() -> None:
    declared = [Expectation(name="a", condition="x > 1"), Expectation(name="b", condition="y")]
    text = expectations_conf(
        [("parse", [Expectation(name="b", condition="y > 2", action="drop")])]
    )
    override = parse_expectation_overrides(text)["parse"]
    merged = merge_expectations(declared, override)
    assert [(e.name, e.condition, e.action.value) for e in merged] == [
        ("a", "x > 1", "warn"),
        ("b", "y > 2", "drop"),
    ]
    extra = parse_expectation_overrides(
        {"spec": {"pipeline": {"vertices": [{"name": "v", "expectations": [
            {"name": "c", "condition": "z IS NOT NULL", "action": "fail"}]}]}}}
    )
    assert merge_expectations(declared, extra["v"])[-1].name == "c"


def test_spec_override_errors_name_vertex_entry_and_field() -> None:
    bad = json.dumps([{"name": "parse", "expectations": [{"name": "ok", "condition": "x",
                                                          "action": "explode"}]}])
    with pytest.raises(PlanError, match=r"vertex 'parse': expectations\[0\] is invalid.*action"):
        parse_expectation_overrides(bad)


def test_redaction_strongest_action_wins_case_insensitive_patterns() -> None:
    rules = parse_redaction(
        '[{"columns": ["tail*"], "action": "hash"}, {"columns": ["TAILNUM"], "action": "mask"},'
        ' {"columns": ["ssn"], "action": "drop"}]'
    )
    columns = ["carrier", "tailnum", "tail_code", "SSN", "_corrupt_record"]
    got = redacted_columns(rules, columns, "_corrupt_record")
    assert got == {
        "tailnum": RedactionAction.MASK,
        "tail_code": RedactionAction.HASH,
        "SSN": RedactionAction.DROP,
        "_corrupt_record": RedactionAction.MASK,  # raw input lines, masked with any rule
    }
    select = redacted_select(columns, got)
    assert "`carrier`" in select and not any("SSN" in s for s in select)
    assert any(s.startswith("sg_redact_hash(CAST(`tail_code`") for s in select)
    # Without rules nothing is touched, the corrupt-record column included.
    assert redacted_columns([], columns, "_corrupt_record") == {}


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ('[{"columns": [], "action": "drop"}]', "columns"),
        ('[{"columns": ["  "], "action": "drop"}]', "blank"),
        ('[{"columns": ["a"], "action": "reveal"}]', "action"),
        ('[{"action": "drop"}]', "columns"),
        ("[{", "not valid"),
    ],
)
def test_bad_redaction_rules_name_the_field(raw: str, fragment: str) -> None:
    with pytest.raises(SamplingSettingsError, match=fragment) as err:
        parse_redaction(raw)
    assert err.value.field == "spark.sparkglass.sampling.redact"


def test_round_requests_default_to_the_plain_round_and_key_by_content() -> None:
    assert round_request() == PLAIN and PLAIN.is_plain() and PLAIN.key() == ""
    a = round_request("violations", "carrier = 'UA'", "carrier, dep_delay", "valid-delay")
    assert a.kind is RoundKind.VIOLATIONS and a.columns == ("carrier", "dep_delay")
    assert a.key() == round_request(**{
        "kind": "violations", "filter": "carrier = 'UA'", "columns": ["carrier", "dep_delay"],
        "expectation": "valid-delay",
    }).key()
    assert a.query_params() == {
        "kind": "violations",
        "filter": "carrier = 'UA'",
        "columns": "carrier,dep_delay",
        "expectation": "valid-delay",
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "everything"}, "kind"),
        ({"filter": "   "}, "filter"),
        ({"filter": "x" * 4097}, "filter"),
        ({"filter": "size(__sg_failed) > 0"}, "filter"),
        ({"columns": "a,,b"}, "columns"),
        ({"columns": "a,A"}, "columns"),
        ({"columns": "a`b"}, "columns"),
        ({"expectation": "x"}, "expectation"),  # only with kind=violations
        ({"kind": "violations", "expectation": "Not A Name"}, "expectation"),
    ],
)
def test_bad_round_requests_name_the_field(kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidParameterError) as err:
        round_request(**kwargs)
    assert err.value.field == field

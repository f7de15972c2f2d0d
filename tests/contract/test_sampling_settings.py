"""The spark.sparkglass.sampling.* conf: defaults, parsing, ranges, error messages."""

from __future__ import annotations

import pytest

from sparkglass.runtime.contract.sampling_settings import (
    SamplingSettings,
    SamplingSettingsError,
    parse_duration_ms,
)

P = "spark.sparkglass.sampling."


def test_defaults_match_the_design():
    s = SamplingSettings.from_conf({})
    assert not s.enabled
    assert (s.max_sample_rate, s.max_record_length, s.tostring_budget_ms) == (100, 10_000, 50)
    assert (s.sampling_window_ms, s.refresh_interval_ms, s.timeout_ms) == (3000, 60_000, 30_000)


def test_reads_conf_keys_and_durations():
    s = SamplingSettings.from_conf(
        {
            P + "enabled": "TRUE",
            P + "max-sample-rate": "250",
            P + "max-record-length": "80",
            P + "sampling-window": "1500ms",
            P + "refresh-interval": "2m",
            P + "timeout": "10s",
            P + "tostring-budget-ms": "20",
        }
    )
    assert s.enabled and s.max_sample_rate == 250 and s.max_record_length == 80
    assert (s.sampling_window_ms, s.refresh_interval_ms, s.timeout_ms) == (1500, 120_000, 10_000)
    assert s.model_dump(by_alias=True)["samplingWindowMs"] == 1500


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max-sample-rate", "0", r"max-sample-rate=0 is out of range: allowed 1–10000"),
        ("max-sample-rate", "10001", r"allowed 1–10000"),
        ("max-sample-rate", "fast", r"max-sample-rate: expected an integer in 1–10000"),
        ("sampling-window", "45s", r"sampling-window=45s is out of range: allowed 1s–30s"),
        ("sampling-window", "500ms", r"sampling-window=500ms is out of range: allowed 1s–30s"),
        ("sampling-window", "soon", r"sampling-window: expected a duration"),
        ("tostring-budget-ms", "0", r"tostring-budget-ms=0 is out of range: allowed 1–1000"),
        ("max-record-length", "0", r"max-record-length=0 is out of range"),
        ("enabled", "yes", r"enabled: expected true or false"),
        ("timeout", "2s", r"timeout=2s is out of range: must be at least .*sampling-window=3s"),
    ],
)
def test_errors_name_the_key_and_the_range(key, value, message):
    with pytest.raises(SamplingSettingsError, match=message) as err:
        SamplingSettings.from_conf({P + key: value})
    assert err.value.field == P + key
    assert P + key in str(err.value)


def test_parse_duration():
    assert parse_duration_ms("3s", field="x") == 3000
    assert parse_duration_ms("1m", field="x") == 60_000
    assert parse_duration_ms("1s500ms", field="x") == 1500
    assert parse_duration_ms(2, field="x") == 2000
    assert parse_duration_ms(2.5, field="x") == 2500


# Accepted before the driver shared the CRDs' grammar; a DataSample could not carry them, and
# `1s500ms`, which it could, was rejected here. Now they are errors, as in the CRDs.
@pytest.mark.parametrize("text", ["1min", "2.5", "10", "3 s", "3sec", " 3s", "3S"])
def test_strings_outside_the_crd_grammar_are_rejected(text):
    with pytest.raises(SamplingSettingsError, match=r"^x: expected a duration such as 3s"):
        parse_duration_ms(text, field="x")
    with pytest.raises(SamplingSettingsError, match=r"timeout: expected a duration") as err:
        SamplingSettings.from_conf({P + "timeout": text})
    assert err.value.field == P + "timeout"


def test_an_empty_duration_is_an_error_and_other_empty_keys_are_unset():
    with pytest.raises(SamplingSettingsError, match=r"sampling-window: expected a duration"):
        SamplingSettings.from_conf({P + "sampling-window": ""})
    s = SamplingSettings.from_conf({P + "enabled": "", P + "max-sample-rate": " "})
    assert (s.enabled, s.max_sample_rate) == (False, 100)


def test_the_old_names_are_the_contract_ones():
    from sparkglass.runtime.contract import durations, errors, sampling_settings

    assert sampling_settings.parse_duration_ms is durations.parse_duration_ms
    assert sampling_settings.format_duration_ms is durations.format_duration_ms
    assert sampling_settings.SamplingSettingsError is errors.SamplingSettingsError

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
            P + "timeout": "10",
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
    assert parse_duration_ms("1min", field="x") == 60_000
    assert parse_duration_ms("2.5", field="x") == 2500
    assert parse_duration_ms(2, field="x") == 2000

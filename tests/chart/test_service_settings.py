"""Service settings with chart values of their own: ``service.trustedProxies``,
``streamConcurrency``, ``streamWaitSeconds`` and ``resultAudience`` (``service/settings.py``:
``trusted_proxies``, ``stream_concurrency``, ``stream_wait_seconds``, ``result_audience``, read
from ``SPARKGLASS_*``).

Each is rendered as its variable in the service Deployment, bounded by ``values.schema.json``
with the service's own bounds, defaults to the service's default, and is refused in
``service.config`` (one place per setting). The service's result writer is the operator's
ServiceAccount, and records kept out of status with no service to hold them fail the render.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from sparkglass.service.settings import Settings
from tests.chart.conftest import CHART, load_chart, manifests, one

#: Chart value -> service setting.
VALUES = {
    "trustedProxies": "trusted_proxies",
    "streamConcurrency": "stream_concurrency",
    "streamWaitSeconds": "stream_wait_seconds",
    "resultAudience": "result_audience",
}
POSTGRESQL = {"type": "postgresql", "existingSecret": "sparkglass-pg"}


def service_env(values: dict[str, Any]) -> dict[str, str]:
    """SPARKGLASS_* plain values of the service container rendered for ``values``."""
    deployment = one(manifests(values), "Deployment", "sparkglass-service")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        e["name"]: e["value"]
        for e in container["env"]
        if e["name"].startswith("SPARKGLASS_") and "value" in e
    }


def settings_from(env: dict[str, str]) -> Settings:
    """The service's settings from the rendered variables, as ``sparkglass serve`` reads
    them (the store URL comes from a Secret: not needed here)."""
    return Settings.model_validate(
        {k.removeprefix("SPARKGLASS_").lower(): v for k, v in env.items()}
    )


def service_schema() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return dict(schema["properties"]["service"]["properties"])


def bounds(setting: str) -> tuple[float | None, float | None]:
    """(ge, le) of a numeric service setting."""
    low = high = None
    for m in Settings.model_fields[setting].metadata:
        low = getattr(m, "ge", low)
        high = getattr(m, "le", high)
    return low, high


def test_defaults_render_the_services_defaults() -> None:
    chart_defaults = yaml.safe_load((CHART / "values.yaml").read_text())["service"]
    env = service_env({})
    for value, setting in VALUES.items():
        default = Settings.model_fields[setting].default
        chart = chart_defaults[value]
        assert (",".join(chart) if isinstance(chart, list) else chart) == default, value
        assert f"SPARKGLASS_{setting.upper()}" in env, setting
    settings = settings_from(env)
    assert settings.trusted_proxy_networks == ()
    assert (settings.stream_concurrency, settings.stream_wait_seconds) == (8, 30.0)
    assert settings.result_audience == "sparkglass-service"
    # The operator's ServiceAccount, and no one else, may hand results to the service.
    assert settings.result_writer_names == {
        "system:serviceaccount:sparkglass-system:sparkglass-operator"
    }


def test_set_values_reach_the_service() -> None:
    env = service_env(
        {
            "store": POSTGRESQL,
            "service": {
                "trustedProxies": ["10.244.0.0/16", "fd00::/8", "192.0.2.7"],
                "streamConcurrency": 32,
                "streamWaitSeconds": 2.5,
                "resultAudience": "results.example",
            },
        }
    )
    assert env["SPARKGLASS_TRUSTED_PROXIES"] == "10.244.0.0/16,fd00::/8,192.0.2.7"
    assert env["SPARKGLASS_STREAM_CONCURRENCY"] == "32"
    assert env["SPARKGLASS_STREAM_WAIT_SECONDS"] == "2.5"
    assert env["SPARKGLASS_RESULT_AUDIENCE"] == "results.example"
    settings = settings_from(env)
    assert [str(n) for n in settings.trusted_proxy_networks] == [
        "10.244.0.0/16",
        "fd00::/8",
        "192.0.2.7/32",
    ]
    assert (settings.stream_concurrency, settings.stream_wait_seconds) == (32, 2.5)
    assert settings.result_audience == "results.example"


def test_schema_bounds_and_descriptions_are_the_services() -> None:
    schema = service_schema()
    for value, setting in VALUES.items():
        assert schema[value]["description"], value
        assert f"SPARKGLASS_{setting.upper()}" in schema[value]["description"], value
    for value in ("streamConcurrency", "streamWaitSeconds"):
        low, high = bounds(VALUES[value])
        assert (schema[value]["minimum"], schema[value]["maximum"]) == (low, high), value
    audience = Settings.model_fields["result_audience"].metadata
    assert (schema["resultAudience"]["minLength"], schema["resultAudience"]["maxLength"]) == (
        next(m.min_length for m in audience if hasattr(m, "min_length")),
        next(m.max_length for m in audience if hasattr(m, "max_length")),
    )
    # 64 of the longest entries (an IPv6 CIDR, 43 characters) fit the service's 4096.
    proxies = schema["trustedProxies"]
    assert proxies["maxItems"] * (proxies["items"]["maxLength"] + 1) <= 4096


BAD: dict[str, dict[str, Any]] = {
    "no stream at all": {"streamConcurrency": 0},
    "streams past 1024": {"streamConcurrency": 1025},
    "streams not an integer": {"streamConcurrency": 2.5},
    "negative wait": {"streamWaitSeconds": -1},
    "wait past 600 s": {"streamWaitSeconds": 601},
    "empty audience": {"resultAudience": ""},
    "proxy that is no address": {"trustedProxies": ["ingress-nginx"]},
    "proxies as one string": {"trustedProxies": "10.0.0.0/8"},
    "proxy listed twice": {"trustedProxies": ["10.0.0.1", "10.0.0.1"]},
    "65 proxies": {"trustedProxies": [f"10.0.0.{i}" for i in range(65)]},
    "in config instead": {"config": {"stream_concurrency": 4}},
    "trusted_proxies in config": {"config": {"trusted_proxies": "10.0.0.0/8"}},
    "stream_wait_seconds in config": {"config": {"stream_wait_seconds": 1}},
    "result_audience in config": {"config": {"result_audience": "x"}},
    "result_writers in config": {"config": {"result_writers": "mallory"}},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_schema_refuses_out_of_bounds(case: str) -> None:
    helm = pytest.importorskip("helm_python")
    chart = load_chart()
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(chart.merge_values({"service": BAD[case]}))

"""The chart's ``operator.apiQPS`` and ``operator.apiBurst`` reach the operator's API client
(``--api-qps``, ``--api-burst``), and values out of range are refused at render time, naming
the value."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import manifests, one


def _operator_config(values: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``OperatorConfig`` the operator process builds from the command line the chart
    renders (its ``run`` replaced by a recorder; webhook off, so no certificate files)."""
    from typer.testing import CliRunner

    import sparkglass.operator.app as operator_app
    from sparkglass import cli

    if not (cli.app.registered_commands or cli.app.registered_groups):
        cli._register()
    seen: list[Any] = []
    monkeypatch.setattr(operator_app, "run", seen.append)
    values = {**values, "operator": {**values.get("operator", {}), "webhook": {"enabled": False}}}
    container = one(manifests(values), "Deployment", "sparkglass-operator")["spec"]["template"][
        "spec"
    ]["containers"][0]
    # The container's own variables (the service's URLs among them); the Downward API fills
    # POD_NAMESPACE (the Lease's namespace) in a Pod.
    plain = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    result = CliRunner().invoke(
        cli.app,
        list(container["args"]),
        env={**plain, "POD_NAMESPACE": "sparkglass-system"},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    (config,) = seen
    return config


def test_the_default_budget_reaches_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _operator_config({}, monkeypatch)
    assert (config.api_qps, config.api_burst) == (20, 40)


def test_qps_and_burst_values_reach_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _operator_config({"operator": {"apiQPS": 2.5, "apiBurst": 120}}, monkeypatch)
    assert (config.api_qps, config.api_burst) == (2.5, 120)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"apiQPS": 0}, "apiQPS.*minimum: got 0, want 1"),
        ({"apiQPS": 1001}, "apiQPS.*maximum: got 1,001, want 1,000"),
        ({"apiQPS": "fast"}, "apiQPS"),
        ({"apiBurst": 0}, "apiBurst.*minimum: got 0, want 1"),
        ({"apiBurst": 5001}, "apiBurst.*maximum: got 5,001, want 5,000"),
        ({"apiBurst": 1.5}, "apiBurst.*want integer"),
    ],
)
def test_budget_values_out_of_range_are_refused_naming_them(
    values: dict[str, Any], message: str
) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match=message):
        manifests({"operator": values})

"""``sparkglass operator ...`` on the command line."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from sparkglass.cli import _register, app

runner = CliRunner()


def test_operator_help_and_crds() -> None:
    _register()
    result = runner.invoke(app, ["operator", "--help"])
    assert result.exit_code == 0 and "run" in result.output and "crds" in result.output
    result = runner.invoke(app, ["operator", "crds"])
    assert result.exit_code == 0
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(result.output) if d}
    assert {"sparkapplications.sparkglass.io", "datasamples.sparkglass.io"} <= names
    # No kopf peering kinds: replicas elect their leader on a coordination.k8s.io Lease.
    assert names == {"sparkapplications.sparkglass.io", "datasamples.sparkglass.io"}


def test_run_needs_a_scope() -> None:
    _register()
    result = runner.invoke(app, ["operator", "run"])
    assert result.exit_code == 1
    result = runner.invoke(app, ["operator", "run", "-A", "-n", "x"])
    assert result.exit_code == 1


def test_run_without_standalone_needs_a_lease_namespace() -> None:
    _register()
    result = runner.invoke(app, ["operator", "run", "-A"], env={"POD_NAMESPACE": ""})
    assert result.exit_code == 1 and "--lease-namespace" in result.output
    result = runner.invoke(
        app,
        ["operator", "run", "-n", "x", "--lease-renew-deadline-seconds", "20"],
        env={"POD_NAMESPACE": ""},
    )
    assert result.exit_code == 1 and "renew deadline" in result.output

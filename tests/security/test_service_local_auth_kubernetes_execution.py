"""Attack: ``authMode=local`` with ``executionMode=kubernetes`` let any
local token read every namespace and create DataSamples anywhere with the service's
cluster-wide account. The settings, the real ``sparkglass serve`` process and the chart's
``values.schema.json`` now refuse the combination with an error naming both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from sparkglass.service.settings import Settings
from tests.chart.conftest import load_chart, render
from tests.security.service_process import REPO


def test_settings_refuse_local_auth_with_kubernetes_execution() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(auth_mode="local", execution_mode="kubernetes")  # type: ignore[arg-type]
    text = str(caught.value)
    assert "auth_mode=local" in text and "execution_mode=kubernetes" in text
    # The other three combinations stay valid.
    valid = (("local", "local"), ("kubernetes", "local"), ("kubernetes", "kubernetes"))
    for auth, execution in valid:
        Settings(auth_mode=auth, execution_mode=execution)  # type: ignore[arg-type]


def test_serve_process_refuses_to_start(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p
        ),
        "SPARKGLASS_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "SPARKGLASS_AUTH_MODE": "local",
        "SPARKGLASS_EXECUTION_MODE": "kubernetes",
        "SPARKGLASS_KUBE_API_URL": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "sparkglass", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "auth_mode=local" in out and "execution_mode=kubernetes" in out, out
    # It never got as far as serving.
    assert "Data Sample page" not in out


def test_chart_schema_refuses_the_combination() -> None:
    helm = pytest.importorskip("helm_python")
    chart = load_chart()
    values = {
        "service": {
            "authMode": "local",
            "executionMode": "kubernetes",
            "localAuth": {"existingSecret": "tokens"},
        }
    }
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema(chart.merge_values(values))
    text = str(caught.value)
    assert "/service/authMode" in text and "/service/executionMode" in text, text
    with pytest.raises(helm.HelmError):
        render(values)
    # The executionMode default is kubernetes: only setting authMode=local is refused too.
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(
            chart.merge_values(
                {"service": {"authMode": "local", "localAuth": {"existingSecret": "t"}}}
            )
        )
    for ok in (
        {
            "service": {
                "authMode": "local",
                "executionMode": "local",
                "localAuth": {"existingSecret": "tokens"},
            }
        },
        {"service": {"authMode": "kubernetes", "executionMode": "local"}},
        {},
    ):
        chart.validate_schema(chart.merge_values(ok))

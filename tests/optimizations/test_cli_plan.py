"""``sparkglass plan MODULE:PIPELINE [--json]``."""

from __future__ import annotations

import json
import textwrap

import pytest
import typer
from typer.testing import CliRunner

from sparkglass.cli import plan as plan_cli

TARGET = textwrap.dedent(
    """
    from sparkglass.runtime.contract.description import (
        PipelineDescription, VertexAttributes, VertexDescription, VertexKind,
    )

    EOI = VertexAttributes(no_output_until_end_of_input=True)
    pipeline = PipelineDescription(name="demo", vertices=[
        VertexDescription(name="flights", kind=VertexKind.SOURCE, bounded=False),
        VertexDescription(name="schedule", kind=VertexKind.SOURCE),
        VertexDescription(name="busiest-origins", inputs=["schedule"], attributes=EOI),
        VertexDescription(name="enrich-origin", inputs=["flights", "busiest-origins"]),
        VertexDescription(name="out", kind=VertexKind.SINK, inputs=["enrich-origin"]),
    ])

    def factory():
        return pipeline
    """
)


@pytest.fixture
def app(tmp_path, monkeypatch) -> typer.Typer:
    (tmp_path / "plan_target_mod.py").write_text(TARGET)
    monkeypatch.chdir(tmp_path)
    app = typer.Typer()
    plan_cli.register(app)
    app.command("noop")(lambda: None)  # a second command keeps `plan` a subcommand
    return app


def test_json_is_the_plan(app):
    result = CliRunner().invoke(app, ["plan", "plan_target_mod:pipeline", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["pipeline"] == "demo"
    kinds = {(e["upstream"], e["downstream"]): e["kind"] for e in data["edges"]}
    assert kinds[("busiest-origins", "enrich-origin")] == "blocking"
    assert data["phases"][1]["streamingSinks"] == ["out"]


def test_tables_show_attributes_edges_phases_and_taps(app):
    result = CliRunner().invoke(app, ["plan", "plan_target_mod:factory"])
    assert result.exit_code == 0, result.output
    out = result.output
    for text in ("end-of-input", "materialized-output", "blocking", "pipelined", "waits for"):
        assert text in out


def test_overrides_file_and_errors(app, tmp_path):
    spec = tmp_path / "app.yaml"
    spec.write_text(
        "spec:\n  pipeline:\n    vertices:\n"
        "      - name: enrich-origin\n        attributes: {noOutputUntilEndOfInput: true}\n"
    )
    result = CliRunner().invoke(app, ["plan", "plan_target_mod:pipeline", "--overrides", str(spec)])
    assert result.exit_code != 0
    assert "enrich-origin" in str(result.exception) and "flights" in str(result.exception)
    bad = CliRunner().invoke(app, ["plan", "plan_target_mod:nope"])
    assert bad.exit_code == 1
    assert "cannot load" in bad.output
    wrong = CliRunner().invoke(app, ["plan", "json:dumps"])
    assert wrong.exit_code != 0

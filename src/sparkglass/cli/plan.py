"""``sparkglass plan MODULE:PIPELINE``: explain what the attribute-aware planner does.

Prints each step's declared and adjusted attributes, the edges (pipelined or blocking),
the phases, and where the sampling taps sit; ``--json`` prints the Plan JSON instead (the
shape the operator puts in a SparkApplication's status and the web UI draws).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sparkglass.runtime.contract.description import PipelineDescription, VertexAttributes
from sparkglass.runtime.contract.plan import Plan

console = Console()
if not console.is_terminal:
    # Piped or captured output: rich would wrap at 80 columns and cut attribute names.
    console = Console(width=160)

#: Arguments a pipeline factory may name; ``plan`` supplies them.
FACTORY_ARGUMENTS = ("spark", "workdir")


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app``."""
    app.command(
        "plan",
        help=(
            "Explain how a pipeline will run: declared vs adjusted attributes of each vertex, "
            "edges (pipelined or blocking), phases, fused Python vertices and where the "
            "sampling taps sit.\n\n"
            "PIPELINE is `module:attribute` naming a Pipeline, a PipelineDescription, or a "
            "function returning one; the function gets `spark` (a local session) and "
            "`workdir` (a temporary directory) if it names those parameters.\n\n"
            "Example: `sparkglass plan sparkglass.demo.flights:build_pipeline --json`"
        ),
    )(plan_command)


def plan_command(
    target: str = typer.Argument(..., metavar="MODULE:PIPELINE", help="What to plan."),
    as_json: bool = typer.Option(False, "--json", help="Print the Plan as JSON."),
    overrides: Path | None = typer.Option(
        None,
        "--overrides",
        exists=True,
        dir_okay=False,
        help="YAML/JSON with pipeline.vertices[].attributes (a SparkApplication works).",
    ),
) -> None:
    from . import fail

    override_text = overrides.read_text() if overrides is not None else None
    with tempfile.TemporaryDirectory(prefix="sparkglass-plan-") as workdir:
        try:
            obj = _resolve(target, Path(workdir))
        except (ImportError, AttributeError, ValueError, TypeError) as exc:
            raise fail(f"cannot load {target!r}: {exc}") from None
        planned = _plan_of(obj, override_text)
        if planned is None:
            raise fail(
                f"{target!r} is a {type(obj).__name__}; expected a Pipeline, a "
                "PipelineDescription, a Plan or a function returning one"
            )
    if as_json:
        typer.echo(json.dumps(planned.to_json_dict(), indent=2))
    else:
        print_plan(planned)


def _resolve(target: str, workdir: Path) -> object:
    """Import ``module:attribute`` and call it if it is a factory (see FACTORY_ARGUMENTS)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError("expected MODULE:PIPELINE, e.g. sparkglass.demo.flights:build_pipeline")
    # Like `python -m` and uvicorn: modules in the current directory are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type) or not callable(obj):
        return obj
    params = inspect.signature(obj).parameters
    kwargs: dict[str, object] = {}
    if "spark" in params:
        kwargs["spark"] = _local_spark()
    if "workdir" in params:
        kwargs["workdir"] = workdir
    return obj(**kwargs)


def _local_spark() -> object:
    from sparkglass.runtime.session import spark_session

    spark = spark_session("sparkglass-plan", master="local[1]")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _plan_of(obj: object, overrides: str | None) -> Plan | None:
    from sparkglass.runtime.contract.planner import plan
    from sparkglass.runtime.pipeline import Pipeline

    if isinstance(obj, Plan):
        return obj
    if isinstance(obj, Pipeline):
        return obj.plan(overrides=overrides)
    if isinstance(obj, PipelineDescription):
        return plan(obj, overrides=overrides)
    return None


def _attributes(a: VertexAttributes) -> str:
    parts = []
    if a.no_output_until_end_of_input:
        parts.append("end-of-input")
    if a.idempotent is not None:
        parts.append(f"idempotent({', '.join(a.idempotent.key)})")
    if a.not_cache_record:
        parts.append("not-cache-record")
    return ", ".join(parts) or "-"


def print_plan(planned: Plan, out: Console | None = None) -> None:
    """Print ``planned`` as tables: vertices, edges, phases, then the planner's notes."""
    out = out or console
    vertices = Table(title=f"pipeline {planned.pipeline}: vertices", title_justify="left")
    for col in ("vertex", "kind", "phase", "bounded", "declared", "adjusted", "tap", "fused in"):
        vertices.add_column(col)
    for v in planned.vertices:
        adjusted = _attributes(v.adjusted)
        if v.inherited_from:
            adjusted += f" (from {v.inherited_from})"
        if v.materialize:
            adjusted += ", materialized"
        if v.latest_per_key:
            adjusted += ", latest per key"
        vertices.add_row(
            v.name,
            v.kind.value,
            str(v.phase),
            "yes" if v.bounded else "no",
            _attributes(v.declared),
            adjusted,
            v.tap.value,
            v.fusion_group or "-",
        )
    out.print(vertices)
    edges = Table(title="edges", title_justify="left")
    for col in ("upstream", "downstream", "kind", "fused"):
        edges.add_column(col)
    for e in planned.edges:
        edges.add_row(e.upstream, e.downstream, e.kind.value, "yes" if e.fused else "")
    out.print(edges)
    phases = Table(title="phases (each starts after the previous one's blocking outputs)",
                   title_justify="left")  # fmt: skip
    for col in ("phase", "steps", "waits for", "materializes", "batch sinks", "streaming queries"):
        phases.add_column(col)
    for p in planned.phases:
        phases.add_row(
            str(p.index),
            ", ".join(p.steps) or "-",
            ", ".join(p.waits_for) or "-",
            ", ".join(p.materializes) or "-",
            ", ".join(p.batch_sinks) or "-",
            ", ".join(p.streaming_sinks) or "-",
        )
    out.print(phases)
    notes = [(v.name, n) for v in planned.vertices for n in v.notes]
    if notes:
        out.print("notes:")
        for name, note in notes:
            out.print(f"  {name}: {note}", highlight=False, markup=False)

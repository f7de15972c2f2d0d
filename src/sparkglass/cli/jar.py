"""``sparkglass jar build -o PATH``: the sampling jar, for container images and spark-submit."""

from __future__ import annotations

from pathlib import Path

import typer

jar_app = typer.Typer(
    name="jar",
    help=(
        "The sampling jar (the JVM half of the tap), compiled from the Java source shipped "
        "in the package against the installed pyspark's jars.\n\n"
        "Example: `sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar`"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def register(app: typer.Typer) -> None:
    """Add the ``jar`` command group to ``app``."""
    app.add_typer(jar_app, name="jar")


@jar_app.command(
    "build",
    help=(
        "Compile the sampling jar with javac against the installed pyspark's jars and write "
        "it to PATH. Use it with `--jars PATH --conf "
        "spark.plugins=io.sparkglass.sampling.SamplingPlugin`.\n\n"
        "Example: `sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar`"
    ),
)
def build(
    out: Path = typer.Option(..., "-o", "--output", help="Where to write the jar."),
) -> None:
    from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, build_jar

    path = build_jar(out)
    typer.echo(f"{path}  (plugin class {PLUGIN_CLASS})")

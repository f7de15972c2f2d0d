"""``sparkglass pipelines run``: a Spark Declarative Pipeline run with sampling on.

Wraps ``spark-pipelines run``. Two pyspark traps shape it (docs/pipelines.md): with
``--remote local`` pyspark replaces ``spark.plugins`` and passes the submit confs in groups
of 10, each replacing the one before, so a jar, plugin or extension given with ``--conf`` may
silently vanish: the sampling jar, plugin (``spark.plugins.defaultList``), extension and
confs go into a spark-defaults.conf in a temporary conf dir (the user's own conf dir is
copied into it first), which survives. And SDP forbids ``spark.udf.register*`` while it
imports definitions, so the taps come from the session extension, not from Python.
Everything else on the command line (``--spec``, ``--full-refresh``, ``--conf``, …) goes to
``spark-pipelines`` unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import typer

pipelines_app = typer.Typer(
    name="pipelines",
    help=(
        "Spark Declarative Pipelines with sampling: every dataset and flow is a vertex.\n\n"
        "Example: `sparkglass pipelines run --spec examples/sdp-flights/spark-pipeline.yml`"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

#: The class ``spark-pipelines`` runs (it routes spark-submit args and pipeline args).
LAUNCHER = "org.apache.spark.deploy.SparkPipelines"
#: Keys whose values are lists: ours are appended to the user's.
_LIST_KEYS = ("spark.jars", "spark.plugins.defaultList", "spark.sql.extensions")


def register(app: typer.Typer) -> None:
    """Add the ``pipelines`` command group to ``app``."""
    app.add_typer(pipelines_app, name="pipelines")


def read_defaults(path: Path) -> dict[str, str]:
    """The entries of a spark-defaults.conf, read as Spark reads it (``java.util.Properties``:
    ``key value``, ``key=value`` or ``key:value``; ``#``/``!`` comment lines; a backslash
    escapes the next character, ``\\uXXXX`` included; a line ending in a backslash goes on).
    """
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + (raw.lstrip() if pending else raw.strip())
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd run of backslashes: the line continues
            pending = line[:-1]
            continue
        pending = ""
        logical.append(line)
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split_entry(line)
        out[key] = value
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}


def _split_entry(line: str) -> tuple[str, str]:
    """One logical Properties line → (key, value), both unescaped."""
    key, i = _read_unescaped(line, 0, stops=" \t\f=:")
    while i < len(line) and line[i] in " \t\f":
        i += 1
    if i < len(line) and line[i] in "=:":
        i += 1
        while i < len(line) and line[i] in " \t\f":
            i += 1
    value, _ = _read_unescaped(line, i, stops="")
    return key, value


def _read_unescaped(line: str, i: int, *, stops: str) -> tuple[str, int]:
    """The unescaped text of ``line`` from ``i`` up to an unescaped character of ``stops``
    (or the end), and the index where it stopped."""
    out: list[str] = []
    while i < len(line) and line[i] not in stops:
        if line[i] == "\\" and i + 1 < len(line):
            out.append(_unescape_at(line, i))
            i += 6 if line[i + 1] == "u" else 2
            continue
        out.append(line[i])
        i += 1
    return "".join(out), i


def _unescape_at(line: str, i: int) -> str:
    nxt = line[i + 1]
    if nxt == "u":
        return chr(int(line[i + 2 : i + 6], 16))
    return _ESCAPES.get(nxt, nxt)


def sampling_defaults(
    user: Mapping[str, str], jar: Path, sampling: Mapping[str, str]
) -> dict[str, str]:
    """``user``'s defaults plus the sampling jar, plugin, extension and ``sampling`` confs."""
    from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
    from sparkglass.runtime.sampling.jar import PLUGIN_CLASS

    out = dict(user)
    ours = {
        "spark.jars": str(jar),
        "spark.plugins.defaultList": PLUGIN_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
    }
    for key, value in ours.items():
        existing = [v.strip() for v in out.get(key, "").split(",") if v.strip()]
        if value not in existing:
            existing.append(value)
        out[key] = ",".join(existing)
    out.setdefault("spark.sparkglass.sampling.enabled", "true")
    out.update(sampling)
    return out


def write_conf_dir(target: Path, defaults: Mapping[str, str], user_dir: Path | None) -> None:
    """A conf dir: the user's files (if any), and ``defaults`` as spark-defaults.conf."""
    if user_dir is not None and user_dir.is_dir():
        for item in user_dir.iterdir():
            if item.is_file() and item.name != "spark-defaults.conf":
                shutil.copy2(item, target / item.name)
    lines = [
        f"{properties_escape(key, key=True)} {properties_escape(value)}"
        for key, value in defaults.items()
    ]
    (target / "spark-defaults.conf").write_text("\n".join(lines) + "\n", encoding="utf-8")


def properties_escape(text: str, *, key: bool = False) -> str:
    """``text`` escaped for a ``java.util.Properties`` file (spark-defaults.conf is read with
    ``Properties.load``, where a backslash escapes the next character): a JSON value such as
    ``{"key":["a\\"b"]}`` reaches the driver as written. Keys also escape the separators."""
    out = (
        text.replace("\\", "\\\\")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
        .replace("\f", "\\f")
    )
    if key:
        for ch in " =:#!":
            out = out.replace(ch, "\\" + ch)
    elif out[:1] == " ":
        out = "\\" + out  # Properties drops the blanks that start a value
    return out


def overrides_conf(text: str) -> str:
    """Attribute overrides (YAML text, see ``parse_overrides``) as the one-line JSON value of
    ``spark.sparkglass.pipeline.attributes`` (a spark-defaults.conf value is one line).
    Raises ``typer.BadParameter`` naming the problem (unknown attribute, wrong type…)."""
    import json

    from sparkglass.runtime.contract.attributes import parse_overrides
    from sparkglass.runtime.contract.errors import PlanError

    try:
        parsed = parse_overrides(text)
    except PlanError as exc:
        raise typer.BadParameter(str(exc), param_hint="--attributes") from None
    vertices = [
        {"name": vertex, "attributes": {field: _jsonable(v) for field, v in update.items()}}
        for vertex, update in parsed.items()
    ]
    return json.dumps({"pipeline": {"vertices": vertices}}, separators=(",", ":"))


def _jsonable(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def launcher_command(entry: Path, args: Sequence[str]) -> list[str]:
    """``spark-class SparkPipelines <entry> run <args>`` with the installed pyspark's script."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    return [str(spark_class), LAUNCHER, str(entry), "run", *args]


ENTRY = "from sparkglass.runtime.sampling.sdp import main\n\nmain()\n"


def _spec_arg(args: list[str]) -> str | None:
    """The value of ``--spec`` among ``spark-pipelines run``'s arguments, if given."""
    for i, arg in enumerate(args):
        if arg == "--spec" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--spec="):
            return arg.split("=", 1)[1]
    return None


def _check_spec(args: list[str]) -> None:
    """Read the pipeline spec as ``spark-pipelines`` will (its own functions), before a JVM
    starts: a spec it cannot use is one line naming the file and what is wrong (the YAML
    error's line and column, or the field), not a traceback seconds later."""
    from . import fail

    try:
        from pyspark.errors import PySparkException
        from pyspark.pipelines.cli import find_pipeline_spec, unpack_pipeline_spec
    except ImportError:  # a pyspark without Declarative Pipelines: spark-pipelines says so
        return
    import yaml

    given = _spec_arg(args)
    try:
        path = Path(given) if given else find_pipeline_spec(Path.cwd())
    except PySparkException as exc:
        raise fail(str(exc)) from None
    if not path.is_file():
        raise fail(f"--spec: no such file: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise fail(f"{path}: not valid YAML{at}: {problem}") from None
    if not isinstance(data, dict):
        raise fail(
            f"{path}: expected a mapping of pipeline fields (name, storage, libraries, ...), "
            f"found {type(data).__name__}"
        )
    try:
        unpack_pipeline_spec(data)
    except PySparkException as exc:
        raise fail(f"{path}: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:
        # A library entry without glob.include, or a value of the wrong shape.
        raise fail(
            f"{path}: libraries: each entry needs glob: {{include: PATTERN}} ({exc!r})"
        ) from None


@pipelines_app.command(
    "run",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help=(
        "Run a Spark Declarative Pipeline with `spark-pipelines run`, sampling on: the "
        "sampling jar, plugin and session extension are loaded through a spark-defaults.conf, "
        "and the run's datasets and flows are served on a control endpoint (its URL is "
        "printed). Other arguments go to `spark-pipelines run` unchanged.\n\n"
        "Example: `sparkglass pipelines run --spec examples/sdp-flights/spark-pipeline.yml "
        "--hold 60`"
    ),
)
def run(
    ctx: typer.Context,
    sampling_conf: list[str] = typer.Option(
        [],
        "--sampling-conf",
        help="A spark.sparkglass.* KEY=VALUE for the run (repeatable), e.g. "
        "spark.sparkglass.sampling.max-sample-rate=50.",
    ),
    hold: float = typer.Option(
        0.0, "--hold", min=0, help="Seconds to keep serving the datasets after the run ended."
    ),
    name: str = typer.Option("pipeline", "--name", help="The pipeline's name in descriptions."),
    attributes: Path | None = typer.Option(
        None,
        "--attributes",
        exists=True,
        dir_okay=False,
        help="A YAML file of per-vertex attribute overrides, shaped like a SparkApplication's "
        "`pipeline.vertices` (`[{name: carrier-delays, attributes: "
        "{noOutputUntilEndOfInput: true}}]`); shown in the vertex descriptions.",
    ),
) -> None:
    from sparkglass.runtime.contract.attributes import OVERRIDES_CONF
    from sparkglass.runtime.sampling.jar import sampling_jar
    from sparkglass.runtime.sampling.sdp import HOLD_ENV

    sampling: dict[str, str] = {}
    for item in sampling_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("spark.sparkglass."):
            raise typer.BadParameter(
                f"{item!r}: expected spark.sparkglass.KEY=VALUE", param_hint="--sampling-conf"
            )
        sampling[key] = value
    if attributes is not None:
        sampling[OVERRIDES_CONF] = overrides_conf(attributes.read_text())
    _check_spec(list(ctx.args))
    user_dir_env = os.environ.get("SPARK_CONF_DIR")
    user_dir = Path(user_dir_env) if user_dir_env else None
    user = read_defaults(user_dir / "spark-defaults.conf") if user_dir else {}
    with tempfile.TemporaryDirectory(prefix="sparkglass-sdp-") as tmp:
        conf_dir = Path(tmp)
        write_conf_dir(conf_dir, sampling_defaults(user, sampling_jar(), sampling), user_dir)
        entry = conf_dir / "sparkglass_pipelines.py"
        entry.write_text(ENTRY)
        env = {
            **os.environ,
            "SPARK_CONF_DIR": str(conf_dir),
            HOLD_ENV: str(hold),
            "SPARKGLASS_PIPELINE_NAME": name,
        }
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        proc = subprocess.run(launcher_command(entry, list(ctx.args)), env=env, check=False)
    raise typer.Exit(proc.returncode)

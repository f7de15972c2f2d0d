"""``sparkglass pipelines run``: the spark-defaults.conf it writes and its checks of the
attribute overrides (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkglass.cli import _register, app
from sparkglass.cli.pipelines import (
    overrides_conf,
    read_defaults,
    sampling_defaults,
    write_conf_dir,
)
from sparkglass.runtime.contract.attributes import OVERRIDES_CONF, parse_overrides
from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
from sparkglass.runtime.sampling.jar import PLUGIN_CLASS


def test_the_users_defaults_are_kept_and_ours_appended(tmp_path: Path) -> None:
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    (user_dir / "spark-defaults.conf").write_text(
        "# mine\nspark.jars /opt/a.jar\nspark.sql.extensions=com.example.Ext\n"
        "spark.executor.memory   2g\n"
    )
    (user_dir / "log4j2.properties").write_text("rootLogger.level = warn\n")
    user = read_defaults(user_dir / "spark-defaults.conf")
    assert user == {
        "spark.jars": "/opt/a.jar",
        "spark.sql.extensions": "com.example.Ext",
        "spark.executor.memory": "2g",
    }
    merged = sampling_defaults(
        user, Path("/j/sg.jar"), {"spark.sparkglass.sampling.max-sample-rate": "50"}
    )
    assert merged["spark.jars"] == "/opt/a.jar,/j/sg.jar"
    assert merged["spark.sql.extensions"] == f"com.example.Ext,{EXTENSIONS_CLASS}"
    assert merged["spark.plugins.defaultList"] == PLUGIN_CLASS
    assert merged["spark.sparkglass.sampling.enabled"] == "true"
    assert merged["spark.sparkglass.sampling.max-sample-rate"] == "50"
    out = tmp_path / "out"
    out.mkdir()
    write_conf_dir(out, merged, user_dir)
    assert read_defaults(out / "spark-defaults.conf") == merged
    assert (out / "log4j2.properties").read_text() == "rootLogger.level = warn\n"


def test_sampling_can_be_turned_off_for_a_run() -> None:
    off = {"spark.sparkglass.sampling.enabled": "false"}
    merged = sampling_defaults({}, Path("/j/sg.jar"), off)
    assert merged["spark.sparkglass.sampling.enabled"] == "false"
    assert sampling_defaults(merged, Path("/j/sg.jar"), {})["spark.jars"] == "/j/sg.jar"


def test_attribute_overrides_become_one_conf_line_and_bad_ones_fail_before_the_run(
    tmp_path: Path,
) -> None:
    text = (
        "- name: carrier-delays\n"
        "  attributes:\n"
        "    noOutputUntilEndOfInput: true\n"
        "    idempotent: {key: [carrier]}\n"
        "- name: origin-counts\n"
        "  attributes: {idempotent: null}\n"
    )
    line = overrides_conf(text)
    assert "\n" not in line
    assert parse_overrides(line) == parse_overrides(text)
    merged = sampling_defaults({}, Path("/j/sg.jar"), {OVERRIDES_CONF: line})
    write_conf_dir(tmp_path, merged, None)
    assert parse_overrides(read_defaults(tmp_path / "spark-defaults.conf")[OVERRIDES_CONF]) == (
        parse_overrides(text)
    )
    # An unknown attribute fails the command before anything is launched.
    bad = tmp_path / "bad.yml"
    bad.write_text("- name: carrier-delays\n  attributes: {noOutputUntil: true}\n")
    _register()
    result = CliRunner().invoke(
        app, ["pipelines", "run", "--attributes", str(bad)], terminal_width=200
    )
    assert result.exit_code == 2, result.output
    assert "noOutputUntil" in result.output and "carrier-delays" in result.output


def test_overrides_nested_too_deeply_or_too_long_are_a_clear_error() -> None:
    import pytest

    from sparkglass.runtime.contract.attributes import MAX_OVERRIDES_CHARS
    from sparkglass.runtime.contract.errors import PlanError

    for deep in ("[" * 5_000 + "]" * 5_000, "a: " * 5_000 + "1"):
        with pytest.raises(PlanError, match=r"nested too deeply|not valid YAML"):
            parse_overrides(deep)
    with pytest.raises(PlanError, match=f"allowed at most {MAX_OVERRIDES_CHARS}"):
        parse_overrides("#" * (MAX_OVERRIDES_CHARS + 1))
    import typer

    with pytest.raises(typer.BadParameter, match="nested too deeply"):
        overrides_conf("[" * 5_000 + "]" * 5_000)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("name: x\nlibraries:\n  - glob:\n      include: [a/**\n", "not valid YAML at line 5"),
        ("name: x\n", "storage"),
        ("name: x\nstorage: /tmp/s\nbogus: 1\n", "bogus"),
        ("name: x\nstorage: /tmp/s\nlibraries:\n  - include: a.py\n", "glob: {include"),
        ("- a\n", "expected a mapping"),
    ],
)
def test_a_spec_spark_pipelines_cannot_use_is_one_line_before_any_jvm(
    tmp_path: Path, spec: str, says: str
) -> None:
    """Read with spark-pipelines' own functions first: the file and what is wrong, at once,
    not a Python traceback from the launched JVM's process seconds later."""
    path = tmp_path / "spark-pipeline.yml"
    path.write_text(spec)
    _register()
    result = CliRunner().invoke(app, ["pipelines", "run", "--spec", str(path)])
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert str(path) in text.replace(" ", "") or path.name in text, text
    assert says in text and "Traceback" not in text, text

"""``sparkglass pipelines run``: the spark-defaults.conf it writes (no Spark needed)."""

from __future__ import annotations

from pathlib import Path

from sparkglass.cli.pipelines import read_defaults, sampling_defaults, write_conf_dir
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

"""The spark-defaults.conf that ``sparkglass pipelines run`` writes is read by Spark with
``java.util.Properties``, where a backslash escapes: every value must reach the JVM as
written (an attribute override holding a quote or a backslash was silently dropped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkglass.cli.pipelines import overrides_conf, read_defaults, write_conf_dir
from sparkglass.runtime.contract.attributes import OVERRIDES_CONF, parse_overrides

pytestmark = pytest.mark.spark


def java_properties(spark: Any, path: Path) -> dict[str, str]:
    """``path`` loaded as Spark loads spark-defaults.conf (UTF-8 reader, Properties.load)."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    reader = jvm.java.io.InputStreamReader(jvm.java.io.FileInputStream(str(path)), "UTF-8")
    try:
        props.load(reader)
    finally:
        reader.close()
    return {str(k): str(props.getProperty(k)) for k in props.stringPropertyNames()}


def test_values_with_quotes_backslashes_and_blanks_reach_the_jvm_as_written(
    spark: Any, tmp_path: Path
) -> None:
    overrides = (
        "- name: carrier-delays\n"
        "  attributes:\n"
        "    idempotent: {key: ['odd\"col', 'back\\\\slash', 'tab\\there']}\n"
    )
    values = {
        OVERRIDES_CONF: overrides_conf(overrides),
        "spark.sparkglass.test.lead": "  two leading blanks",
        "spark.sparkglass.test.seps": "a=b:c #d !e",
        "spark.sparkglass.test.unicode": "Zürich → 東京",
        "spark.sparkglass.test.windows": "C:\\data\\new",
    }
    write_conf_dir(tmp_path, values, None)
    conf = tmp_path / "spark-defaults.conf"
    assert java_properties(spark, conf) == values
    assert read_defaults(conf) == values  # our reader agrees with Java's
    # The override parses on the driver to what the file said.
    assert parse_overrides(java_properties(spark, conf)[OVERRIDES_CONF]) == parse_overrides(
        overrides
    )


def test_a_users_escaped_defaults_survive_a_read_and_write(spark: Any, tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "spark-defaults.conf").write_text(
        "spark.a C:\\\\dir\\\\x\n"
        "spark.b = one \\\n"
        "    two\n"
        "spark.c:\\u00e9t\\u00e9\n"
        "! a comment\n"
        "spark.d\n",
        encoding="utf-8",
    )
    expected = java_properties(spark, user / "spark-defaults.conf")
    assert read_defaults(user / "spark-defaults.conf") == expected
    out = tmp_path / "out"
    out.mkdir()
    write_conf_dir(out, read_defaults(user / "spark-defaults.conf"), user)
    assert java_properties(spark, out / "spark-defaults.conf") == expected

"""`sparkglass sample` against a real control endpoint, `sparkglass jar build`, the jar cache."""

from __future__ import annotations

import json
import zipfile

import pyspark
import pytest
import typer
from typer.testing import CliRunner

from sparkglass import __version__
from sparkglass.cli import jar as jar_cli
from sparkglass.cli import sample as sample_cli
from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from sparkglass.runtime.control.endpoint import ControlEndpoint, ControlSettings
from sparkglass.runtime.sampling import jar
from sparkglass.runtime.sampling.rounds import RoundCoordinator, TapInfo

TOKEN = "cli-token"


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test app"""

    sample_cli.register(app)
    jar_cli.register(app)
    return app


@pytest.fixture
def endpoint(transport, make_partition):
    transport.auto_report = {"1": [make_partition(0, 2), make_partition(3, 1)], "2": []}
    c = RoundCoordinator(
        transport,
        lambda: SamplingSettings(enabled=True, sampling_window_ms=1000),
        round_prefix="7",
        check_interval_s=0.01,
    )
    c.register_tap(TapInfo("parse", "k", "struct<p:int,i:int>"))
    ep = ControlEndpoint(c, ControlSettings(token=TOKEN))
    ep.start()
    yield ep
    ep.stop()
    c.close()


def test_sample_json_waits_for_the_round(app, endpoint):
    result = CliRunner().invoke(
        app, ["sample", "parse", "--endpoint", endpoint.url, "--token", TOKEN, "--json"]
    )
    assert result.exit_code == 0, result.output
    # stdout only: a log line another test's handler writes to stderr must not break the JSON.
    body = json.loads(result.stdout)
    assert body["status"] == "COMPLETE" and body["totalRecordCount"] == 3
    assert body["samples"][1]["subtaskIndex"] == 3


def test_sample_table_and_filters(app, endpoint):
    runner = CliRunner()
    args = ["sample", "parse", "--endpoint", endpoint.url, "--token", TOKEN]
    result = runner.invoke(app, [*args, "--subtask", "0", "--max-records", "1"])
    assert result.exit_code == 0, result.output
    assert "COMPLETE" in result.output and '{"p":0,"i":0}' in result.output
    assert '{"p":0,"i":1}' not in result.output and "truncated" in result.output


def test_sample_errors(app, endpoint):
    runner = CliRunner()
    bad = runner.invoke(app, ["sample", "parse", "--endpoint", endpoint.url, "--token", "no"])
    assert bad.exit_code == 1 and "HTTP 401" in bad.output
    unknown = runner.invoke(app, ["sample", "nope", "--endpoint", endpoint.url, "--token", TOKEN])
    assert unknown.exit_code == 1 and "no vertex 'nope'" in unknown.output
    down = runner.invoke(
        app, ["sample", "parse", "--endpoint", "http://127.0.0.1:9", "--token", "t"]
    )
    assert down.exit_code == 1 and "cannot reach" in down.output


def test_jar_build_command(app, tmp_path):
    out = tmp_path / "img" / "sparkglass-sampling.jar"
    result = CliRunner().invoke(app, ["jar", "build", "-o", str(out)])
    assert result.exit_code == 0, result.output
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    assert "io/sparkglass/sampling/SamplingPlugin.class" in names
    assert "io/sparkglass/sampling/GateUdf.class" in names
    assert f"Source-Hash: {jar.source_hash()}" in manifest
    assert f"Spark-Version: {pyspark.__version__}" in manifest
    # Readable by all: a jar built as root in an image is loaded by a non-root driver.
    assert out.stat().st_mode & 0o777 == 0o644


def test_jar_cache_is_keyed_by_versions_and_source():
    path = jar.cached_jar_path()
    assert __version__ in path.name and pyspark.__version__ in path.name
    assert jar.source_hash() in path.name
    built = jar.sampling_jar()  # the shared Spark session normally built it already
    assert built == path and built.is_file()
    stamp = built.stat().st_mtime_ns
    assert jar.sampling_jar().stat().st_mtime_ns == stamp  # cached, not rebuilt


def test_javac_errors_are_reported(tmp_path, monkeypatch):
    broken = tmp_path / "jvm"
    broken.mkdir()
    (broken / "Broken.java").write_text("class Broken { int x = ; }")
    monkeypatch.setattr(jar, "JAVA_SOURCE_ROOT", broken)
    with pytest.raises(jar.JarBuildError, match="javac failed"):
        jar.build_jar(tmp_path / "x.jar")


def test_render_sample_limits_records():
    from rich.console import Console

    body = {
        "status": "PARTIAL",
        "roundId": "1-1",
        "totalRecordCount": 3,
        "errorCode": "EXECUTOR_UNREACHABLE",
        "failedSubtasks": [2],
        "samples": [
            {
                "subtaskIndex": 0,
                "records": [
                    {
                        "sampleTimestamp": 1000 + i,
                        "data": f'{{"i":{i}}}',
                        "dataType": "struct<i:int>",
                    }
                    for i in range(3)
                ],
            }
        ],
    }
    console = Console(record=True, width=120)
    console.print(sample_cli.render_sample("parse", body, limit=2))
    text = console.export_text()
    assert "PARTIAL" in text and "EXECUTOR_UNREACHABLE" in text and "[2]" in text
    assert '{"i":1}' in text and '{"i":2}' not in text


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("NO_MICRO_BATCH", "ran no micro-batch during the round"),
        ("NO_ROWS", "emitted no row"),
        ("QUERY_NOT_ACTIVE", "no streaming query"),
    ],
)
def test_render_sample_says_why_there_is_no_data(reason: str, said: str) -> None:
    from rich.console import Console

    body = {
        "status": "NO_DATA",
        "roundId": "1-2",
        "noDataReason": reason,
        "lastMicroBatchTimestamp": 1_700_000_000_000,
        "samples": [],
    }
    console = Console(record=True, width=160)
    console.print(sample_cli.render_sample("parse", body))
    text = console.export_text()
    assert "NO_DATA" in text and said in text
    assert "last micro-batch ended 2023-11-14 22:13:20 UTC" in text


def test_sample_with_sampling_off_says_how_to_turn_it_on(app, transport):
    c = RoundCoordinator(transport, lambda: SamplingSettings(enabled=False), round_prefix="8")
    c.register_tap(TapInfo("parse", "k", "struct<p:int,i:int>"))
    ep = ControlEndpoint(c, ControlSettings(token=TOKEN))
    ep.start()
    try:
        out = CliRunner().invoke(
            app, ["sample", "parse", "--endpoint", ep.url, "--token", TOKEN, "--json"]
        )
    finally:
        ep.stop()
        c.close()
    assert out.exit_code == 1, out.output
    assert json.loads(out.stdout)["status"] == "DISABLED"
    assert "spark.sparkglass.sampling.enabled=true" in out.stderr

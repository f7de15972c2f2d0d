"""Run by test_clean_stop.py in its own process: stop a pipeline while a micro-batch is
running (each takes about 2 s). Spark's log lines go to this process's stderr, which the test
reads; prints one JSON line when stopped."""

from __future__ import annotations

import json
import time

from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.session import spark_session


def main() -> None:
    spark = spark_session("sparkglass-clean-stop", master="local[2]")
    p = Pipeline("stopping", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .option("numPartitions", 1)
        .load(),
    )
    # 100 ms per row: a micro-batch of ~20 rows runs about 2 s, so the stop lands inside one.
    p.vertex(
        "slow",
        "ticks",
        lambda df: df.selectExpr(
            "value", "reflect('java.lang.Thread', 'sleep', CAST(100 AS BIGINT)) AS slept"
        ),
    )
    p.sink("out", "slow", lambda df: df.writeStream.format("noop"))
    p.start()
    (query,) = p.queries.values()
    deadline = time.monotonic() + 120
    while p.progress().micro_batches < 1 or not query.status["isTriggerActive"]:
        if time.monotonic() > deadline:
            raise SystemExit("no running micro-batch to stop")
        time.sleep(0.05)
    began = time.monotonic()
    p.stop()
    print(
        json.dumps({"stopped": not query.isActive, "seconds": round(time.monotonic() - began, 1)}),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()

"""Run by test_micro_batch_rounds.py in its own process (local-cluster[2,1,1024]): a stream
whose micro-batches run 5 s apart, sampled by 10 rounds in a row with a 2 s window (the
defaults otherwise). Prints one JSON line: each round's status, record count and duration.
"""

from __future__ import annotations

import json
import sys
import time

from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.session import spark_session

ROUNDS = 10
_T0 = time.monotonic()


def _mark(what: str) -> None:
    print(f"{time.monotonic() - _T0:6.1f}s {what}", file=sys.stderr, flush=True)


def main() -> None:
    spark = spark_session(
        "sparkglass-sparse-micro-batches",
        master="local-cluster[2,1,1024]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.executor.memory": "512m",
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.sampling.sampling-window": "2s",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    _mark("session up")
    p = Pipeline("sparse", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate")
        .option("rowsPerSecond", 20)
        .option("numPartitions", 2)
        .load(),
    )
    p.vertex("parse", "ticks", lambda df: df.selectExpr("value", "value % 7 AS bucket"))
    p.sink(
        "out",
        "parse",
        lambda df: df.writeStream.format("noop").trigger(processingTime="5 seconds"),
    )
    p.start()
    rounds = []
    try:
        coordinator = registry.coordinator_for(spark)
        deadline = time.monotonic() + 180
        while p.progress().micro_batches < 1:  # the first micro-batch plans the query
            if time.monotonic() > deadline:
                raise SystemExit(f"no micro-batch in 180 s: {p.progress()}")
            time.sleep(0.2)
        for i in range(ROUNDS):
            began = time.monotonic()
            result = coordinator.sample_vertices(["parse"], timeout_s=60)["parse"]
            rounds.append(
                {
                    "status": result.status.value,
                    "records": result.total_record_count,
                    "noDataReason": result.no_data_reason,
                    "seconds": round(time.monotonic() - began, 1),
                }
            )
            _mark(f"round {i + 1}: {rounds[-1]}")
    finally:
        p.stop()
        spark.stop()
    print(json.dumps({"rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()

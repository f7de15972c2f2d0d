"""A plain Structured Streaming job for tests/sampling/test_plain_streaming.py.

It never uses the sparkglass DSL: spark-submit gives it the sampling jar, the plugin, the
session extension and the confs; its only sparkglass line is ``sparkglass.runtime.attach``.
It prints JSON lines (``{"event": ...}``) and takes commands from the file
``$SG_JOB_COMMANDS`` (spark-submit gives a Python driver no stdin; ``$SG_JOB_SQL``, when set,
is the query ``doubler`` runs over the view ``ticks``): ``fault`` (start a round
whose program cannot be read, so every gate of the query's tap throws), ``stop``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import sparkglass.runtime


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def jvm_json(spark: SparkSession, cls: str) -> dict[str, Any]:
    return dict(json.loads(getattr(spark._jvm, f"io.sparkglass.extensions.{cls}").json()))


def wait(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            emit("error", message=f"timed out waiting for {what}")
            sys.exit(1)
        time.sleep(0.1)


def commands(path: Path) -> Iterator[str]:
    """Each command written to ``path`` (the test renames it into place; we delete it)."""
    while True:
        if path.exists():
            command = path.read_text().strip()
            path.unlink()
            yield command
        time.sleep(0.1)


def main() -> None:
    spark = SparkSession.builder.getOrCreate()
    rate = spark.readStream.format("rate").option("rowsPerSecond", 50)
    rate.option("numPartitions", 2).load().createOrReplaceTempView("ticks")
    query = (
        spark.sql(os.environ.get("SG_JOB_SQL", "SELECT value, value * 2 AS doubled FROM ticks"))
        .writeStream.format("noop")
        .queryName("doubler")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    pipeline = sparkglass.runtime.attach(spark)
    wait(lambda: query.lastProgress is not None, "the first micro-batch")
    from sparkglass.runtime.sampling.registry import endpoint_for

    endpoint = endpoint_for(spark)
    emit(
        "ready",
        attached=pipeline is not None,
        url=endpoint.url if endpoint is not None else None,
        plan=str(query._jsq.explainInternal(False)),
        taps=[t["tapKey"] for t in jvm_json(spark, "DiscoveredTaps")["taps"]],
        dslImported="sparkglass.runtime.pipeline" in sys.modules,
    )
    for command in commands(Path(os.environ["SG_JOB_COMMANDS"])):
        if command == "stop":
            break
        if command == "fault":
            from sparkglass.runtime.contract.sampling_settings import settings_from_spark
            from sparkglass.runtime.sampling.registry import REGISTRY

            before = jvm_json(spark, "DiscoveredTaps")["tapErrors"]
            batch_before = query.lastProgress["batchId"]
            REGISTRY.application(spark).transport.start_round(
                "fault-1", "query/doubler", settings_from_spark(spark), 3000, "bm90IGEgcHJvZ3JhbQ=="
            )
            wait(lambda b=before: jvm_json(spark, "DiscoveredTaps")["tapErrors"] > b, "a tap error")
            wait(lambda b=batch_before: query.lastProgress["batchId"] >= b + 3, "3 micro-batches")
            after = jvm_json(spark, "DiscoveredTaps")
            emit(
                "fault",
                tapErrorsBefore=before,
                tapErrors=after["tapErrors"],
                lastTapError=after["lastTapError"],
                active=query.isActive,
                exception=str(query.exception()) if query.exception() else None,
                batches=query.lastProgress["batchId"] - batch_before,
            )
    query.stop()
    spark.stop()
    emit("stopped")


if __name__ == "__main__":
    main()

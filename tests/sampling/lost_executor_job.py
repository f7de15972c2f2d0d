"""Run by test_executor_lost.py in its own process: a round on local-cluster[2,1,1024] while
one executor JVM is killed. Prints one JSON line: the round's result and the killed executor.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import jvm_transport, registry
from sparkglass.runtime.session import spark_session

_T0 = time.monotonic()
#: How long after a round starts both executors must have captured: well inside the
#: 15 s window, so that the kill lands while the round still captures.
_KILL_BY_S = 10


def _mark(what: str) -> None:
    print(f"{time.monotonic() - _T0:6.1f}s {what}", file=sys.stderr, flush=True)


def main() -> None:
    spark = spark_session(
        "sparkglass-lost-executor",
        master="local-cluster[2,1,1024]",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.executor.memory": "512m",
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.sampling.sampling-window": "15s",
            "spark.sparkglass.sampling.max-sample-rate": "20",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    _mark("session up")
    p = Pipeline("lost", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .option("numPartitions", 4)
        .load(),
    )
    p.vertex("parse", "ticks", lambda df: df.selectExpr("value", "value * 3 AS tripled"))
    p.sink(
        "out",
        "parse",
        lambda df: df.writeStream.format("noop").trigger(processingTime="300 milliseconds"),
    )
    p.start()
    try:
        coordinator = registry.coordinator_for(spark)
        transport = coordinator.transport
        assert isinstance(transport, jvm_transport.JvmTransport)
        # The default 15 s, shortened for the test; not below 8 s, so that a survivor whose
        # poller stalls on a loaded machine is not declared lost too.
        transport.set_liveness_ms(8000)
        deadline = time.monotonic() + 120
        while True:
            executors = {k: v for k, v in transport.executors().items() if k != "driver"}
            if len(executors) >= 2 and p.progress().micro_batches >= 1:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"cluster not ready: {executors} {p.progress()}")
            time.sleep(0.2)
        _mark("cluster ready")
        # Kill an executor once both have captured in this round, so that the round has
        # records from the survivor and partitions to blame on the victim. On a busy machine
        # one executor may not capture before the window closes; such a round proves
        # nothing, so it is let run out and another one is started.
        for attempt in range(1, 6):
            rid = coordinator.start_round("parse").round_id
            assert rid is not None
            deadline = time.monotonic() + _KILL_BY_S
            while True:
                status = transport.round_status(rid)
                progress = status.get("progress", {})
                seen = {e: parts for e, parts in progress.items() if e in executors and parts}
                if len(seen) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            # Checked again after the (possibly slow) status call: the kill must land well
            # inside the window, while the victim still owes its report.
            if len(seen) >= 2 and time.time() * 1000 < status["windowEndMs"] - 3000:
                break
            _mark(f"round {attempt}: only {sorted(seen)} captured in time; another round")
            coordinator.wait(rid, 120)
        else:
            raise SystemExit("no round had both executors capture before its window closed")
        victim = sorted(seen)[0]
        os.kill(int(executors[victim]["pid"]), signal.SIGKILL)
        _mark(f"killed executor {victim} (saw partitions {seen[victim]})")
        result = coordinator.wait(rid, 120)
        _mark("round done")
        print(
            json.dumps({"victim": victim, "seen": seen, "result": result.to_json_dict()}),
            flush=True,
        )
    finally:
        p.stop()
        spark.stop()
        _mark("stopped")


if __name__ == "__main__":
    sys.exit(main())

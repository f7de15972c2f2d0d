"""A Spark job run in a subprocess by ``test_task_retry.py``: ``local[1,3]`` lets Spark
retry failed tasks (``spark.task.maxFailures`` = 3), which the shared ``local[2]`` test
session cannot. Prints one JSON line with what it saw.

Usage: ``python task_retry_job.py <service-url> <report-dir>``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp


def main(url: str, report_dir: str) -> None:
    from sparkglass.runtime.async_ops.async_sink import AsyncSinkWriter, write_partitions
    from sparkglass.runtime.async_ops.async_vertex import AsyncFunction, async_map
    from sparkglass.runtime.session import spark_session

    class Echo(AsyncFunction):
        async def open(self) -> None:
            self.session = aiohttp.ClientSession()

        async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
            async with self.session.get(f"{url}/echo/{record['id']}") as resp:
                resp.raise_for_status()
                return {"id": record["id"], "served": (await resp.json())["served"]}

    class Writer(AsyncSinkWriter[Any]):
        async def send(self, row: Any) -> None:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{url}/echo/w{row['id']}") as resp,
            ):
                resp.raise_for_status()

        def close(self) -> None:
            super().close()
            ctx = self.context
            name = f"{ctx.subtask_id}-{ctx.attempt_number}.json"
            Path(report_dir, name).write_text(
                json.dumps(
                    {
                        "subtask": ctx.subtask_id,
                        "of": ctx.number_of_parallel_subtasks,
                        "attempt": ctx.attempt_number,
                        "completed": self.completed,
                    }
                )
            )

    spark = spark_session(
        "task-retry", master="local[1,3]", conf={"spark.sql.shuffle.partitions": "1"}
    )
    spark.sparkContext.setLogLevel("OFF")
    df = spark.range(0, 50, numPartitions=1)
    # /echo/42 fails twice (the service is configured so): attempts 0 and 1 of its task
    # fail, Spark's third attempt succeeds; no retry strategy is involved.
    rows = async_map(df, Echo(), output_schema="id long, served long").collect()
    # /echo/w7 fails twice: the writer's task is retried the same way.
    write_partitions(df, lambda ctx: Writer(ctx, capacity=5))
    spark.stop()
    print(
        json.dumps(
            {"ids": [r.id for r in rows], "served_42": [r.served for r in rows if r.id == 42]}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

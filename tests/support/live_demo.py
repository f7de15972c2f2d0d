"""The flights demo pipeline with sampling on, fed continuously, the local service in front:
what `make demo` runs, on a free port and a throw-away store, in the shared Spark session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkglass.service.local import LocalService
from tests.support.spark_conf import spark_conf

ENABLED = "spark.sparkglass.sampling.enabled"


@dataclass(frozen=True)
class LiveDemo:
    """The running demo: its service, and its driver's control endpoint."""

    service: LocalService
    driver_url: str
    driver_token: str


@contextmanager
def live_demo(spark: Any, workdir: Path, *, progress_timeout_s: float) -> Iterator[LiveDemo]:
    """Start the demo in ``workdir``; fails when its stream has made no micro-batch within
    ``progress_timeout_s``. Everything stops, and the session's sampling conf is put back,
    on exit."""
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.sampling import registry
    from sparkglass.service.local import start_local_service

    with spark_conf(spark, {ENABLED: "true"}):
        pipeline = build_pipeline(spark, workdir, max_files_per_trigger=1, trigger_seconds=0.5)
        replay = FlightReplay(workdir / "stream", days=365, files_per_tick=1, interval=0.4)
        pipeline.start()
        replay.start()
        service = None
        try:
            deadline = time.monotonic() + progress_timeout_s
            while pipeline.progress().micro_batches < 1:
                assert time.monotonic() < deadline, (
                    f"the demo stream made no progress in {progress_timeout_s:g} s"
                )
                time.sleep(0.2)
            endpoint = registry.endpoint_for(spark)
            assert endpoint is not None, "sampling on but no control endpoint"
            service = start_local_service(
                {"flights": (endpoint.url, endpoint.token)},
                database_url=f"sqlite:///{workdir / 'service.db'}",
                refresh_interval_seconds=30,
                poll_interval_seconds=0.2,
            )
            yield LiveDemo(service, endpoint.url, endpoint.token)
        finally:
            if service is not None:
                service.stop()
            replay.stop()
            pipeline.stop()

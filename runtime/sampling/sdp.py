"""Sampling a Spark Declarative Pipeline run: the driver half of ``sparkglass pipelines run``.

``spark-pipelines run`` is a launcher (``org.apache.spark.deploy.SparkPipelines``) that starts
pyspark's pipelines CLI under spark-submit, with ``--remote local``: that Python process
starts the Spark Connect server's SparkContext in its own JVM through Py4J
(``pyspark.sql.connect.session._start_connect_server``) and keeps that classic session. So
the control endpoint can live there: ``sparkglass pipelines run`` points the launcher at
:func:`main` instead of pyspark's CLI file, and :func:`main` runs pyspark's CLI unchanged
after hooking one function, ``handle_pipeline_events``, which runs once the graph is
registered and the run has started. There it attaches to the classic session
(:func:`sparkglass.runtime.sampling.attach.attach`) with a :class:`SdpGraph`.

The graph: every streaming flow runs as a streaming query named by the flow's identifier
(the extension taps it; its sink is the dataset it writes, its inputs the datasets it
reads); materialized views are batch writes, which the pipeline's events announce. A
dataset whose flow has ended (every flow of a triggered run ends) is sampled from its table:
an end-of-input vertex, each row at most once, as the DSL does for materialized outputs.

``SPARKGLASS_PIPELINES_HOLD`` (seconds) keeps the endpoint serving after the run ended, so
its datasets can still be sampled (the CLI's ``--hold``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from sparkglass.runtime.sampling.discovery import DiscoveredPipeline, Graph, GraphNode, norm

#: Seconds to keep serving after the run ended (set by ``sparkglass pipelines run --hold``).
HOLD_ENV = "SPARKGLASS_PIPELINES_HOLD"
#: Where :func:`main` writes one JSON line with the control endpoint's URL once it serves.
READY_FILE_ENV = "SPARKGLASS_PIPELINES_READY_FILE"
#: The prefix of the line :func:`main` prints with the endpoint's URL.
READY_PREFIX = "sparkglass: control endpoint "

# "Flow spark_catalog.default.carrier_delays has COMPLETED." and the like: the pipeline's
# events carry the flow identifier and its state in their message.
_FLOW_EVENT = re.compile(r"Flow '?(?P<flow>[\w.`]+)'? (?:has |is )?(?P<state>[A-Z_]+)")


class SdpGraph(Graph):
    """The datasets and flows of one run, from the extension's taps and the run's events."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._lock = threading.Lock()
        #: flow identifier -> latest state word (QUEUED, STARTING, RUNNING, COMPLETED, FAILED…)
        self.flow_states: dict[str, str] = {}
        #: flow identifier -> when it completed (ms since the epoch)
        self.completed_at: dict[str, int] = {}
        self.pipeline: DiscoveredPipeline | None = None

    def on_event(self, message: str, at_ms: int) -> None:
        """Note a pipeline event (``handle_pipeline_events`` passes each one)."""
        match = _FLOW_EVENT.search(message)
        if match is None:
            return
        flow, state = norm(match["flow"]), match["state"]
        with self._lock:
            self.flow_states[flow] = state
            if state == "COMPLETED":
                self.completed_at[flow] = at_ms

    def nodes(self) -> Sequence[GraphNode]:
        pipeline = self.pipeline
        taps = {} if pipeline is None else {norm(t.name): t for t in pipeline.discovery.taps}
        writes = {} if pipeline is None else pipeline.discovery.writes
        with self._lock:
            flows = dict(self.flow_states)
            completed = dict(self.completed_at)
        out: list[GraphNode] = []
        for flow in sorted(set(flows) | {k for k, t in taps.items() if t.kind == "query"}):
            tap = taps.get(flow)
            streaming = tap is not None
            # A batch flow (materialized view) has no tap: its write tells what it read.
            inputs = tuple(tap.inputs) if tap is not None else writes.get(flow, ())
            sink = norm(tap.sink) if tap is not None and tap.sink else flow
            # A default flow has its dataset's name: one vertex. A flow into another dataset
            # is a vertex of its own, and the dataset one more, fed by it.
            done = flow in completed
            out.append(
                GraphNode(
                    raw=flow,
                    inputs=inputs,
                    bounded=not streaming,
                    queries=(flow,) if streaming else (),
                    materialized=sink if done and sink == flow else None,
                )
            )
            if sink != flow:
                out.append(
                    GraphNode(
                        raw=sink,
                        inputs=(flow,),
                        bounded=not streaming,
                        tapped_by=(flow,),
                        materialized=sink if done else None,
                    )
                )
        return out

    def written_at_ms(self, table: str) -> int | None:
        with self._lock:
            return self.completed_at.get(norm(table))


def _classic_session() -> Any:
    """The classic session ``_start_connect_server`` created in this process."""
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is None:
        raise RuntimeError("no local Spark Connect server in this process (--remote local?)")
    return session


def _announce(url: str) -> None:
    print(f"{READY_PREFIX}{url}", flush=True)
    ready_file = os.environ.get(READY_FILE_ENV)
    if ready_file:
        staged = ready_file + ".tmp"
        with open(staged, "w") as f:
            json.dump({"url": url}, f)
        os.replace(staged, ready_file)


def main() -> None:
    """pyspark's pipelines CLI, with the run attached to sparkglass (see module docstring)."""
    import pyspark.pipelines.cli as cli

    from sparkglass.runtime.sampling.attach import attach
    from sparkglass.runtime.sampling.registry import endpoint_for

    original = cli.handle_pipeline_events

    def handle(results: Iterator[dict[str, Any]]) -> None:
        spark = _classic_session()
        graph = SdpGraph(spark)
        pipeline = attach(spark, name=_pipeline_name(), graph=graph)
        graph.pipeline = pipeline
        endpoint = endpoint_for(spark)
        if endpoint is not None:
            _announce(endpoint.url)
        original(_noting(results, graph))
        hold = float(os.environ.get(HOLD_ENV, "0") or 0)
        if pipeline is not None and hold > 0:
            pipeline.refresh()
            print(f"sparkglass: run ended; serving its datasets for {hold:g} s", flush=True)
            time.sleep(hold)

    cli.handle_pipeline_events = handle  # type: ignore[assignment]  # same call, other arg name
    sys.argv[0] = cli.__file__
    cli.main()


def _pipeline_name() -> str:
    return os.environ.get("SPARKGLASS_PIPELINE_NAME", "pipeline")


def _noting(results: Iterator[dict[str, Any]], graph: SdpGraph) -> Iterator[dict[str, Any]]:
    """``results`` unchanged, each pipeline event also given to ``graph``."""
    for result in results:
        event = result.get("pipeline_event_result")
        if event is not None:
            try:
                at_ms = int(event.event.timestamp.ToMilliseconds())
            except Exception:  # an event without a timestamp: now is close enough
                at_ms = int(time.time() * 1000)
            graph.on_event(str(event.event.message), at_ms)
        yield result


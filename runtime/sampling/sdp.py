"""Sampling a Spark Declarative Pipeline run: the driver half of ``sparkglass pipelines run``.

``spark-pipelines run`` starts pyspark's pipelines CLI under spark-submit with ``--remote
local``, whose Python process also holds the Spark Connect server's classic session, so the
control endpoint can live there: ``sparkglass pipelines run`` points the launcher at
:func:`main` instead of pyspark's CLI file. The run's datasets and flows become vertices
(:class:`SdpGraph`), sampled through the extension's taps while a flow runs and from their
tables once it ended. docs/pipelines.md, "Spark Declarative Pipelines", has the rules.
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

from sparkglass.runtime.contract.attributes import attributes_of
from sparkglass.runtime.contract.description import VertexAttributes
from sparkglass.runtime.sampling.discovery import (
    DiscoveredPipeline,
    Graph,
    GraphNode,
    norm,
    short,
)

#: Seconds to keep serving after the run ended (set by ``sparkglass pipelines run --hold``).
HOLD_ENV = "SPARKGLASS_PIPELINES_HOLD"
#: Where :func:`main` writes one JSON line with the control endpoint's URL once it serves.
READY_FILE_ENV = "SPARKGLASS_PIPELINES_READY_FILE"
#: The prefix of the line :func:`main` prints with the endpoint's URL.
READY_PREFIX = "sparkglass: control endpoint "
#: The start of the line :func:`main` prints once the run ended and its datasets are served.
ENDED = "sparkglass: run ended"

# "Flow spark_catalog.default.carrier_delays has COMPLETED." and the like: the pipeline's
# events carry the flow identifier and its state in their message.
_FLOW_EVENT = re.compile(r"Flow '?(?P<flow>[\w.`]+)'? (?:has |is )?(?P<state>[A-Z_]+)")


class Definitions:
    """What the pipeline's Python definition files declared, recorded as pyspark registers
    each flow (``@dp.table``, ``@dp.materialized_view``, ``@dp.append_flow``…).

    SDP imports the definition files in this process (the Spark Connect client of
    ``--remote local``), so the functions themselves are at hand: a sparkglass attribute
    decorator stacked *under* the SDP one (applied first, see
    :mod:`sparkglass.runtime.contract.attributes`) leaves its
    :class:`~sparkglass.runtime.contract.description.VertexAttributes` on the function.
    SQL definitions have no function: their attributes come from overrides only.
    Keys are short names (the last dotted part, lower case).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: flow -> the dataset it writes
        self.targets: dict[str, str] = {}
        #: flow -> the attributes declared on its function (only flows that declared some)
        self.attributes: dict[str, VertexAttributes] = {}

    def record(self, flow: str, target: str, func: object) -> None:
        """Note one flow ``flow`` into ``target`` defined by ``func``."""
        declared = attributes_of(func)
        with self._lock:
            self.targets[short(flow)] = short(target)
            if declared != VertexAttributes():
                self.attributes[short(flow)] = declared

    def target_of(self, flow: str) -> str | None:
        """The short name of the dataset ``flow`` writes, if a Python definition said so."""
        with self._lock:
            return self.targets.get(short(flow))

    def attributes_of(self, name: str) -> VertexAttributes:
        """The attributes declared on flow ``name``'s function (all off when none)."""
        with self._lock:
            return self.attributes.get(short(name), VertexAttributes())


class SdpGraph(Graph):
    """The datasets and flows of one run, from the extension's taps, the run's events and the
    Python definitions (:class:`Definitions`).

    Every flow is a vertex named by its identifier. A flow into a dataset of another name
    (``@dp.append_flow``) has that dataset as one more vertex, fed by it. Every streaming flow
    runs as a streaming query named by the flow's identifier (the extension taps it; its sink
    is the dataset it writes, its inputs the datasets it reads); materialized views are batch
    writes, which the pipeline's events announce. A dataset whose flows all ended (every flow
    of a triggered run ends) is served from its table: an end-of-input vertex, each row at
    most once, as the DSL does for materialized outputs."""

    def __init__(self, spark: Any, definitions: Definitions | None = None) -> None:
        self._spark = spark
        self._definitions = definitions or Definitions()
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
            else:  # a flow that runs again (a retry) has not completed
                self.completed_at.pop(flow, None)

    def _flows(self) -> tuple[dict[str, Any], dict[str, str], dict[str, int]]:
        """(taps by query name, flow -> dataset it writes, completed flows), all normalized."""
        pipeline = self.pipeline
        taps = {} if pipeline is None else {norm(t.name): t for t in pipeline.discovery.taps}
        with self._lock:
            flows = set(self.flow_states)
            completed = dict(self.completed_at)
        flows |= {k for k, t in taps.items() if t.kind == "query"}
        sinks: dict[str, str] = {}
        for flow in sorted(flows):
            tap = taps.get(flow)
            if tap is not None and tap.sink:
                sinks[flow] = norm(tap.sink)
                continue
            target = self._definitions.target_of(flow)
            prefix = flow.rsplit(".", 1)[0] + "." if "." in flow else ""
            sinks[flow] = flow if target is None else prefix + target
        return taps, sinks, completed

    def nodes(self) -> Sequence[GraphNode]:
        pipeline = self.pipeline
        writes = {} if pipeline is None else pipeline.discovery.writes
        taps, sinks, completed = self._flows()
        writers: dict[str, list[str]] = {}
        for flow, sink in sinks.items():
            writers.setdefault(sink, []).append(flow)

        def materialized(dataset: str) -> str | None:
            flows = writers.get(dataset, [])
            return dataset if flows and all(f in completed for f in flows) else None

        out: list[GraphNode] = []
        for flow, sink in sinks.items():
            tap = taps.get(flow)
            streaming = tap is not None
            # A batch flow (materialized view) has no tap: its write tells what it read.
            inputs = tuple(tap.inputs) if tap is not None else writes.get(flow, ())
            out.append(
                GraphNode(
                    raw=flow,
                    inputs=inputs,
                    bounded=not streaming,
                    queries=(flow,) if streaming else (),
                    # A default flow has its dataset's name: one vertex, read from its table
                    # once every flow into it ended.
                    materialized=materialized(sink) if sink == flow else None,
                    attributes=self._definitions.attributes_of(flow),
                )
            )
        for sink, flows in writers.items():
            if sink in sinks:  # the dataset is its default flow's vertex
                continue
            out.append(
                GraphNode(
                    raw=sink,
                    inputs=tuple(flows),
                    bounded=not any(f in taps for f in flows),
                    tapped_by=tuple(f for f in flows if f in taps),
                    materialized=materialized(sink),
                )
            )
        return out

    def written_at_ms(self, table: str) -> int | None:
        """When the last flow into ``table`` completed, once all of them did (ms since the
        epoch); ``None`` while one of them has not."""
        _, sinks, completed = self._flows()
        flows = [f for f, sink in sinks.items() if sink == norm(table)]
        if not flows or any(f not in completed for f in flows):
            return None
        return max(completed[f] for f in flows)


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
    """pyspark's pipelines CLI, with the run attached to sparkglass.

    ``spark-pipelines run`` is a launcher (``org.apache.spark.deploy.SparkPipelines``) that
    starts pyspark's pipelines CLI under spark-submit, with ``--remote local``: that Python
    process starts the Spark Connect server's SparkContext in its own JVM through Py4J
    (``pyspark.sql.connect.session._start_connect_server``) and keeps that classic session.
    This runs pyspark's CLI unchanged after hooking one function,
    ``handle_pipeline_events``, which runs once the graph is registered and the run has
    started. There it attaches to the classic session
    (:func:`sparkglass.runtime.sampling.attach.attach`) with a :class:`SdpGraph`. It also
    swaps pyspark's graph element registry for a subclass that notes each Python flow's
    target and the sparkglass attributes declared on its function (:class:`Definitions`)
    before registering it unchanged. :data:`HOLD_ENV` (seconds) keeps the endpoint serving
    after the run ended, so its datasets can still be sampled (the CLI's ``--hold``).
    """
    import pyspark.pipelines.cli as cli

    from sparkglass.runtime.sampling.attach import attach
    from sparkglass.runtime.sampling.registry import endpoint_for

    original = cli.handle_pipeline_events
    definitions = Definitions()
    base = cli.SparkConnectGraphElementRegistry

    class RecordingRegistry(base):  # type: ignore[misc, valid-type]
        """pyspark's registry, noting each flow's target and declared attributes."""

        def register_flow(self, flow: Any) -> None:
            try:
                definitions.record(flow.name, flow.target, flow.func)
            except Exception as exc:  # noting must never fail the user's pipeline
                print(f"sparkglass: flow {flow!r} not noted: {exc}", file=sys.stderr)
            super().register_flow(flow)

    def handle(results: Iterator[dict[str, Any]]) -> None:
        spark = _classic_session()
        graph = SdpGraph(spark, definitions)
        pipeline = attach(spark, name=_pipeline_name(), graph=graph)
        graph.pipeline = pipeline
        endpoint = endpoint_for(spark)
        if endpoint is not None:
            _announce(endpoint.url)
        original(_noting(results, graph))
        hold = float(os.environ.get(HOLD_ENV, "0") or 0)
        if pipeline is not None and hold > 0:
            pipeline.refresh()
            print(f"{ENDED}; serving its datasets for {hold:g} s", flush=True)
            time.sleep(hold)

    cli.handle_pipeline_events = handle  # type: ignore[assignment]  # same call, other arg name
    cli.SparkConnectGraphElementRegistry = RecordingRegistry  # type: ignore[misc]
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

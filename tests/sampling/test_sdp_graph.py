"""``SdpGraph`` from a run's events and its Python definitions (no Spark needed): which
vertices a Spark Declarative Pipeline has, their edges, their attributes, and when a dataset
is read from its table."""

from __future__ import annotations

from sparkglass.runtime.contract.attributes import idempotent, no_output_until_end_of_input
from sparkglass.runtime.contract.description import VertexAttributes
from sparkglass.runtime.sampling.sdp import Definitions, SdpGraph

DB = "spark_catalog.default."


def test_append_flows_feed_their_dataset_which_is_materialized_once_all_completed() -> None:
    @no_output_until_end_of_input
    @idempotent(key="origin")
    def origin_counts() -> None: ...

    definitions = Definitions()
    definitions.record("origin_counts", "origin_counts", origin_counts)
    definitions.record("late_from_raw", "late_arrivals", lambda: None)
    definitions.record("late_from_replay", "late_arrivals", lambda: None)
    graph = SdpGraph(None, definitions)
    for flow in ("origin_counts", "late_from_raw", "late_from_replay"):
        graph.on_event(f"Flow {DB}{flow} is QUEUED.", 1)
    nodes = {n.raw: n for n in graph.nodes()}
    assert set(nodes) == {
        DB + "origin_counts",
        DB + "late_from_raw",
        DB + "late_from_replay",
        DB + "late_arrivals",
    }
    dataset = nodes[DB + "late_arrivals"]
    assert dataset.inputs == (DB + "late_from_raw", DB + "late_from_replay")
    assert dataset.materialized is None
    attrs = nodes[DB + "origin_counts"].attributes
    assert attrs.no_output_until_end_of_input and attrs.idempotent is not None
    assert attrs.idempotent.key == ["origin"]
    assert nodes[DB + "late_from_raw"].attributes == VertexAttributes()

    graph.on_event(f"Flow {DB}late_from_raw has COMPLETED.", 10)
    graph.on_event(f"Flow {DB}origin_counts has COMPLETED.", 11)
    nodes = {n.raw: n for n in graph.nodes()}
    # One of two flows into late_arrivals ended: not yet end-of-input.
    assert nodes[DB + "late_arrivals"].materialized is None
    assert graph.written_at_ms(DB + "late_arrivals") is None
    assert nodes[DB + "origin_counts"].materialized == DB + "origin_counts"
    assert graph.written_at_ms(DB + "origin_counts") == 11
    # The flow vertex itself is not its dataset: never read from a table.
    assert nodes[DB + "late_from_raw"].materialized is None

    graph.on_event(f"Flow {DB}late_from_replay has COMPLETED.", 20)
    assert {n.raw: n for n in graph.nodes()}[DB + "late_arrivals"].materialized == (
        DB + "late_arrivals"
    )
    assert graph.written_at_ms(DB + "late_arrivals") == 20
    # A flow that runs again (a retry) has not completed any more.
    graph.on_event(f"Flow {DB}late_from_raw is RUNNING.", 30)
    assert graph.written_at_ms(DB + "late_arrivals") is None

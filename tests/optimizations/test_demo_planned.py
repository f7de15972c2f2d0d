"""The flights demo planned with the issue's attributes, as the operator would pass them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkglass.demo.flights import DELAYS_TABLE, build_pipeline
from sparkglass.demo.replay import FlightReplay
from sparkglass.runtime.contract.plan import EdgeKind, Optimizations

pytestmark = pytest.mark.spark

#: The SparkApplication spec's attributes for the demo.
SPEC = """
spec:
  pipeline:
    vertices:
      - name: busiest-origins
        attributes: {noOutputUntilEndOfInput: true}
      - name: delays-by-carrier
        attributes: {idempotent: {key: [carrier]}}
"""


def run(spark, workdir: Path, opts: Optimizations):
    p = build_pipeline(spark, workdir, max_files_per_trigger=2, trigger_seconds=0.2)
    replay = FlightReplay(workdir / "stream", days=2, files_per_tick=2)
    p.start(overrides=SPEC, optimizations=opts)
    try:
        while replay.write_next(2):
            p.process_all_available()
        delays = sorted((tuple(r) for r in spark.table(DELAYS_TABLE).collect()), key=repr)
    finally:
        p.stop()
    enriched = spark.read.parquet(str(workdir / "output" / "enriched"))
    return p, delays, sorted((tuple(r) for r in enriched.collect()), key=repr)


def test_demo_same_results_planned_and_naive(spark, tmp_path):
    naive = run(spark, tmp_path / "naive", Optimizations(materialize=False, latest_per_key=False))
    planned = run(spark, tmp_path / "planned", Optimizations())
    assert planned[1] == naive[1] and len(planned[1]) > 10
    assert planned[2] == naive[2] and len(planned[2]) > 1000
    plan = planned[0].plan(overrides=SPEC)
    assert plan.edge("busiest-origins", "enrich-origin").kind is EdgeKind.BLOCKING
    assert plan.vertex("enrich-origin").phase == 1
    assert plan.vertex("delays-by-carrier").phase == 0
    assert (tmp_path / "planned/checkpoints/_materialized/busiest-origins").is_dir()

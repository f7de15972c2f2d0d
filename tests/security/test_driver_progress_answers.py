"""Attack on the readers of a driver's live metrics (the service's page and ``/metrics``, the
operator's ``status.progress``): the driver is the application's own code, so its answer to
``GET /api/v1/progress`` is untrusted.

Found by a review and closed here, each against a real HTTP server on 127.0.0.1 answering as
a malicious driver:

- a history of 64 vertices x 7 series x 1,000 invalid values made pydantic report 910,000
  errors, and the client put all of them in its error message (226 MiB, seconds of CPU on
  the operator's event loop, a 3.5 MB 502 body to every page poll): the message is now a
  few hundred characters, and a series stops at its first bad value;
- 300,000 vertices, or a 40 MiB failure text, were held by the service's caches: the
  contract bounds both;
- a history sent unasked was cached and served on every poll: it is dropped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkglass.runtime.contract.pipeline_metrics import (
    MAX_FAILED_LENGTH,
    MAX_HISTORY_POINTS,
    MAX_HISTORY_VERTICES,
    MAX_METRICS_VERTICES,
    PIPELINE_SERIES,
    VERTEX_SERIES,
)
from sparkglass.runtime.control.client import ControlClient, ControlUnavailable
from sparkglass.service.pipeline_progress import PipelineProgressReader

pytestmark = pytest.mark.timeout(120)


class Driver:
    """A driver control endpoint answering ``body`` to every progress request."""

    def __init__(self) -> None:
        self.body: bytes = b"{}"
        self.url = ""


@pytest.fixture
def driver() -> Iterator[Driver]:
    d = Driver()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(d.body)))
            self.end_headers()
            self.wfile.write(d.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    d.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield d
    finally:
        server.shutdown()
        server.server_close()


def _history(value: Any) -> dict[str, Any]:
    n = MAX_HISTORY_POINTS
    return {
        "windowSeconds": 900,
        "resolutionSeconds": 0.9,
        "maxPoints": n,
        "timestamps": list(range(n)),
        **{_camel(s): [value] * n for s in PIPELINE_SERIES},
        "vertices": {
            f"v{i}": {_camel(s): [value] * n for s in VERTEX_SERIES}
            for i in range(MAX_HISTORY_VERTICES)
        },
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_a_million_bad_values_make_a_short_error(driver: Driver) -> None:
    driver.body = json.dumps({"state": "ACTIVE", "history": _history(-0.5)}).encode()
    with ControlClient(driver.url, "t") as client, pytest.raises(ControlUnavailable) as caught:
        client.progress(history=True)
    message = str(caught.value)
    assert len(message) < 1500, len(message)
    assert "unexpected body" in message and "more)" in message
    assert "-0.5" not in message  # what was sent is never echoed


@pytest.mark.parametrize(
    "body",
    [
        {"vertices": {f"v{i}": {} for i in range(MAX_METRICS_VERTICES + 1)}},
        {"failed": "x" * (MAX_FAILED_LENGTH + 1)},
        {"vertices": {"<img src=x onerror=alert(1)>": {}}},
        {"inputRowsPerSecond": "Infinity"},
    ],
    ids=["too many vertices", "failure text too long", "markup as a vertex name", "infinite rate"],
)
def test_an_answer_outside_the_contract_is_refused(driver: Driver, body: dict[str, Any]) -> None:
    raw = json.dumps(body).replace('"Infinity"', "Infinity").encode()
    driver.body = raw
    with ControlClient(driver.url, "t") as client, pytest.raises(ControlUnavailable):
        client.progress()


def test_a_history_sent_unasked_is_not_kept(driver: Driver) -> None:
    history = _history(1)
    history["vertices"] = {}
    driver.body = json.dumps({"state": "ACTIVE", "history": history}).encode()

    class App:
        namespace, name, driver_url = "local", "flights", driver.url
        api_version = None

    reader = PipelineProgressReader()
    plain = reader.read(App(), None, lambda: "t")  # type: ignore[arg-type]
    assert plain.history is None
    asked = reader.read(App(), None, lambda: "t", history=True)  # type: ignore[arg-type]
    assert asked.history is not None and len(asked.history.timestamps) == MAX_HISTORY_POINTS

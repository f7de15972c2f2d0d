"""Attack on the operator and the service from a driver: an answer trickled a byte at a time
was bounded by neither the answer cap nor the timeout.

The control client's ``timeout_s`` is httpx's: per phase (connect, each socket read), not
per call. A driver, the application's own code, that answers its headers at once and then one
byte of body every second never trips the read timeout, and takes ``max_answer_bytes``
seconds-per-byte to reach the cap: with the operator's new 1 MiB caps, weeks. Callers
document a bound they do not get:

* operator/driver_progress.py ``read_progress``: "A driver that does not answer costs the
  reconcile pass at most PROGRESS_TIMEOUT_S" (3 s). A background full pass reads it while
  holding one of the operator-wide ``_background_passes`` slots (``api_qps / 10``: 2 by
  default, operator/sparkapplication.py) and the application's lock: two such drivers stall
  every background resync of every namespace.
* operator/foreign_pipeline.py ``read_pipeline`` (PIPELINE_TIMEOUT_S, 3 s; "an event handler
  waits for it").
* service/driver_liveness.py: probes "each bounded by probe_timeout_s" (2 s), on 4 threads
  shared by every application: four such drivers leave every other driver's liveness
  ``unknown``.

Only the admission webhook wrapped its call in ``asyncio.wait_for``. Expected: each read ends
within a small multiple of its timeout whatever the driver sends (the client's
``CALL_DEADLINE_FACTOR``). A real HTTP listener on 127.0.0.1 plays the driver.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkglass.operator.driver_access import DriverAccess
from sparkglass.operator.foreign_pipeline import PIPELINE_TIMEOUT_S, read_pipeline
from sparkglass.service.driver_liveness import DriverLiveness, _Target

pytestmark = pytest.mark.timeout(120)

#: Seconds between two bytes of the driver's body: well within any read timeout.
DRIP_S = 0.5
#: How long the driver keeps dripping at most (the test's own bound).
DRIP_FOR_S = 40.0


@dataclass
class TricklingDriver:
    url: str = ""
    dripped: int = 0
    stop: threading.Event | None = None


@pytest.fixture()
def driver() -> Iterator[TricklingDriver]:
    seen = TricklingDriver(stop=threading.Event())
    assert seen.stop is not None
    stop = seen.stop

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            started = time.monotonic()
            try:
                self.wfile.write(b"1\r\n{\r\n")
                self.wfile.flush()
                while time.monotonic() - started < DRIP_FOR_S and not stop.is_set():
                    time.sleep(DRIP_S)
                    self.wfile.write(b"1\r\n \r\n")  # JSON whitespace, one byte
                    self.wfile.flush()
                    seen.dripped += 1
                self.wfile.write(b"1\r\n}\r\n0\r\n\r\n")
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield seen
    stop.set()
    server.shutdown()
    server.server_close()


async def test_the_pipeline_read_ends_within_its_timeout(driver: TricklingDriver) -> None:
    bound = 3 * PIPELINE_TIMEOUT_S
    started = time.monotonic()
    try:
        await asyncio.wait_for(read_pipeline(DriverAccess(driver.url, "token", None)), bound)
    except TimeoutError:
        pytest.fail(
            f"read_pipeline (timeout {PIPELINE_TIMEOUT_S} s) still reading after {bound} s "
            f"({driver.dripped} bytes dripped); it would go on until the 1 MiB cap"
        )
    assert time.monotonic() - started <= bound


def test_the_liveness_probe_ends_within_its_timeout(driver: TricklingDriver) -> None:
    probe_timeout_s = 2.0
    liveness = DriverLiveness(None, probe_timeout_s=probe_timeout_s)  # type: ignore[arg-type]
    target = _Target(id=1, namespace="local", name="trickle", run=1, driver_url=driver.url)
    probe = threading.Thread(
        target=liveness._probe, args=(target, "token", None, None), daemon=True
    )
    probe.start()
    bound = 3 * probe_timeout_s
    probe.join(bound)
    alive = probe.is_alive()
    assert driver.stop is not None
    driver.stop.set()  # lets the probe end: the test leaves no thread behind
    probe.join(DRIP_FOR_S)
    assert not alive, (
        f"a probe bounded by {probe_timeout_s} s was still reading after {bound} s "
        f"({driver.dripped} bytes dripped)"
    )

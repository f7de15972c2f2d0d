"""Attack on the service from a driver: small answers read large.

The operator's small reads of a driver (the application's own code) stopped at caps sized
for what it keeps, but the service made the same kind of reads with the control client's
general cap, 64 MiB (a full round result):

* the liveness probe, ``GET /api/v1/settings`` (a small JSON object), started by any
  viewer's application listing (service/driver_liveness.py, ``_probe``);
* the live metrics, ``GET /api/v1/progress`` (service/pipeline_progress.py), read for every
  open page and for ``.../expectations`` in Kubernetes-less local mode;
* the pipeline and settings read at registration (service/catalog.py).

The cap bounds bytes read; the answer is then parsed whole (pydantic-core first builds
the JSON tree: about 40 times the body for a body of ``[],[],...``), so 64 MiB read is
gigabytes held. Expected: each read stops at its route's bound (``Route.max_answer`` in
runtime/control/routes.py, one table for every client). A real HTTP listener on 127.0.0.1
plays the driver; it counts what it got rid of before the service closed the connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkglass.runtime.control.client import MAX_ANSWER_BYTES
from sparkglass.service.catalog import CatalogError, fetch_driver_pipeline
from sparkglass.service.driver_liveness import DriverLiveness, _Target
from sparkglass.service.pipeline_progress import PipelineProgressReader, ProgressUnavailable
from sparkglass.service.store.orm import Application
from tests.support.flooding_driver import MIB, Flood, flooding

pytestmark = pytest.mark.timeout(120)

#: What the hostile driver offers: past the general cap.
OFFERED = 72 * MIB
#: The most the listener may get rid of against a cap of 1 MiB or less: the cap plus the
#: sockets' buffers on loopback (a few MiB), far below the general cap.
SENT_AT_MOST = 24 * MIB


@pytest.fixture()
def driver() -> Iterator[Flood]:
    # Not JSON from the first byte: should it all be read, parsing it costs nothing.
    with flooding(OFFERED) as served:
        yield served


def test_the_liveness_probe_stops_at_a_small_cap(driver: Flood) -> None:
    assert SENT_AT_MOST < MAX_ANSWER_BYTES < OFFERED
    liveness = DriverLiveness(None, probe_timeout_s=30)  # type: ignore[arg-type]
    target = _Target(id=1, namespace="local", name="hostile", run=1, driver_url=driver.url)
    liveness._probe(target, "token", None, None)  # the driver "did not answer": ended
    assert driver.sent <= SENT_AT_MOST, f"the probe of a settings object read {driver.sent} B"


def test_the_metrics_read_stops_at_a_small_cap(driver: Flood) -> None:
    reader = PipelineProgressReader()
    app = Application(namespace="local", name="hostile", driver_url=driver.url)
    try:
        with pytest.raises(ProgressUnavailable):
            reader.read(app, token=lambda: "token")
    finally:
        reader.close()
    assert driver.sent <= SENT_AT_MOST, f"a metrics read read {driver.sent} B"


def test_the_registration_read_stops_at_a_small_cap(driver: Flood) -> None:
    with pytest.raises(CatalogError):
        fetch_driver_pipeline(driver.url, "token")
    assert driver.sent <= SENT_AT_MOST, f"a pipeline read read {driver.sent} B"

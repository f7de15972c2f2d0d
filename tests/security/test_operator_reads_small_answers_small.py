"""Attack on the operator from a driver: answers it keeps small, read large.

A driver is the application's own code. The operator asks every running application's driver
for its pipeline (published in a ConfigMap of at most 256 KiB) and its metrics (at most
64 KiB in the status), and the admission webhook asks it to check a round (a verdict of a
few hundred bytes); each read took up to the control client's cap for a full round result,
64 MiB. A hostile driver answering without end made the operator (one process for every
namespace) hold 64 MiB per read it made at once. Worse, the client accepted compressed
answers: a gzip body of about 100 KiB inflated past the cap inside one chunk, before the cap
was checked.

Expected: each of those reads stops at a cap sized for what it keeps
(``max_answer_bytes``), and the client asks for and accepts only uncompressed answers: a
compressed one is refused unread. A real HTTP listener on 127.0.0.1 plays the driver.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Iterator

import pytest

from sparkglass.operator.driver_access import DriverAccess
from sparkglass.operator.foreign_pipeline import MAX_PIPELINE_ANSWER_BYTES, read_pipeline
from sparkglass.runtime.control.client import (
    MAX_ANSWER_BYTES,
    AsyncControlClient,
    ControlClient,
    ControlUnavailable,
)
from tests.support.flooding_driver import MIB, Flood, flooding

pytestmark = pytest.mark.timeout(120)

#: What the hostile driver offers, past the client's general cap.
OFFERED = 96 * MIB
#: The most the listener may get rid of against a 1 MiB cap: the cap plus the sockets'
#: buffers on loopback (a few MiB), far below the general cap.
SENT_AT_MOST = 24 * MIB


@functools.cache
def bomb() -> bytes:
    """64 MiB of a JSON string, gzip'd to well under one MiB."""
    return gzip.compress(b'{"vertices":[],"edges":[],"x":"' + b"0" * (64 * MIB) + b'"}')


@pytest.fixture()
def driver() -> Iterator[Flood]:
    with flooding(OFFERED, head=b'{"vertices":[{"name":"') as served:
        yield served


async def test_the_pipeline_read_stops_at_its_own_cap(driver: Flood) -> None:
    assert MAX_PIPELINE_ANSWER_BYTES <= MIB < SENT_AT_MOST < MAX_ANSWER_BYTES
    description = await read_pipeline(DriverAccess(driver.url, "token", None))
    assert description is None  # unavailable, as any driver failure
    assert driver.accepted == ["identity"]
    assert driver.sent <= SENT_AT_MOST, driver.sent


async def test_a_compressed_answer_is_refused_unread_by_the_async_client(
    driver: Flood,
) -> None:
    driver.bomb = bomb()
    async with AsyncControlClient(driver.url, "token") as client:
        with pytest.raises(ControlUnavailable, match="Content-Encoding 'gzip'"):
            await client.pipeline()
    assert await read_pipeline(DriverAccess(driver.url, "token", None)) is None
    assert driver.accepted == ["identity", "identity"]


def test_a_compressed_answer_is_refused_unread_by_the_sync_client(driver: Flood) -> None:
    driver.bomb = bomb()
    with (
        ControlClient(driver.url, "token") as client,
        pytest.raises(ControlUnavailable, match="Content-Encoding 'gzip'"),
    ):
        client.pipeline()
    assert driver.accepted == ["identity"]


@pytest.mark.parametrize("cap", [0, -1, MAX_ANSWER_BYTES + 1])
def test_a_cap_out_of_range_is_refused_naming_it(cap: int) -> None:
    with pytest.raises(ValueError, match=r"max_answer_bytes: expected 1\.\.67108864 bytes"):
        ControlClient("http://127.0.0.1:1", "token", max_answer_bytes=cap)

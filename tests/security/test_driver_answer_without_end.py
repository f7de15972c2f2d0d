"""Attack on the operator and the service from a driver: an answer without end.

A driver is the application's own code (whoever may create a SparkApplication writes it), and
it holds its control certificate's key, so pinning does not stop it. Its answers to
``POST .../rounds`` and ``GET .../rounds/{id}`` are read whole by the control client
(``runtime/control/client.py``: ``httpx`` ``request``, no cap in bytes) before they are
decoded, so a driver that answers with a body of hundreds of megabytes, or a chunked body
that never ends, makes the reader hold all of it: the operator (one process for every
namespace) or the service runs out of memory, and every tenant loses sampling.

Expected: the client stops reading past a cap in bytes (``MAX_ANSWER_BYTES``, 64 MiB; the
largest valid answer, a full result of 5000 records, is about 50 MB) and fails the call with
a clear error; the round fails, nothing else does. A real HTTP listener on 127.0.0.1 plays
the driver, for the sync client (the service and the CLI) and the async one (the operator).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkglass.runtime.control.client import (
    MAX_ANSWER_BYTES,
    AsyncControlClient,
    ControlClient,
    ControlUnavailable,
)
from tests.support.flooding_driver import MIB, Flood, flooding

pytestmark = pytest.mark.timeout(120)

#: What the hostile driver offers (it stops there so that the test ends on today's code).
OFFERED = 160 * MIB
#: The most a capped client may read: the largest valid answer plus slack.
READ_AT_MOST = 100 * MIB


@pytest.fixture()
def flood() -> Iterator[Flood]:
    with flooding(OFFERED, head=b'{"status":"PENDING","roundId":"') as served:
        yield served


def test_a_driver_answer_past_the_cap_is_not_read_whole(flood: Flood) -> None:
    assert MAX_ANSWER_BYTES < READ_AT_MOST
    with (
        ControlClient(flood.url, "token", timeout_s=60) as client,
        pytest.raises(ControlUnavailable, match="answer larger than 64 MiB"),
    ):
        client.open_round("parse")
    assert flood.sent <= READ_AT_MOST, f"the client read {flood.sent // MIB} MiB of one answer"


async def test_the_operators_async_client_caps_the_answer_too(flood: Flood) -> None:
    async with AsyncControlClient(flood.url, "token", timeout_s=60) as client:
        with pytest.raises(ControlUnavailable, match="answer larger than 64 MiB"):
            await client.open_round("parse")
    assert flood.sent <= READ_AT_MOST, f"the client read {flood.sent // MIB} MiB of one answer"

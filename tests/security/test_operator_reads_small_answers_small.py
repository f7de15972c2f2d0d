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

import contextlib
import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkglass.operator.driver_access import DriverAccess
from sparkglass.operator.foreign_pipeline import MAX_PIPELINE_ANSWER_BYTES, read_pipeline
from sparkglass.runtime.control.client import (
    MAX_ANSWER_BYTES,
    AsyncControlClient,
    ControlClient,
    ControlUnavailable,
)

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
#: What the hostile driver offers, past the client's general cap.
OFFERED = 96 * MIB
#: The most the listener may get rid of against a 1 MiB cap: the cap plus the sockets'
#: buffers on loopback (a few MiB), far below the general cap.
SENT_AT_MOST = 24 * MIB


@dataclass
class HostileDriver:
    url: str = ""
    sent: int = 0
    #: Accept-Encoding of each request.
    accepted: list[str | None] = field(default_factory=list)
    bomb: bool = False


@pytest.fixture()
def driver() -> Iterator[HostileDriver]:
    seen = HostileDriver()
    # 64 MiB of a JSON string, gzip'd to well under one MiB.
    bomb = gzip.compress(b'{"vertices":[],"edges":[],"x":"' + b"0" * (64 * MIB) + b'"}')

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.accepted.append(self.headers.get("Accept-Encoding"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if seen.bomb:
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(bomb)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(bomb)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b'{"vertices":[{"name":"' + b"x" * MIB
            try:
                while seen.sent < OFFERED:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    seen.sent += len(chunk)
                    chunk = b"x" * MIB
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield seen
    server.shutdown()
    server.server_close()


async def test_the_pipeline_read_stops_at_its_own_cap(driver: HostileDriver) -> None:
    assert MAX_PIPELINE_ANSWER_BYTES <= MIB < SENT_AT_MOST < MAX_ANSWER_BYTES
    description = await read_pipeline(DriverAccess(driver.url, "token", None))
    assert description is None  # unavailable, as any driver failure
    assert driver.accepted == ["identity"]
    assert driver.sent <= SENT_AT_MOST, driver.sent


async def test_a_compressed_answer_is_refused_unread_by_the_async_client(
    driver: HostileDriver,
) -> None:
    driver.bomb = True
    async with AsyncControlClient(driver.url, "token") as client:
        with pytest.raises(ControlUnavailable, match="Content-Encoding 'gzip'"):
            await client.pipeline()
    assert await read_pipeline(DriverAccess(driver.url, "token", None)) is None
    assert driver.accepted == ["identity", "identity"]


def test_a_compressed_answer_is_refused_unread_by_the_sync_client(driver: HostileDriver) -> None:
    driver.bomb = True
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

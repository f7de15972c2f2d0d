"""A hostile driver on 127.0.0.1 whose answers have no end (:func:`flooding`).

A driver is the application's own code. This one answers every ``GET`` (200) and ``POST``
(202) with a chunked body of ``offered`` bytes, ``head`` first, or, once a test sets
``bomb``, with that gzip body. It counts what it got rid of before the reader closed the
connection (``sent``: the sockets' buffers on loopback hold a few MiB of it) and keeps each
request's ``Accept-Encoding``: what the attacks on the readers of driver answers assert.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MIB = 1024 * 1024


@dataclass
class Flood:
    """What the flooding driver offers and what it saw (module docstring)."""

    offered: int
    head: bytes = b""
    #: A gzip body answered instead of the flood, with ``Content-Encoding: gzip``.
    bomb: bytes | None = None
    url: str = ""
    sent: int = 0
    accepted: list[str | None] = field(default_factory=list)


@contextlib.contextmanager
def flooding(offered: int, head: bytes = b"") -> Iterator[Flood]:
    """Serve a :class:`Flood` of ``offered`` bytes for the ``with`` block."""
    seen = Flood(offered, head)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            seen.accepted.append(self.headers.get("Accept-Encoding"))
            self.send_response(202 if self.command == "POST" else 200)
            self.send_header("Content-Type", "application/json")
            if seen.bomb is not None:
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(seen.bomb)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(seen.bomb)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = seen.head + b"x" * MIB
            with contextlib.suppress(OSError):  # the reader closed: it stopped reading
                while seen.sent < seen.offered:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    seen.sent += len(chunk)
                    chunk = b"x" * MIB
                self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()

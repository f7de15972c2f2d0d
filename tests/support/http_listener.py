"""A plain-HTTP listener on 127.0.0.1 recording every request it gets and answering 202 with
a round id (the ``listener`` fixture, :class:`Listener`): where a test points what must never
be called, or must not carry a secret.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Listener:
    """The attacker's HTTP listener on 127.0.0.1: records every request, answers 200."""

    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    url: str = ""

    def saw_secret(self, secret: str) -> bool:
        return any(secret in json.dumps(r) for r in self.requests)


@pytest.fixture()
def listener() -> Iterator[Listener]:
    seen = Listener()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            with lock:
                seen.requests.append((self.command, self.path, dict(self.headers)))
            body = b'{"status":"PENDING","roundId":"evil-1"}'
            self.send_response(202)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _record

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield seen
    server.shutdown()
    server.server_close()

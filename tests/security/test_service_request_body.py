"""Attack: an unauthenticated 100 MB PUT, streamed, which the
service used to read (and buffer) whole before authenticating; against the real service
process over a raw socket, watching its RSS in ``/proc``."""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread

PUT_PATH = "/api/v1/namespaces/local/applications/evil"
HUNDRED_MB = 100 * 1024 * 1024
CHUNK = b"x" * (256 * 1024)
#: RSS growth allowed while the attack runs (allocator noise, a few buffers).
MAX_GROWTH_KB = 8 * 1024


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = FakeDriver()
    with ServerThread(driver.app()) as server, ServiceProcess(tmp_path, server.url) as svc:
        yield svc


def stream_put(
    port: int, headers: dict[str, str], *, chunked: bool, total: int = HUNDRED_MB
) -> tuple[bytes, int]:
    """PUT ``total`` bytes of body as fast as the server takes them; stop as soon as it
    answers or closes. Returns (the answer's first bytes, body bytes sent)."""
    head = [f"PUT {PUT_PATH} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    sent = 0
    answer = b""
    deadline = time.monotonic() + 120
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sock.setblocking(False)
        while time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock] if sent < total else [], [], 1)
            if readable:
                try:
                    data = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not data:
                    break
                answer += data
                if _complete(answer):
                    break
                continue
            if writable:
                piece = CHUNK[: total - sent]
                frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                try:
                    n = sock.send(frame)
                except (BrokenPipeError, ConnectionResetError):
                    break
                except BlockingIOError:
                    continue
                if chunked and n < len(frame):  # keep frames whole: send the rest blocking
                    sock.setblocking(True)
                    try:
                        sock.sendall(frame[n:])
                    except (BrokenPipeError, ConnectionResetError):
                        break
                    sock.setblocking(False)
                sent += len(piece) if chunked else n
        if not answer:  # closed before we read: the answer may still be in the buffer
            sock.setblocking(True)
            with contextlib.suppress(OSError):
                answer = sock.recv(65536)
    return answer, sent


def _complete(answer: bytes) -> bool:
    """Whether ``answer`` holds a whole response (headers and Content-Length body)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_unauthenticated_100mb_put_is_refused_unread(
    service: ServiceProcess, chunked: bool
) -> None:
    # Settle: the first requests allocate the app's lazily built parts.
    for _ in range(3):
        httpx.get(f"{service.url}/api/v1/applications", headers=bearer("viewer"), timeout=10)
    before = service.rss_kb()
    answer, sent = stream_put(service.port, {}, chunked=chunked)
    growth = service.rss_kb() - before
    # 413 at once for a declared size over the limit; 401 for a chunked body, which the
    # route never reads because the caller is not authenticated.
    assert status_of(answer) == (401 if chunked else 413), answer[:300]
    assert sent < HUNDRED_MB, "the whole body was taken"
    assert growth < MAX_GROWTH_KB, f"RSS grew {growth} kB while {sent} bytes were sent"
    assert service.proc is not None and service.proc.poll() is None
    # The service still answers.
    assert httpx.get(f"{service.url}/healthz", timeout=10).status_code == 200


def test_authenticated_chunked_body_is_cut_at_the_limit(service: ServiceProcess) -> None:
    before = service.rss_kb()
    answer, sent = stream_put(service.port, bearer("admin"), chunked=True)
    growth = service.rss_kb() - before
    assert status_of(answer) == 413, answer[:300]
    assert b"max_body_bytes" in answer
    assert sent < HUNDRED_MB
    assert growth < MAX_GROWTH_KB, f"RSS grew {growth} kB while {sent} bytes were sent"


def test_small_bodies_still_work_and_bad_length_is_refused(service: ServiceProcess) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as http:
        r = http.put(
            PUT_PATH,
            json={"driverUrl": "http://127.0.0.1:9", "driverToken": "t"},
            headers=bearer("admin"),
        )
        assert r.status_code == 502  # read and parsed: the driver is unreachable
        r = http.put(PUT_PATH, json={"driverUrl": 1}, headers=bearer("admin"))
        assert r.status_code == 422 and "driverToken" in r.text
        r = http.put(
            PUT_PATH, json={"driverUrl": "x", "driverToken": "t"}, headers=bearer("viewer")
        )
        assert r.status_code == 403
        r = http.put(
            PUT_PATH, content=b"{" + b" " * (2 * 1024 * 1024) + b"}", headers=bearer("admin")
        )
        assert r.status_code == 413 and "1048576" in r.text

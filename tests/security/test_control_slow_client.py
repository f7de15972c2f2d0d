"""Attacks on the driver control endpoint by slow clients (review item A5), over real sockets
against the endpoint in its own process.

* The connection timeout used to apply to each socket read, not to the request: a client
  sending one byte of its request head (or body) every few seconds, each within the
  timeout, held its connection and its thread forever. Now the whole head and body must
  arrive within ``connection-timeout`` of the moment the endpoint starts waiting for the
  request.
* ``max-connections`` was the only cap: one peer opening that many connections locked every
  other client (the operator) out. Now one peer address holds at most
  ``max-connections-per-address`` (default: half of ``max-connections``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import pytest

from sparkglass.runtime.control.client import ControlClient, ControlTLS
from tests.support.control_endpoint import (
    TOKEN,
    Endpoint,
    closed_by_peer,
    read_response,
    request_head,
    until,
)

# Fixtures, imported under their own names so that pytest finds them here.
from tests.support.control_endpoint import certificates as certificates
from tests.support.control_endpoint import serve as serve

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def trickle_until_closed(sock: socket.socket, data: bytes, every_s: float, limit_s: float) -> float:
    """Send ``data`` one byte per ``every_s`` until the server closes ``sock``; the seconds it
    took. Fails when the connection is still open after ``limit_s``."""
    start = time.monotonic()
    for byte in data:
        if closed_by_peer(sock):
            return time.monotonic() - start
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
        # A short wait for the close, never a bare sleep: the server may end it meanwhile.
        wait_until = time.monotonic() + every_s
        while time.monotonic() < wait_until:
            if closed_by_peer(sock):
                return time.monotonic() - start
            time.sleep(0.02)
        assert time.monotonic() - start < limit_s, (
            f"the connection was still open after {limit_s} s of a byte every {every_s} s"
        )
    raise AssertionError("ran out of bytes to trickle before the server closed the connection")


def test_a_request_head_trickled_byte_by_byte_is_cut_at_the_deadline(
    serve: Callable[..., Endpoint],
) -> None:
    ep = serve(connection_timeout_s=1.0)
    # Each byte comes well within the 1 s timeout; the head never ends.
    head = b"GET /api/v1/vertices HTTP/1.1\r\nHost: driver\r\nX-Slow: " + b"a" * 4000
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        took = trickle_until_closed(sock, head, every_s=0.25, limit_s=15.0)
    assert took < 10.0, took  # 1 s deadline; a busy machine adds seconds
    # The endpoint still serves.
    with ControlClient(ep.url, TOKEN) as c:
        assert c.vertices() == ["parse"]


def test_a_request_body_trickled_byte_by_byte_is_cut_at_the_deadline(
    serve: Callable[..., Endpoint],
) -> None:
    ep = serve(connection_timeout_s=1.0, max_body_bytes=1024)
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        # An authenticated request whose allowed 1000-byte body comes one byte at a time.
        sock.sendall(request_head("GET", "/api/v1/vertices", AUTH, ("Content-Length", "1000")))
        took = trickle_until_closed(sock, b"x" * 1000, every_s=0.25, limit_s=15.0)
    assert took < 10.0, took  # 1 s deadline; a busy machine adds seconds


def client_hello() -> bytes:
    """The first flight of a TLS client (its ClientHello), as it would go on the wire."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    tls = context.wrap_bio(incoming, outgoing, server_hostname="driver")
    with contextlib.suppress(ssl.SSLWantReadError):  # it waits for the server's answer
        tls.do_handshake()
    return outgoing.read()


def test_a_tls_handshake_trickled_byte_by_byte_is_cut_at_the_deadline(
    serve: Callable[..., Endpoint], certificates: dict[str, Any]
) -> None:
    ep = serve(
        tls_cert_file=certificates["cert"],
        tls_key_file=certificates["key"],
        connection_timeout_s=1.0,
    )
    hello = client_hello()
    assert len(hello) > 100  # enough bytes to outlast the 15 s limit at 4 a second
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        took = trickle_until_closed(sock, hello, every_s=0.25, limit_s=15.0)
    assert took < 10.0, took  # 1 s deadline; a busy machine adds seconds
    with ControlClient(ep.url, TOKEN, tls=ControlTLS(ca_file=certificates["cert"])) as c:
        assert c.vertices() == ["parse"]


def test_a_request_head_trickled_inside_tls_is_cut_at_the_deadline(
    serve: Callable[..., Endpoint], certificates: dict[str, Any]
) -> None:
    ep = serve(
        tls_cert_file=certificates["cert"],
        tls_key_file=certificates["key"],
        connection_timeout_s=1.0,
    )
    context = ssl.create_default_context(cafile=certificates["cert"])
    context.check_hostname = False
    raw = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
    with context.wrap_socket(raw) as sock:  # a complete handshake, then a slow request
        head = b"GET /api/v1/vertices HTTP/1.1\r\nHost: driver\r\nX-Slow: " + b"a" * 4000
        start = time.monotonic()
        closed = False
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
                sock.settimeout(0.25)
                closed = sock.recv(1) == b""
            except TimeoutError:
                pass
            except (ssl.SSLError, BrokenPipeError, ConnectionResetError):
                closed = True
            if closed:
                break
            assert time.monotonic() - start < 15.0, "still open after 15 s"
        assert closed and time.monotonic() - start < 10.0


def test_keep_alive_requests_each_get_the_whole_timeout(serve: Callable[..., Endpoint]) -> None:
    # The deadline is per request, not per connection: a client that keeps sending complete
    # requests on one connection is served for longer than the timeout.
    ep = serve(connection_timeout_s=1.0)
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        start = time.monotonic()
        while time.monotonic() - start < 2.5:
            sock.sendall(request_head("GET", "/api/v1/vertices", AUTH))
            status, headers, body = read_response(sock, timeout_s=5)
            assert status == 200 and body == {"vertices": ["parse"]}
            assert headers.get("connection") != "close"
            time.sleep(0.3)  # paces the requests; each one is sent whole


def test_one_peer_cannot_take_every_connection(serve: Callable[..., Endpoint]) -> None:
    # A long timeout: the attacker's idle connections stay open for the whole test.
    ep = serve(max_connections=8, connection_timeout_s=120.0)
    attacker: list[socket.socket] = []
    try:
        for _ in range(8):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.2", 0))  # another peer address on the loopback network
            s.settimeout(10)
            s.connect(("127.0.0.1", ep.port))
            attacker.append(s)
        # Half of max-connections by default: the connections beyond it are closed at once.
        until(
            lambda: sum(closed_by_peer(s) for s in attacker) >= 4,
            15,
            "the attacker's connections beyond its share closed",
        )
        assert sum(not closed_by_peer(s) for s in attacker) == 4
        # The operator (another address) still gets through while they are held.
        with ControlClient(ep.url, TOKEN) as c:
            assert c.vertices() == ["parse"]
    finally:
        for s in attacker:
            s.close()


def test_the_per_address_cap_is_a_setting(serve: Callable[..., Endpoint]) -> None:
    ep = serve(max_connections=8, max_connections_per_address=2, connection_timeout_s=120.0)
    held = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(4)]
    try:
        until(lambda: sum(closed_by_peer(s) for s in held) >= 2, 15, "2 connections closed")
        assert sum(not closed_by_peer(s) for s in held) == 2
    finally:
        for s in held:
            s.close()

    # Given back: the same address is served again.
    def served() -> bool:
        try:
            with ControlClient(ep.url, TOKEN) as c:
                return c.vertices() == ["parse"]
        except Exception:
            return False

    until(served, 15, "served again once the held connections closed")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "max-connections-per-address=0 is out of range: allowed 1–1024"),
        (1025, "max-connections-per-address=1025 is out of range: allowed 1–1024"),
    ],
)
def test_the_per_address_cap_is_bounded(value: int, message: str) -> None:
    from sparkglass.runtime.contract.sampling_settings import SamplingSettingsError
    from sparkglass.runtime.control.endpoint import ControlSettings

    with pytest.raises(SamplingSettingsError, match=message) as caught:
        ControlSettings(token="t", max_connections_per_address=value)
    assert caught.value.field == "spark.sparkglass.control.max-connections-per-address"

"""Attacks on the driver control endpoint, over real sockets against the endpoint running in
its own process.

The endpoint runs in a child Python process (no Spark: a do-nothing round transport behind
it), so that its memory and thread count are its own and can be read from ``/proc``.
"""

from __future__ import annotations

import select
import socket
import time
from datetime import timedelta

import httpx
import pytest

from sparkglass.runtime.control.client import (
    ControlClient,
    ControlRejected,
    ControlTLS,
    ControlUntrusted,
)
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

MB = 1024 * 1024


# ------------------------------------------------------------------ bodies before authentication
def test_unauthenticated_200mb_post_is_refused_before_the_body_is_read(serve):
    ep = serve()
    peak_before_kb = ep.status("VmHWM")
    size = 200 * MB
    sent = 0
    chunk = b"\0" * (256 * 1024)
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        sock.sendall(
            request_head("POST", "/api/v1/vertices/parse/rounds", {"Content-Length": str(size)})
        )
        deadline = time.monotonic() + 120
        answered = False
        while sent < size and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:
                answered = True
                break
            if writable:
                try:
                    sent += sock.send(chunk[: size - sent])
                except (BrokenPipeError, ConnectionResetError):
                    answered = True  # closed on us: the answer is already in our buffer
                    break
        assert answered, f"no answer before the whole body was sent ({sent // MB} MB)"
        status, headers, body = read_response(sock)
    assert status == 401 and headers["connection"] == "close"
    assert body == {"error": "missing or wrong bearer token"}
    assert sent < 64 * MB, f"the client had to send {sent // MB} MB before the answer"
    grown_mb = (ep.status("VmHWM") - peak_before_kb) / 1024
    assert grown_mb < 20, f"the endpoint's peak memory grew by {grown_mb:.0f} MB"


def test_authenticated_body_limits(serve):
    ep = serve(max_body_bytes=1024)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    path = "/api/v1/vertices"

    # Content-Length: -1 made the endpoint read until the client closed: now 400 at once.
    for bad in ("-1", "ten", "1e3"):
        with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
            sock.sendall(request_head("POST", path, {**auth, "Content-Length": bad}))
            status, headers, body = read_response(sock, timeout_s=5)
            assert status == 400 and headers["connection"] == "close", bad
            assert body["field"] == "Content-Length" and "0–1024" in body["error"]
            assert bad in body["error"]

    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        sock.sendall(request_head("POST", path, {**auth, "Content-Length": str(200 * MB)}))
        status, headers, body = read_response(sock, timeout_s=5)
        assert status == 413 and body["field"] == "Content-Length"
        assert "allowed 0–1024" in body["error"]

    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        sock.sendall(request_head("POST", path, {**auth, "Transfer-Encoding": "chunked"}))
        sock.sendall(b"10000000\r\n" + b"x" * 65536)
        status, _, body = read_response(sock, timeout_s=5)
        assert status == 411 and body["field"] == "Transfer-Encoding"

    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        sock.sendall(
            request_head("GET", path, auth, ("Content-Length", "3"), ("Content-Length", "9"))
        )
        status, _, body = read_response(sock, timeout_s=5)
        assert status == 400 and body["field"] == "Content-Length"

    # A small body within the limit is drained and the connection stays usable.
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as sock:
        sock.sendall(request_head("GET", path, {**auth, "Content-Length": "5"}) + b"hello")
        status, headers, body = read_response(sock, timeout_s=5)
        assert status == 200 and body == {"vertices": ["parse"]}
        assert headers.get("connection") != "close"
        sock.sendall(request_head("GET", path, auth))
        assert read_response(sock, timeout_s=5)[0] == 200


# ------------------------------------------------------------- idle connections and threads
def test_200_idle_connections_do_not_hold_200_threads(serve):
    cap = 64
    # A long timeout: the connections held open must still be open when counted. All come
    # from one address, so that address may hold them all (the per-address cap has its own
    # tests in test_control_slow_client.py).
    ep = serve(max_connections=cap, max_connections_per_address=cap, connection_timeout_s=120.0)
    threads_before = ep.status("Threads")
    sockets = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(200)]
    try:
        # The server closes every connection beyond the cap as soon as it accepts it.
        until(
            lambda: sum(closed_by_peer(s) for s in sockets) >= 200 - cap,
            30,
            f"{200 - cap} connections beyond the cap closed",
        )
        threads = ep.status("Threads")
        assert threads <= threads_before + cap + 2, (threads_before, threads)
        open_ones = [s for s in sockets if not closed_by_peer(s)]
        assert len(open_ones) == cap
    finally:
        for s in sockets:
            s.close()
    # Once they are gone, the endpoint serves again (slots are given back).
    until(lambda: ep.status("Threads") <= threads_before + 2, 30, "the idle threads ended")
    r = httpx.get(ep.url + "/api/v1/vertices", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200


def test_idle_and_stalled_connections_are_closed_after_the_timeout(serve):
    ep = serve(connection_timeout_s=1.0)
    idle = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
    stalled = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
    kept_alive = socket.create_connection(("127.0.0.1", ep.port), timeout=10)
    try:
        stalled.sendall(b"GET /api/v1/vertices HTTP/1.1\r\nHost: dri")  # never finished
        kept_alive.sendall(request_head("GET", "/healthz", {}))
        assert read_response(kept_alive)[0] == 200  # then idles on a keep-alive connection
        start = time.monotonic()
        for name, sock in (("idle", idle), ("stalled", stalled), ("keep-alive", kept_alive)):
            until(lambda s=sock: closed_by_peer(s), 10, f"the {name} connection closed")
        elapsed = time.monotonic() - start
        assert 0.5 <= elapsed < 10, elapsed
    finally:
        for s in (idle, stalled, kept_alive):
            s.close()


# ---------------------------------------------------------------------------------- TLS
@pytest.fixture
def tls_endpoint(serve, certificates) -> Endpoint:
    ep = serve(tls_cert_file=certificates["cert"], tls_key_file=certificates["key"])
    assert ep.url.startswith("https://")
    return ep


def test_tls_client_with_the_right_anchor_works(tls_endpoint, certificates):
    issued = certificates["issued"]
    # The CA file, against the URL's own address (127.0.0.1 is a SAN).
    with ControlClient(tls_endpoint.url, TOKEN, tls=ControlTLS(ca_file=certificates["cert"])) as c:
        assert c.vertices() == ["parse"]
    # Pinned, reaching the driver by IP but checking the Service's DNS name (as in a cluster).
    pinned = ControlTLS(ca_pem=issued.cert_pem, server_name="app-driver.team-a.svc")
    with ControlClient(tls_endpoint.url, TOKEN, tls=pinned) as c:
        assert c.vertices() == ["parse"]


def test_tls_client_with_a_wrong_anchor_or_name_fails_clearly(tls_endpoint, certificates):
    wrong = ControlTLS(ca_pem=certificates["other"].cert_pem)
    with (
        ControlClient(tls_endpoint.url, TOKEN, tls=wrong) as c,
        pytest.raises(ControlUntrusted, match="failed verification against the pinned"),
    ):
        c.vertices()
    misnamed = ControlTLS(ca_pem=certificates["issued"].cert_pem, server_name="elsewhere.svc")
    with (
        ControlClient(tls_endpoint.url, TOKEN, tls=misnamed) as c,
        pytest.raises(ControlUntrusted, match="TLS certificate failed verification"),
    ):
        c.vertices()
    # Without an anchor, the system's CAs do not vouch for the driver either.
    with (
        ControlClient(tls_endpoint.url, TOKEN) as c,
        pytest.raises(ControlUntrusted, match="the system's CAs"),
    ):
        c.vertices()


def test_plain_http_to_the_tls_endpoint_fails(tls_endpoint, certificates):
    plain = tls_endpoint.url.replace("https://", "http://")
    r = httpx.get(plain + "/api/v1/vertices", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 400 and "serves HTTPS only" in r.json()["error"]
    with ControlClient(plain, TOKEN) as c, pytest.raises(ControlRejected, match="HTTPS only"):
        c.vertices()
    # A client given a trust anchor refuses to send its token over http:// at all.
    with pytest.raises(ValueError, match="base_url: expected an https:// URL"):
        ControlClient(plain, TOKEN, tls=ControlTLS(ca_file=certificates["cert"]))


def test_a_stalled_handshake_blocks_no_one(serve, certificates):
    ep = serve(
        tls_cert_file=certificates["cert"],
        tls_key_file=certificates["key"],
        connection_timeout_s=2.0,
    )
    with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as stalled:
        stalled.sendall(b"\x16\x03\x01")  # the start of a ClientHello, never finished
        with ControlClient(ep.url, TOKEN, tls=ControlTLS(ca_file=certificates["cert"])) as c:
            assert c.vertices() == ["parse"]
        until(lambda: closed_by_peer(stalled), 10, "the stalled handshake was closed")


def test_issued_certificate_is_per_application_p256_one_year(certificates):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from sparkglass.operator.certificates import issue_control_certificate

    issued = certificates["issued"]
    cert = x509.load_pem_x509_certificate(issued.cert_pem.encode())
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "app-driver",
        "app-driver.team-a",
        "app-driver.team-a.svc",
        "app-driver.team-a.svc.cluster.local",
    ]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    # not_valid_before_utc from cryptography 42 on; the naive one before (UTC either way).
    start = getattr(cert, "not_valid_before_utc", None) or cert.not_valid_before.replace(
        tzinfo=issued.not_after.tzinfo
    )
    lifetime = issued.not_after - start
    assert 365 <= lifetime.days <= 366
    assert issued.secret_data() == {"tls.crt": issued.cert_pem, "tls.key": issued.key_pem}
    assert issued.fingerprint_sha256 != certificates["other"].fingerprint_sha256
    with pytest.raises(ValueError, match=r"service: expected a DNS-1123 label"):
        issue_control_certificate("App_Driver", "team-a")
    with pytest.raises(ValueError, match=r"validity: .* out of range: allowed 1 hour–825 days"):
        issue_control_certificate("d", "n", validity=timedelta(days=3650))
    with pytest.raises(ValueError, match=r"ip_addresses: "):
        issue_control_certificate("d", "n", ip_addresses=["10.0.0.300"])

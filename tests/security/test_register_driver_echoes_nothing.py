"""Attack on ``PUT /api/v1/namespaces/local/applications/{app}`` (register a driver, admin):
the service fetches the driver URL it is given and used to answer a failure with what it got
and what it was given. Pointed at any server the service can reach (an internal page, a
metadata endpoint), the 502 relayed that server's body (pydantic quoting the JSON it could not
read as a pipeline); a ``user:password@`` in the URL came back in the 502 and went into the
audit trail; a token with CR/LF came back inside httpx's "Illegal header value" refusal.

Against a real ``sparkglass serve`` process on 127.0.0.1 and real HTTP servers standing in
for the URL's target: every refusal says what failed in the service's own words, without the
body, the credentials or the token, and the audit trail holds none of them either.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer, free_port

pytestmark = pytest.mark.timeout(180)

APP = "/api/v1/namespaces/local/applications/probe"
AUDIT = "/api/v1/namespaces/local/audit-events"
SECRET = "INTERNAL-PAGE-SECRET-4711"
PASSWORD = "hunter2-in-the-url"


class _Target(http.server.BaseHTTPRequestHandler):
    """A server the URL points at: a JSON body that is no pipeline (200), or an error page."""

    status = 200
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        body = f'{{"internal": "{SECRET}", "vertices": 5, "name": 1}}'.encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


class _ErrorPage(_Target):
    status = 500
    requests: ClassVar[list[str]] = []


@pytest.fixture
def targets() -> Iterator[dict[str, str]]:
    _Target.requests.clear()
    servers = {
        "json": http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Target),
        "error": http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ErrorPage),
    }
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {k: f"127.0.0.1:{s.server_address[1]}" for k, s in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    # One process for the file: every registration here is refused, so none changes what
    # the next test meets (the audit test reads all of them, and holds for each).
    with ServiceProcess(tmp_path_factory.mktemp("service"), None) as svc:
        yield svc


def register(http_client: httpx.Client, body: dict[str, str]) -> httpx.Response:
    return http_client.put(APP, json=body, headers=bearer("admin"))


def assert_echoes_nothing(answer: httpx.Response, *secrets: str) -> None:
    for secret in (SECRET, PASSWORD, *secrets):
        assert secret not in answer.text, answer.text
    for control in ("\r", "\n", "\\r", "\\n"):
        assert control not in answer.json()["detail"], answer.text


def test_the_fetched_body_is_not_relayed(service: ServiceProcess, targets: dict[str, str]) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        answer = register(client, {"driverUrl": f"http://{targets['json']}", "driverToken": "t"})
        assert answer.status_code == 502, answer.text
        assert_echoes_nothing(answer)
        assert "GET /api/v1/pipeline" in answer.json()["detail"]
        assert "not" in answer.json()["detail"] or "else" in answer.json()["detail"]
        answer = register(client, {"driverUrl": f"http://{targets['error']}", "driverToken": "t"})
        assert answer.status_code == 502, answer.text
        assert_echoes_nothing(answer)
        assert "HTTP 500" in answer.json()["detail"], answer.text
        answer = register(
            client, {"driverUrl": f"http://127.0.0.1:{free_port()}", "driverToken": "t"}
        )
        assert answer.status_code == 502 and "cannot be reached" in answer.text, answer.text


@pytest.mark.parametrize(
    "url",
    [
        "http://user:{password}@{json}",
        "https://user:{password}@{json}/",
        "http://user:{password}@[::1",
        "http://{password}@{json}",
    ],
)
def test_credentials_in_the_url_are_refused_unechoed(
    service: ServiceProcess, targets: dict[str, str], url: str
) -> None:
    """The URL is stored, shown and audited: one with credentials is refused (422 naming
    ``driverUrl``), and neither the refusal nor the audit trail repeats them."""
    url = url.format(password=PASSWORD, json=targets["json"])
    with httpx.Client(base_url=service.url, timeout=30) as client:
        answer = register(client, {"driverUrl": url, "driverToken": "t"})
        assert answer.status_code == 422, answer.text
        assert "driverUrl" in answer.json()["detail"], answer.text
        assert_echoes_nothing(answer)
        # With a certificate too: the driverCaPem check used to quote the URL.
        answer = register(client, {"driverUrl": url, "driverToken": "t", "driverCaPem": "x"})
        assert answer.status_code == 422, answer.text
        assert_echoes_nothing(answer)
    assert _Target.requests == []  # nothing was asked with them


@pytest.mark.parametrize(
    "token", ["s3cr3t\r\nX-Injected: 1", "s3cr3t\nen", "s3cr3t en", "s3cr3t\x00", "s3cr3t\x7f"]
)
def test_a_token_with_control_characters_is_refused_unechoed(
    service: ServiceProcess, targets: dict[str, str], token: str
) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        answer = register(client, {"driverUrl": f"http://{targets['json']}", "driverToken": token})
        assert answer.status_code == 422, answer.text
        assert "driverToken" in answer.json()["detail"], answer.text
        assert_echoes_nothing(answer, "X-Injected", "s3cr3t")
        for error in answer.json()["errors"]:
            assert set(error) == {"loc", "msg", "type"}, error  # no "input", no "ctx"
    assert _Target.requests == []


def test_the_audit_trail_of_a_failed_registration_holds_no_body_and_no_password(
    service: ServiceProcess, targets: dict[str, str]
) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        answer = register(client, {"driverUrl": f"http://{targets['json']}", "driverToken": "t"})
        assert answer.status_code == 502
        answer = register(
            client, {"driverUrl": f"http://u:{PASSWORD}@{targets['json']}", "driverToken": "t"}
        )
        assert answer.status_code == 422
        # The audit writer flushes in the background: wait for the registration's event.
        deadline = time.monotonic() + 30
        while True:
            events = client.get(AUDIT, headers=bearer("admin"), params={"application": "probe"})
            assert events.status_code == 200, events.text
            if any(e["action"] == "register" for e in events.json()):
                break
            assert time.monotonic() < deadline, events.text
            client.get("/healthz")  # a request in between, not a sleep
        assert SECRET not in events.text and PASSWORD not in events.text, events.text

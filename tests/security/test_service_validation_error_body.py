"""The 422 the service serves is the 422 it documents.

``/openapi.json`` described every 422 as FastAPI's default, ``{"detail": [{"loc", "msg",
"type", "input", "ctx"}]}``, while the service answers ``{"detail": "<one line>", "errors":
[...]}``: a client generated from the document fails on the first bad parameter, and the
served ``errors`` repeated the value given (``input``, and ``ctx`` quoting it), a token or a
URL with a password included. Against a real ``sparkglass serve`` process on 127.0.0.1: each
route's documented 422 schema validates the body it serves, the example in
``service/README.md`` is the body served, and no value given comes back in ``errors``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from tests.security.service_process import REPO, ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(180)

APP = "/api/v1/namespaces/local/applications/flights"

#: (method, OpenAPI path, URL, params, JSON body, role): requests the service refuses with 422.
BAD_REQUESTS: list[tuple[str, str, str, dict[str, Any], Any, str]] = [
    (
        "get",
        "/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/data-sample",
        f"{APP}/vertices/parse/data-sample",
        {"maxRecords": "0"},
        None,
        "viewer",
    ),
    (
        "get",
        "/api/v1/namespaces/{namespace}/applications/{application}/vertices/{vertex}/data-sample",
        f"{APP}/vertices/parse/data-sample",
        {"subtaskIndex": "lots", "maxRecords": "9999"},
        None,
        "viewer",
    ),
    (
        "put",
        "/api/v1/namespaces/{namespace}/applications/{application}",
        APP,
        {},
        {"driverUrl": "http://127.0.0.1:9", "driverToken": "secret-token\r\nX: 1"},
        "admin",
    ),
    (
        "put",
        "/api/v1/namespaces/{namespace}/applications/{application}",
        APP,
        {},
        {"driverUrl": 12},
        "admin",
    ),
    (
        "get",
        "/api/v1/namespaces/{namespace}/audit-events",
        "/api/v1/namespaces/local/audit-events",
        {"limit": "-1"},
        None,
        "admin",
    ),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    driver = FakeDriver()
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(tmp_path_factory.mktemp("svc"), server.url) as svc,
    ):
        yield svc


def documented_422(document: dict[str, Any], method: str, path: str) -> jsonschema.Validator:
    """A validator of the 422 body the document gives for ``method path``."""
    response = document["paths"][path][method]["responses"]["422"]
    schema = response["content"]["application/json"]["schema"]
    root = {**schema, "components": document["components"]}
    cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
    return cls(root)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("method", "path", "url", "params", "body", "role"), BAD_REQUESTS)
def test_each_served_422_is_the_documented_one(
    service: ServiceProcess,
    method: str,
    path: str,
    url: str,
    params: dict[str, Any],
    body: Any,
    role: str,
) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        document = client.get("/openapi.json").json()
        answer = client.request(method, url, params=params, json=body, headers=bearer(role))
    assert answer.status_code == 422, answer.text
    served = answer.json()
    errors = sorted(documented_422(document, method, path).iter_errors(served), key=str)
    assert not errors, [e.message for e in errors]
    # Nothing given comes back in the list: the value, or its quote in ``ctx``.
    for error in served["errors"]:
        assert set(error) == {"loc", "msg", "type"}, error
    assert "secret-token" not in answer.text


def test_the_readme_example_is_the_body_served(service: ServiceProcess) -> None:
    text = (REPO / "service" / "README.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]
    (example,) = [b for b in blocks if isinstance(b, dict) and "errors" in b]
    with httpx.Client(base_url=service.url, timeout=30) as client:
        answer = client.get(
            f"{APP}/vertices/parse/data-sample",
            params={"maxRecords": "0"},
            headers=bearer("viewer"),
        )
    assert answer.status_code == 422
    assert answer.json() == example


def test_the_document_names_no_other_422_body(service: ServiceProcess) -> None:
    with httpx.Client(base_url=service.url, timeout=30) as client:
        document = client.get("/openapi.json").json()
    refs = {
        op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
        for item in document["paths"].values()
        for op in item.values()
        if "422" in op.get("responses", {})
    }
    assert refs == {"#/components/schemas/ValidationErrorBody"}, refs
    assert "HTTPValidationError" not in document["components"]["schemas"]

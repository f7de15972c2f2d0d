"""The real service, on loopback, receiving the operator's DataSample results.

The operator hands every result to the service (``PUT .../datasamples/{name}/result``); tests
of the operator run this service on the store they read (``store_url``) and give the operator
:meth:`ResultService.operator_args`. The operator's identity is a local-mode token of user
``sparkglass-operator``, the service's only result writer (:func:`serve_results`).

Tests of the route itself run it in Kubernetes mode instead, in front of the API server
stand-in (:func:`serve_results_in_kubernetes`): there the operator is the service account
``tests/service/kube_fixtures.py`` names, its token ``operator-token``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import kmock
from cryptography.fernet import Fernet

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread
from tests.service.kube_fixtures import OPERATOR, install

WRITER = "sparkglass-operator"


@dataclass(frozen=True)
class ResultService:
    """A running service: its URL, the store it saves into and the operator's token file."""

    url: str
    store_url: str
    token_file: Path

    def operator_args(self) -> list[str]:
        """What the operator needs to hand results to this service."""
        return [
            "--service-internal-url",
            self.url,
            "--service-token-file",
            str(self.token_file),
        ]


@contextmanager
def serve_results(store_url: str, directory: Path) -> Iterator[ResultService]:
    """Run the service on ``store_url`` until the block ends; its files go in ``directory``."""
    token = secrets.token_urlsafe(24)
    tokens = directory / "service-tokens"
    tokens.write_text(f"{token},{WRITER},admin\n")
    token_file = directory / "operator-token"
    token_file.write_text(token)
    app = create_app(
        Settings(
            database_url=store_url,
            tokens_file=tokens,
            result_writers=WRITER,
            store_key=Fernet.generate_key().decode(),
        )
    )
    with ServerThread(app) as server:
        yield ResultService(server.url, store_url, token_file)


@contextmanager
def serve_results_in_kubernetes(kube: kmock.KubernetesEmulator, store_url: str) -> Iterator[str]:
    """Run the service in Kubernetes auth and execution modes on ``store_url`` until the block
    ends, the operator its only result writer; yields its URL.

    ``kube`` (a ``ReviewingEmulator``) gets the reviews and the sparkglass CRDs first
    (``install``): the service asks it who the caller is and which DataSample a result is
    for. The store's engine is disposed of afterwards: no connection outlives the block.
    """
    install(kube)
    app = create_app(
        Settings(
            database_url=store_url,
            auth_mode="kubernetes",
            execution_mode="kubernetes",
            kube_api_url=str(kube.url),
            kube_token="service-account-token",
            result_writers=OPERATOR,
        )
    )
    try:
        with ServerThread(app) as server:
            yield server.url
    finally:
        app.state.sparkglass.sessions.kw["bind"].dispose()

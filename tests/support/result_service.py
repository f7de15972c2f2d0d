"""The real service, on loopback, receiving the operator's DataSample results.

The operator hands every result to the service (``PUT .../datasamples/{name}/result``); tests
of the operator run this service on the store they read (``store_url``) and give the operator
:meth:`ResultService.operator_args`. The operator's identity is a local-mode token of user
``sparkglass-operator``, the service's only result writer.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet

from sparkglass.service.app import create_app
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread

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

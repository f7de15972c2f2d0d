"""Two service replicas (two apps sharing one store and its key), the local application
``flights`` registered against a fake driver."""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet

from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.settings import Settings
from tests.service.fake_driver import TOKEN, FakeDriver

STORE_KEY = Fernet.generate_key().decode()


def replicas(db_url: str, tokens_file: Path, driver: FakeDriver, refresh: float) -> list:
    apps = []
    for _ in range(2):
        app = create_app(
            Settings(
                database_url=db_url,
                tokens_file=tokens_file,
                refresh_interval_seconds=refresh,
                round_timeout_seconds=60,  # generous: no test here times a round out
                round_grace_seconds=0,
                poll_interval_seconds=0.05,
                store_key=STORE_KEY,  # replicas sharing a store share its key
            )
        )
        apps.append(app)
    register_local_application(apps[0].state.sparkglass.sessions, "flights", driver.url, TOKEN)
    return apps

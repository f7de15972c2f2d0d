"""Regression after two merges: ``GET .../progress`` sent the stored ciphertext as the token.

Driver tokens are stored encrypted (``fernet:...``, docs/security.md) and the new progress
route read the column as it is: every progress request carried ``Authorization: Bearer
fernet:...`` to the driver, which refused it (the page's live metrics were dead with any
registered driver), and the token's ciphertext went to whoever answers at the driver URL.
Now the route decrypts it like rounds do; the driver sees the real token only, and never a
``fernet:`` value. The real ``sparkglass serve`` process over HTTP, the fake driver over HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import TOKEN, FakeDriver, ServerThread

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def driver_and_service(tmp_path: Path) -> Iterator[tuple[FakeDriver, ServiceProcess]]:
    driver = FakeDriver()
    with ServerThread(driver.app()) as server, ServiceProcess(tmp_path, server.url) as svc:
        yield driver, svc


def test_progress_carries_the_decrypted_token_only(
    driver_and_service: tuple[FakeDriver, ServiceProcess],
) -> None:
    driver, svc = driver_and_service
    url = f"{svc.url}/api/v1/namespaces/local/applications/flights/progress"
    answer = httpx.get(url, headers=bearer("viewer"), timeout=20)
    assert answer.status_code == 200, answer.text
    assert answer.json()["microBatches"] >= 1
    sent = [a for a in driver.authorizations if a is not None]
    assert sent and all(a == f"Bearer {TOKEN}" for a in sent), {
        a[:20] for a in sent if a != f"Bearer {TOKEN}"
    }
    assert not any("fernet:" in a for a in sent)

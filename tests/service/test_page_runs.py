"""The Data Sample page's application dropdown in headless Chromium:
applications whose driver ended stay listed, marked "(ended)", after the live ones, and the
page never selects one of them first; with none live it selects nothing and says why."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from sparkglass.service.catalog import register_local_application
from sparkglass.service.local import LocalService, start_local_service
from sparkglass.service.store.orm import Application

from .browser import chromium_page
from .fake_driver import PIPELINE, TOKEN, FakeDriver

pytestmark = pytest.mark.browser


def _ended_driver_url() -> str:
    """A loopback URL nothing listens on any more."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _register_ended(service: LocalService, name: str) -> None:
    """Register ``name`` as an earlier run left it: its driver gone, last seen 10 min ago."""
    state = service.app.state.sparkglass
    register_local_application(
        state.sessions, name, _ended_driver_url(), TOKEN, description=PIPELINE, sampling={}
    )
    with state.sessions.begin() as session:
        session.execute(
            update(Application)
            .where(Application.name == name)
            .values(driver_seen_at=Application.driver_seen_at - 600_000)
        )


@pytest.fixture
def service(tmp_path: Path, fake_driver: FakeDriver) -> Iterator[LocalService]:
    svc = start_local_service(
        {"flights": (fake_driver.url, TOKEN)},
        database_url=f"sqlite:///{tmp_path / 'page.db'}",
        poll_interval_seconds=0.05,
        round_grace_seconds=0,
    )
    # Named to sort before "flights": the page used to select the first one listed.
    _register_ended(svc, "a-demo-before")
    yield svc
    svc.stop()


def _options(page: Any) -> list[dict[str, str]]:
    return page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=app-select] option')]"
        ".map((o) => ({value: o.value, text: o.textContent, state: o.dataset.driverState,"
        " title: o.title}))"
    )


def test_an_ended_application_is_marked_and_never_selected_first(service: LocalService) -> None:
    with chromium_page() as page:
        page.goto(service.page_url)
        page.wait_for_selector("[data-testid=vertex-parse]")
        assert page.input_value("[data-testid=app-select]") == "local/flights"
        options = _options(page)
        assert [o["value"] for o in options] == ["local/flights", "local/a-demo-before"]
        assert options[0]["state"] == "live" and "(ended)" not in options[0]["text"]
        assert options[1]["text"].endswith("(ended)") and options[1]["state"] == "ended"
        assert "last seen" in options[1]["title"]
        assert page.text_content("[data-testid=app-message]") == ""

        # Picked by hand, it is shown with the reason no round can start.
        page.select_option("[data-testid=app-select]", "local/a-demo-before")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=app-message]').textContent"
            ".includes('does not answer')"
        )


def test_with_no_live_application_none_is_selected(
    service: LocalService, fake_driver: FakeDriver
) -> None:
    # "flights" restarted elsewhere and ended in turn: every driver in the store is gone.
    _register_ended(service, "flights")
    with chromium_page() as page:
        page.goto(service.page_url)
        page.wait_for_function(
            "() => document.querySelector('[data-testid=app-message]').textContent"
            ".includes('No application')"
        )
        assert page.input_value("[data-testid=app-select]") == ""
        assert all(o["text"].endswith("(ended)") for o in _options(page)[1:])
        assert page.locator("[data-testid=vertex-parse]").count() == 0  # no graph drawn

"""Headless Chromium through Playwright (Debian's chromium, no downloaded browser)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("SPARKGLASS_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def artifacts_dir() -> Path:
    """Where screenshots go: ``$SPARKGLASS_ARTIFACTS`` or ``<repo>/test-artifacts``
    (git-ignored)."""
    default = Path(__file__).parents[2] / "test-artifacts"
    root = Path(os.environ.get("SPARKGLASS_ARTIFACTS", default))
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A fresh page in headless Chromium; skips the test when Chromium is not installed."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            yield page
        finally:
            browser.close()


# ------------------------------------------------------------------ the page's records grid
def open_vertex(page: Any, vertex: str, status: str = "COMPLETE") -> None:
    page.wait_for_selector(f"[data-testid=vertex-{vertex}]")
    page.click(f"[data-testid=vertex-{vertex}]")
    page.wait_for_function(
        f"() => document.querySelector('[data-testid=status]').textContent === '{status}'",
        timeout=20000,
    )
    page.wait_for_selector("[data-testid=record]")


def column(page: Any, name: str) -> list[str]:
    """The texts of column ``name`` in the shown rows (detail rows skipped)."""
    return page.evaluate(
        """(name) => {
            const heads = [...document.querySelectorAll('#records thead th')];
            const i = heads.findIndex((th) => th.dataset.column === name);
            if (i < 0) throw new Error('no column ' + name);
            return [...document.querySelectorAll('#records tbody tr[data-testid=record]')]
              .map((tr) => tr.children[i] ? tr.children[i].textContent : null);
        }""",
        name,
    )


def headers(page: Any) -> list[str]:
    return page.evaluate(
        "() => [...document.querySelectorAll('#records thead th')]"
        ".map((th) => th.dataset.column || '')"
    )


def downloaded(page: Any, testid: str) -> tuple[str, str]:
    with page.expect_download() as info:
        page.click(f"[data-testid={testid}]")
    download = info.value
    path = download.path()
    assert path is not None
    return download.suggested_filename, Path(path).read_text(encoding="utf-8")


# ------------------------------------------------------------------ the service behind the page
@contextmanager
def page_service(driver_url: str, token: str, directory: Path) -> Iterator[Any]:
    """The service in local mode in front of the fake driver at ``driver_url`` (application
    ``flights``), its store in ``directory``, polling fast: what the page tests look at."""
    from sparkglass.service.local import start_local_service

    svc = start_local_service(
        {"flights": (driver_url, token)},
        database_url=f"sqlite:///{directory / 'page.db'}",
        refresh_interval_seconds=60,
        poll_interval_seconds=0.05,
        round_grace_seconds=0,
    )
    try:
        yield svc
    finally:
        svc.stop()

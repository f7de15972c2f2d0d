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

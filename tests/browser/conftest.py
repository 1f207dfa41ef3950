"""Browser tests: Debian's chromium driven by Playwright (no browser download)."""

from __future__ import annotations

import os

import pytest

from tests.airflow.conftest import migrated_home  # noqa: F401  (session fixture)
from tests.browser.stack import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()

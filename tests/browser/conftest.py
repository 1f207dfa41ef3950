"""Browser tests: Debian's chromium driven by Playwright (no browser download)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.airflow.conftest import migrated_home  # noqa: F401  (session fixture)
from tests.browser.stack import CHROMIUM, CHROMIUM_ARGS
from tests.services import require_service


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        require_service("chromium", f"no {CHROMIUM}: apt-get install chromium (.ci/run does)")
    if importlib.util.find_spec("playwright") is None:
        require_service("playwright", "the Python package drives chromium: pip install -e '.[dev]'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()

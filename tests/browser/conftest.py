"""Browser tests: Playwright drives Debian's Chromium against pytest-django's live server.

`make test` installs Chromium (`apt-get install chromium`); set MRL_CHROMIUM to use
another binary. The live server runs in a thread of this process against the test
database (transactional tests: data is committed so the server thread sees it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, sync_playwright

# Playwright's sync API keeps an event loop on this thread; Django's ORM would refuse to
# run beside it. Tests call the ORM only between browser actions, never concurrently.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
]


def chromium_path() -> str:
    path = os.environ.get("MRL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        raise pytest.UsageError(
            f"browser tests need Chromium at {path}: `apt-get install chromium` "
            "(make test does it) or set MRL_CHROMIUM"
        )
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, transactional_db: None) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def log_in(page: Page, base_url: str, user: User, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")

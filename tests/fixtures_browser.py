"""The browser fixtures: Playwright drives Debian's Chromium.

`make test` installs Chromium; MRL_CHROMIUM overrides the binary. The pages load from
pytest-django's live server, which runs in a thread of this process on the test database
(transactional tests: the data is committed so the server sees it).

A plugin of the root conftest (``pytest_plugins``), not a folder's conftest: the browser
tests of tests/browser and tests/integration share the session's one Chromium (a second
sync Playwright could not start beside it). Playwright is imported only when a test asks
for a browser, so a session without browser tests runs where it is not installed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from playwright.sync_api import Browser, Locator, Page

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
    """One Chromium for the session (a second sync Playwright could not start beside it)."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread, and Django's ORM refuses to
    # run on a thread with a loop; the tests call the ORM only between browser actions.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser, transactional_db: None) -> Iterator[Page]:
    """A fresh browser context per test; any JavaScript error on the page fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
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


def point_at(page: Page, chart: Locator, x: float, y: float | None = None) -> None:
    """Move the mouse over data ``(x, y)`` of the Plotly ``chart`` (``y`` None: halfway up
    its plot area), scrolled into view, as a person points at a curve."""
    chart.scroll_into_view_if_needed()
    point = chart.evaluate(
        """(div, [x, y]) => {
             const xaxis = div._fullLayout.xaxis, yaxis = div._fullLayout.yaxis;
             const box = div.getBoundingClientRect();
             const top = y === null ? yaxis._length / 2 : yaxis.l2p(y);
             return {x: box.left + xaxis._offset + xaxis.l2p(x), y: box.top + yaxis._offset + top};
           }""",
        [x, y],
    )
    page.mouse.move(point["x"], point["y"])

"""The dark theme: with `prefers-color-scheme: dark`, pages are light text on dark."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page

from tests.browser.colours import contrast, luminance
from tests.conftest import log_in

pytestmark = pytest.mark.browser

COLOURS = """selectors => selectors.map(selector => {
  const element = document.querySelector(selector);
  const style = getComputedStyle(element);
  return [selector, style.backgroundColor, style.color];
})"""


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_pages_follow_the_colour_scheme(
    page: Page, live_server: object, alice: User, scheme: str
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}/experiments/new/")
    page.fill("[name=pool-1-group_size]", "1")
    page.get_by_test_id("preview").click()
    page.get_by_test_id("error-summary").wait_for()

    colours = {
        selector: (background, text)
        for selector, background, text in page.evaluate(
            COLOURS,
            [
                "body",
                ".card",
                "input[name=name]",
                "select[name=regime]",
                ".compose .help",
                ".error-summary",
                ".field-error",
            ],
        )
    }
    body_bg, body_fg = colours["body"]
    card_bg, _ = colours[".card"]
    if scheme == "dark":
        assert luminance(body_bg) < 0.05 and luminance(card_bg) < 0.05, colours
        assert luminance(body_fg) > 0.6, colours
        assert luminance(colours["input[name=name]"][0]) < 0.05, colours
        assert luminance(colours["select[name=regime]"][0]) < 0.05, colours
    else:
        assert luminance(body_bg) > 0.85 and luminance(card_bg) > 0.85, colours
        assert luminance(body_fg) < 0.05, colours
    # Every text reads on its ground (WCAG AA: 4.5:1), on the card it sits on.
    for selector in ("input[name=name]", "select[name=regime]"):
        assert contrast(*colours[selector]) >= 4.5, (selector, colours)
    for selector in (".compose .help", ".field-error"):
        assert contrast(card_bg, colours[selector][1]) >= 4.5, (selector, colours)
    summary_bg, summary_fg = colours[".error-summary"]
    assert contrast(summary_bg, summary_fg) >= 4.5, colours

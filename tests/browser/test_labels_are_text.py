"""Labels are text on the pages, read as a user sees them: a group label holding markup
shows as that markup's text in the compare page's legends and hovers (no live link, no
restyled text, on the page and on a saved comparison's address), a long label is
ellipsized in the legend and whole in the hover, and long labels and policy names keep
the summary table and the transfer matrix to their boxes."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Locator, Page, expect

from tests.browser.test_transfer_panel import _open
from tests.conftest import log_in, pool_config
from tests.fixtures_browser import point_at
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.models import SavedComparison
from webapp.core.services import lab_for_user
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

VAL = "val/reward@1"
GROUP_BY = "pool.0.chat_template"
LINK = '<a href="https://evil.example/" target="_self">SELF</a>'  # 55 characters
STYLED = '<span style="font-size:90px">BIG</span>'  # 39: shown whole in the legend
LONG = "%{y} " + "chat_template_" * 25  # a template in it, and 355 characters
LEVELS = {LINK: 0.2, STYLED: 0.5, LONG: 0.8}
LEGEND_CHARS = 40
PREFIX = f"{GROUP_BY} = "  # a legend names the grouping key before the label


def ellipsized(text: str) -> str:
    return text if len(text) <= LEGEND_CHARS else text[: LEGEND_CHARS - 1] + "…"


def seed(owner: User) -> list[Run]:
    """A run per label (the label as llama's chat template), llama's validation reward
    constant at the label's level over steps 0..19."""
    runs = []
    for regime, (label, level) in zip(("standalone", "prp", "sgt"), LEVELS.items(), strict=True):
        pool = pool_config()["pool"]
        pool[0] = {**pool[0], "chat_template": label}
        [run] = make_runs(owner, regime, seeds=(0,), pool=pool)
        add_series(run, "llama", VAL, range(20), lambda s, level=level: level)
        runs.append(run)
    return runs


def query(runs: list[Run]) -> str:
    ids = ",".join(str(run.pk) for run in runs)
    return urlencode({"runs": ids, "group_by": GROUP_BY, "metric": VAL, "policy": "llama"})


def legend_texts(page: Page) -> list[str]:
    panel = page.get_by_test_id("compare-panel").first
    expect(panel.locator(".legendtext")).to_have_count(3)
    return panel.locator(".legendtext").all_text_contents()


def check_no_markup(page: Page) -> None:
    """No link and no injected style anywhere in the panels (legends, hovers, titles)."""
    panels = page.locator("div[data-testid=compare-panel]")
    assert panels.locator("a").count() == 0
    assert panels.locator('[style*="90px"]').count() == 0
    assert page.locator("a[href^='https://evil.example']").count() == 0


def hover_text(page: Page, panel: Locator, step: float, level: float) -> str:
    """Point at (step, level) of the panel; the hover label's whole text."""
    point_at(page, panel, step, level)
    label = panel.locator(".hoverlayer .hovertext")
    expect(label).to_have_count(1)
    return label.text_content() or ""


def test_markup_in_a_group_label_is_shown_as_text_on_the_compare_page(
    page: Page, live_server: Any, alice: User
) -> None:
    base_url = live_server.url
    runs = seed(alice)
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}/compare/?{query(runs)}")

    legend = legend_texts(page)
    # The key, then the markup's text, literally; ellipsized to LEGEND_CHARS with "…".
    assert sorted(legend) == sorted(ellipsized(PREFIX + label) for label in LEVELS), legend
    assert all(len(shown) == LEGEND_CHARS and shown.endswith("…") for shown in legend)
    check_no_markup(page)

    # The hover names the whole label, as text ("%{y}" included, not a value). (At step
    # 2: the mode bar covers the top right corner.)
    panel = page.get_by_test_id("compare-panel").first
    assert LINK in hover_text(page, panel, 2, LEVELS[LINK])
    check_no_markup(page)
    assert LONG in hover_text(page, panel, 2, LEVELS[LONG])
    check_no_markup(page)

    # The summary table: headers of at most a few lines, the whole label in their title,
    # and the page no wider than the window.
    headers = page.locator("[data-testid=summary-table] th[title]")
    expect(headers.first).to_be_visible()
    titles = headers.evaluate_all("cells => cells.map((cell) => cell.title)")
    assert f"{PREFIX}{LONG}: final" in titles and f"{PREFIX}{LINK}: mean" in titles, titles
    widths = headers.evaluate_all(
        "cells => cells.map((cell) => cell.getBoundingClientRect().width)"
    )
    heights = headers.evaluate_all(
        "cells => cells.map((cell) => cell.getBoundingClientRect().height)"
    )
    assert max(widths) < 300 and max(heights) < 150, (widths, heights)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("[data-testid=summary-table] a").count() == 0

    # A saved comparison's stable address draws the same text.
    saved = SavedComparison.objects.create(
        lab=lab_for_user(alice),
        owner=alice,
        name="labels",
        query=query(runs),
        slug=secrets.token_urlsafe(9),
    )
    page.goto(f"{base_url}{saved.get_absolute_url()}")
    assert ellipsized(PREFIX + STYLED) in legend_texts(page)
    check_no_markup(page)

    # The bar view (relative improvement over the styled group) draws the labels as text
    # too: legends, and the y title that names the baseline.
    page.goto(
        f"{base_url}/compare/?{query(runs)}&{urlencode({'view': 'relative', 'baseline': STYLED})}"
    )
    bars = page.get_by_test_id("bar-panel").first
    expect(bars.locator(".legendtext")).to_have_count(2)
    shown = bars.locator(".legendtext").all_text_contents()
    assert ellipsized(PREFIX + LINK) in shown, shown
    y_title = bars.locator(".ytitle").text_content() or ""
    assert y_title.startswith('relative improvement over <span style="font-size:90px">'), y_title
    assert bars.locator("a").count() == 0 and bars.locator('[style*="90px"]').count() == 0


NAMES = [f"{name}_{'x' * 56}" for name in ("llama", "qwen", "gpt2")]  # 61-62 characters


def test_long_policy_names_keep_the_transfer_matrix_in_its_column(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base_url = live_server.url
    pool = [
        {**policy, "name": name} for policy, name in zip(pool_config()["pool"], NAMES, strict=True)
    ]
    events = [
        {
            "step": step,
            "source": NAMES[step % 3],
            "target": NAMES[(step + 1) % 3],
            "kind": "rollout",
            "prompt_id": f"p{step}",
            "count": 1,
            "weight": 1.0,
        }
        for step in range(6)
    ]
    _open(page, base_url, alice, make_experiment(regime="prp", seeds=(0,), pool=pool), events)

    matrix = page.locator("#transfer-matrix table")
    expect(matrix).to_be_visible()
    # The matrix ends before the chart beside it begins, and the chart within the panel.
    table = matrix.bounding_box()
    chart = page.get_by_test_id("transfer-over-time").bounding_box()
    card = page.locator("#transfers").bounding_box()
    assert table and chart and card
    assert table["x"] + table["width"] <= chart["x"], (table, chart)
    assert chart["x"] + chart["width"] <= card["x"] + card["width"], (chart, card)
    headers = matrix.locator("th[title]")
    expect(headers).to_have_count(6)  # a column and a row per policy
    assert sorted(headers.evaluate_all("cells => cells.map((cell) => cell.title)")) == sorted(
        NAMES * 2
    )
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

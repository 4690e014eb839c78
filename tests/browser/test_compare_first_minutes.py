"""What a new user saw on the compare page (issue 31), as the page shows it: legends that
name the grouping key, a message for a run id that does not exist instead of
"Loading..." forever, and charts drawn in the dark theme's colours (the compare page's
and the run page's)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from PIL import Image
from playwright.sync_api import Locator, Page, expect

from tests.browser.colours import contrast, luminance
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

VAL, TRAIN = "val/reward@1", "train/reward_mean"
KEY = "sgt.lambda_sgt"


def lambda_runs(owner: User) -> list[Run]:
    """SGT at lambda_sgt 0.05 and 0.5, one seed each; every policy logs two metrics."""
    runs = make_runs(owner, "sgt", seeds=[0], sgt={"lambda_sgt": 0.05})
    runs += make_runs(owner, "sgt", seeds=[0], sgt={"lambda_sgt": 0.5})
    for i, run in enumerate(runs):
        for policy in run.policy_names:
            for key in (VAL, TRAIN):
                add_series(run, policy, key, range(20), lambda s, i=i: s / 40 + i / 10)
    return runs


def log_in_fast(page: Page, base: str, user: User) -> None:
    """By a session cookie (the login form is tested elsewhere)."""
    client = Client()
    client.force_login(user)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base}]
    )


def compare_url(base: str, runs: list[Run], **extra: str) -> str:
    query = "&".join(f"{name}={value}" for name, value in extra.items())
    return f"{base}/compare/?runs={','.join(str(run.pk) for run in runs)}&{query}"


# --------------------------------------------------------------------------- 1. legends


def test_the_legends_and_the_summary_name_the_grouping_key(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    runs = lambda_runs(alice)
    log_in_fast(page, base, alice)
    page.goto(compare_url(base, runs, group_by=KEY))
    panels = page.get_by_test_id("compare-panel")
    expect(panels).to_have_count(6)  # 3 policies x 2 metrics
    legend = panels.first.locator(".legendtext")
    expect(legend).to_have_text([f"{KEY} = 0.05", f"{KEY} = 0.5"])
    for index in range(6):  # every panel's legend, as drawn
        texts = panels.nth(index).locator(".legendtext").all_text_contents()
        assert texts == [f"{KEY} = 0.05", f"{KEY} = 0.5"], texts
    headers = page.get_by_test_id("summary-table").locator("th")
    expect(headers.filter(has_text=f"{KEY} = 0.05:")).to_have_count(3)  # final, best, mean
    expect(headers.filter(has_text=f"{KEY} = 0.5:")).to_have_count(3)


# --------------------------------------------------------------------------- 2. unknown ids


def test_an_unknown_run_id_shows_a_message_not_loading(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    log_in_fast(page, base, alice)
    page.goto(f"{base}/compare/?run=99999")
    expect(page.get_by_test_id("selection-error")).to_have_text(
        "Run 99999 does not exist or is not visible to you."
    )
    expect(page.get_by_text("Loading")).to_have_count(0)
    expect(page.get_by_test_id("curves-card")).to_have_count(0)


def test_known_and_unknown_ids_draw_the_known_and_name_the_unknown(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    [run] = make_runs(alice, "sgt", seeds=[0])
    add_series(run, "llama", VAL, range(10), lambda s: s / 10)
    log_in_fast(page, base, alice)
    page.goto(f"{base}/compare/?run={run.pk}&run=99999&metric={VAL}&policy=llama")
    expect(page.get_by_test_id("selection-missing")).to_contain_text(
        "Run 99999 does not exist or is not visible to you."
    )
    expect(page.get_by_test_id("compare-panel")).to_have_count(1)
    expect(page.get_by_text("Loading")).to_have_count(0)


def test_a_failed_curves_request_replaces_loading_with_the_reason(
    page: Page, live_server: Any, alice: User
) -> None:
    """The curves' request answers an error (a run deleted since the page was served):
    the card says so where the curves would be."""
    base = live_server.url
    [run] = make_runs(alice, "sgt", seeds=[0])
    log_in_fast(page, base, alice)
    page.route(
        "**/api/v1/compare?*",
        lambda route: route.fulfill(
            status=404, content_type="application/json", body='{"error": "no such run"}'
        ),
    )
    page.goto(f"{base}/compare/?run={run.pk}")
    expect(page.get_by_test_id("compare-panels-error")).to_have_text(
        "The curves could not be loaded: no such run"
    )
    expect(page.get_by_text("Loading")).to_have_count(0)


# --------------------------------------------------------------------------- 3. theme

# The paper is the SVG's background; the plot area has a rect of its own only where its
# colour differs from the paper's (Plotly draws none when the two are the same).
DRAWN = """div => {
  const svg = div.querySelector(".main-svg");
  const plot = div.querySelector(".bglayer .bg");
  const texts = div.querySelectorAll(
    ".gtitle, .xtick text, .ytick text, .legendtext, .g-xtitle text");
  const grid = div.querySelector(".gridlayer path");
  return {
    paper: getComputedStyle(svg).backgroundColor,
    plot: plot ? getComputedStyle(plot).fill : getComputedStyle(svg).backgroundColor,
    texts: Array.from(new Set(Array.from(texts, t => getComputedStyle(t).fill))),
    grid: grid ? getComputedStyle(grid).stroke : null,
  };
}"""


def dominant(chart: Locator) -> str:
    """The colour most of the chart's rendered pixels have (its background), as rgb()."""
    with Image.open(io.BytesIO(chart.screenshot())) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    _count, (red, green, blue) = max(colours)
    return f"rgb({red}, {green}, {blue})"


def check_theme(chart: Locator, scheme: str) -> None:
    drawn = chart.evaluate(DRAWN)
    shown = dominant(chart)
    assert "rgba" not in drawn["paper"], drawn  # an opaque background, not the page's
    assert drawn["texts"] and drawn["plot"] and drawn["grid"], drawn
    for ground in (drawn["paper"], drawn["plot"], shown):
        if scheme == "dark":
            assert luminance(ground) < 0.05, (ground, drawn)
        else:
            assert luminance(ground) > 0.85, (ground, drawn)
    for fill in drawn["texts"]:
        assert contrast(drawn["paper"], fill) >= 4.5, (fill, drawn)
    # The grid reads on the plot area, but fainter than the text.
    assert 1.1 < contrast(drawn["plot"], drawn["grid"]) < contrast(drawn["plot"], drawn["texts"][0])


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_compare_charts_follow_the_colour_scheme(
    page: Page, live_server: Any, alice: User, scheme: str
) -> None:
    base = live_server.url
    runs = lambda_runs(alice)
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    log_in_fast(page, base, alice)
    page.goto(compare_url(base, runs, group_by=KEY))
    panels = page.get_by_test_id("compare-panel")
    expect(panels).to_have_count(6)
    expect(panels.first.locator(".legendtext")).to_have_count(2)
    check_theme(panels.first, scheme)
    # The bar view's charts too (the relative view over the 0.05 group).
    page.goto(compare_url(base, runs, group_by=KEY, view="relative", baseline="0.05"))
    bars = page.get_by_test_id("bar-panel")
    expect(bars.first.locator(".legendtext")).to_have_text([f"{KEY} = 0.5"])
    check_theme(bars.first, scheme)


def test_the_charts_switch_scheme_with_the_page(page: Page, live_server: Any, alice: User) -> None:
    """A reader who switches the system to dark mode with the page open gets dark charts."""
    base = live_server.url
    runs = lambda_runs(alice)
    page.emulate_media(color_scheme="light")
    log_in_fast(page, base, alice)
    page.goto(compare_url(base, runs, group_by=KEY))
    panels = page.get_by_test_id("compare-panel")
    expect(panels).to_have_count(6)
    check_theme(panels.first, "light")
    page.emulate_media(color_scheme="dark")
    page.wait_for_function(
        """() => { const svg = document.querySelector('[data-testid="compare-panel"] .main-svg');
                   return svg
                     && getComputedStyle(svg).backgroundColor !== "rgb(255, 255, 255)"; }"""
    )
    check_theme(page.get_by_test_id("compare-panel").first, "dark")


def test_the_run_page_charts_follow_the_dark_theme(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base = live_server.url
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    for policy in ("llama", "qwen", "gpt2"):
        add_series(run, policy, TRAIN, range(20), lambda s: s / 40)
    page.emulate_media(color_scheme="dark")
    log_in_fast(page, base, alice)
    page.goto(f"{base}{run.get_absolute_url()}")
    chart = page.get_by_test_id(f"chart-{TRAIN}")
    expect(chart.locator(".scatterlayer .trace")).to_have_count(3)
    check_theme(chart, "dark")

"""The run page's charts as a reader uses them: the unified hover with every policy's
value, a constant series' axis, smoothing, search and collapse, and CSV downloads.

Each check reads what the page drew (the hover label's text, the tick labels, the SVG
paths, what is visible) or what a click downloaded, not the data handed to Plotly.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import Locator, Page, expect

from tests.browser.colours import contrast
from tests.fixtures_browser import point_at
from webapp.compare.stats import ema
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

POLICIES = ("llama", "qwen", "gpt2")
REWARD, KL_COEF, LR = "train/reward_mean", "actor/kl_coef", "actor/lr"
STEPS = range(21)


def _reward(i: int, step: int) -> float:
    # Many digits, a trend and a zigzag (so that smoothing visibly changes the line).
    return math.pi * (i + 1) / 10 + step / 100 + 0.08 * (step % 2)


def _pool_reward(step: int) -> float:
    return sum(_reward(i, step) for i in range(len(POLICIES))) / len(POLICIES)


def _store(run: Run) -> None:
    """The points, straight into the database (the page reads them through the API)."""
    curves: dict[tuple[str, str], list[float]] = {}
    for i, policy in enumerate(POLICIES):
        curves[(policy, REWARD)] = [_reward(i, step) for step in STEPS]
        curves[(policy, KL_COEF)] = [0.001 for _ in STEPS]
        curves[(policy, LR)] = [3e-4 for _ in STEPS]
    curves[("_pool", REWARD)] = [_pool_reward(step) for step in STEPS]
    for (policy, key), values in curves.items():
        series = MetricSeries.objects.create(run=run, policy=policy, key=key)
        MetricPoint.objects.bulk_create(
            MetricPoint(series=series, step=step, value=value, wall_time=1.7e9 + step)
            for step, value in zip(STEPS, values, strict=True)
        )


def chart(page: Page, key: str) -> Locator:
    return page.get_by_test_id(f"chart-{key}")


def _lines(page: Page, key: str) -> list[dict[str, Any]]:
    """The drawn SVG lines of a chart: their path and opacity, in drawing order."""
    return chart(page, key).evaluate(
        """(div) => Array.from(div.querySelectorAll(".scatterlayer .trace"), (trace) => ({
             d: trace.querySelector("path.js-line")?.getAttribute("d") || "",
             opacity: Number(getComputedStyle(trace).opacity),
           }))"""
    )


def _ys(path: str) -> list[float]:
    return [float(y) for y in re.findall(r"[ML][-\d.]+,([-\d.]+)", path)]


def _variation(path: str) -> float:
    """How far the line goes up and down on screen (px): a zigzag goes far."""
    ys = _ys(path)
    return sum(abs(b - a) for a, b in itertools.pairwise(ys))


@pytest.fixture
def run_page(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> tuple[Page, Run]:
    """alice on the run page of a run with the points above, every chart drawn."""
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    _store(run)
    # Logged in by a session cookie (the login form is tested elsewhere; this saves ~2 s).
    client = Client()
    client.force_login(alice)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}]
    )
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    for key in (REWARD, KL_COEF, LR):
        expect(chart(page, key).locator(".scatterlayer .trace")).to_have_count(
            len(POLICIES) + (key == REWARD)
        )
    return page, run


def _hover_text(page: Page, key: str, step: int) -> str:
    """Move the pointer over ``step`` in the middle of a chart; the hover label's text."""
    point_at(page, chart(page, key), step)
    label = chart(page, key).locator(".hoverlayer .legend")
    expect(label).to_be_visible()
    return " ".join(label.locator("text").all_text_contents())


def test_the_hover_shows_every_policy_at_the_step_to_4_significant_digits(
    run_page: tuple[Page, Run],
) -> None:
    page, _ = run_page
    text = _hover_text(page, REWARD, 10)
    assert "step 10" in text
    for i, policy in enumerate(POLICIES):
        assert re.search(rf"{policy}\W+{_reward(i, 10):.4g}\b", text), text
    assert re.search(rf"pool mean\W+{_pool_reward(10):.4g}\b", text), text
    assert "_pool" not in text
    assert f"{_reward(0, 10):.5g}" not in text  # no more than 4 digits


def test_a_constant_series_reads_as_its_value(run_page: tuple[Page, Run]) -> None:
    page, _ = run_page
    for key, value in ((KL_COEF, 0.001), (LR, 3e-4)):
        ticks = chart(page, key).locator(".ytick text").all_text_contents()
        numbers = [float(t.replace("\u2212", "-").replace("μ", "e-6")) for t in ticks]
        assert len(numbers) >= 3, (key, ticks)
        # The axis spans the value's neighbourhood (not [v - 1, v + 1], where it reads 0).
        assert value * 0.8 <= min(numbers) < value < max(numbers) <= value * 1.2, (key, ticks)
        # The line is drawn in the middle of the chart, not along an edge.
        ys = {y for line in _lines(page, key) for y in _ys(line["d"])}
        height = chart(page, key).evaluate("(div) => div._fullLayout.yaxis._length")
        assert len(ys) == 1 and 0.4 * height < ys.pop() < 0.6 * height
    text = _hover_text(page, KL_COEF, 3)
    assert all(re.search(rf"{policy}\W+0\.001\b", text) for policy in POLICIES), text
    # A series that varies still autoranges over its values.
    ticks = [float(t) for t in chart(page, REWARD).locator(".ytick text").all_text_contents()]
    assert min(ticks) >= 0.2 and max(ticks) <= 1.3, ticks


def test_smoothing_draws_the_compare_page_ema_over_the_faint_raw_line(
    run_page: tuple[Page, Run],
) -> None:
    page, _ = run_page
    raw = _lines(page, REWARD)
    assert [line["opacity"] for line in raw] == [1.0] * 4

    page.get_by_test_id("chart-smoothing").fill("0.8")
    expect(page.get_by_test_id("chart-smoothing-value")).to_have_text("0.80")
    expect(chart(page, REWARD).locator(".scatterlayer .trace")).to_have_count(8)
    smoothed = _lines(page, REWARD)
    faint, lines = smoothed[:4], smoothed[4:]
    # The raw lines stay where they were, faint, under the smoothed ones.
    assert [line["d"] for line in faint] == [line["d"] for line in raw]
    assert all(line["opacity"] < 0.5 for line in faint)
    assert all(line["opacity"] == 1.0 for line in lines)
    for before, after in zip(raw, lines, strict=True):
        assert after["d"] != before["d"]
        assert _variation(after["d"]) < 0.6 * _variation(before["d"])
    # The hover reads the smoothed value (the compare page's EMA) and the raw one.
    smooth_llama = ema([_reward(0, step) for step in STEPS], 0.8)[10]
    text = _hover_text(page, REWARD, 10)
    assert re.search(rf"llama\W+{smooth_llama:.4g} \(raw {_reward(0, 10):.4g}\)", text), text

    page.get_by_test_id("chart-smoothing").fill("0")
    expect(page.get_by_test_id("chart-smoothing-value")).to_have_text("off")
    expect(chart(page, REWARD).locator(".scatterlayer .trace")).to_have_count(4)
    assert [line["d"] for line in _lines(page, REWARD)] == [line["d"] for line in raw]

    # The page's EMA is the compare page's (webapp.compare.stats.ema), non-finite values
    # included.
    values = ["1", "3", "NaN", "2", "-1", "Infinity", "5", "0.5", "-Infinity", "4"]
    for weight in (0.0, 0.3, 0.9, 0.99):
        got = page.evaluate(
            "([values, weight]) => window.MRLSmoothing.ema(values.map(Number), weight).map(String)",
            [values, weight],
        )
        want = ema([float(v) for v in values], weight)
        assert [float(v) for v in got] == pytest.approx(list(want), nan_ok=True), weight


def test_search_hides_charts_and_groups_and_a_heading_collapses_its_group(
    run_page: tuple[Page, Run],
) -> None:
    page, _ = run_page
    search = page.get_by_test_id("chart-search")
    search.fill("kl_coef")
    expect(chart(page, KL_COEF)).to_be_visible()
    expect(chart(page, REWARD)).to_be_hidden()
    expect(chart(page, LR)).to_be_hidden()
    expect(page.locator(".chart-group:visible")).to_have_count(1)
    # The display name matches too ("Learning rate" is actor/lr).
    search.fill("learning")
    expect(chart(page, LR)).to_be_visible()
    expect(chart(page, KL_COEF)).to_be_hidden()
    search.fill("no such metric")
    expect(page.locator(".chart:visible")).to_have_count(0)
    expect(page.get_by_test_id("charts-none-match")).to_be_visible()
    search.fill("")
    for key in (REWARD, KL_COEF, LR):
        expect(chart(page, key)).to_be_visible()
    expect(page.get_by_test_id("charts-none-match")).to_be_hidden()

    # A group's heading collapses its charts and expands them again, drawn at their size.
    group = chart(page, REWARD).locator("xpath=ancestor::div[contains(@class,'chart-group')]")
    toggle = group.locator(".chart-group-toggle")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(chart(page, REWARD)).to_be_hidden()
    expect(chart(page, KL_COEF)).to_be_visible()
    toggle.click()
    expect(chart(page, REWARD)).to_be_visible()
    box = chart(page, REWARD).locator(".main-svg").first.bounding_box()
    assert box is not None and box["width"] > 300


def _downloaded(page: Page, test_id: str) -> tuple[str, list[list[str]]]:
    with page.expect_download() as info:
        page.get_by_test_id(test_id).click()
    download = info.value
    path = download.path()
    assert path is not None
    with open(path, encoding="utf-8") as handle:
        return download.suggested_filename, list(csv.reader(io.StringIO(handle.read())))


def test_the_chart_and_run_csv_links_download_every_point(run_page: tuple[Page, Run]) -> None:
    page, run = run_page
    name, rows = _downloaded(page, f"chart-csv-{REWARD}")
    assert name == f"run-{run.pk}-train-reward_mean.csv"
    assert rows[0] == ["step", "policy", "value"]
    assert len(rows) == 1 + len(STEPS) * (len(POLICIES) + 1)
    assert rows[1:5] == [
        ["0", "llama", repr(_reward(0, 0))],
        ["0", "qwen", repr(_reward(1, 0))],
        ["0", "gpt2", repr(_reward(2, 0))],
        ["0", "pool mean", repr(_pool_reward(0))],  # as the chart names it
    ]

    name, rows = _downloaded(page, "run-csv")
    assert name.startswith(f"run-{run.pk}-") and name.endswith(".csv")
    assert rows[0] == ["key", "policy", "step", "value"]
    assert len(rows) == 1 + len(STEPS) * (3 * len(POLICIES) + 1)
    assert ["actor/kl_coef", "qwen", "20", "0.001"] in rows


def test_live_points_redraw_the_smoothed_lines_and_a_constant_axis_follows(
    run_page: tuple[Page, Run],
) -> None:
    page, run = run_page
    page.get_by_test_id("chart-smoothing").fill("0.5")
    expect(chart(page, REWARD).locator(".scatterlayer .trace")).to_have_count(8)
    before = _lines(page, REWARD)
    # The trainer logs two more steps; kl_coef of llama leaves 0.001 (a schedule starts).
    new_steps = range(len(STEPS), len(STEPS) + 2)
    for i, policy in enumerate(POLICIES):
        series = MetricSeries.objects.get(run=run, policy=policy, key=REWARD)
        MetricPoint.objects.bulk_create(
            MetricPoint(series=series, step=step, value=_reward(i, step)) for step in new_steps
        )
    kl = MetricSeries.objects.get(run=run, policy="llama", key=KL_COEF)
    MetricPoint.objects.create(series=kl, step=len(STEPS), value=0.002)

    def drawn_points() -> list[int]:
        return [len(_ys(line["d"])) for line in _lines(page, REWARD)]

    expected = [len(STEPS) + 2] * 3 + [len(STEPS)] + [len(STEPS) + 2] * 3 + [len(STEPS)]
    page.wait_for_function(
        """([key, expected]) => Array.from(
             document.querySelector(`[data-testid="chart-${key}"]`)
               .querySelectorAll(".scatterlayer .trace path.js-line"),
             (line) => ((line.getAttribute("d") || "").match(/[ML]/g) || []).length,
           ).join() === expected.join()""",
        arg=[REWARD, expected],
        timeout=8_000,
    )
    assert drawn_points() == expected  # faint raw and smoothed lines both grew
    after = _lines(page, REWARD)
    assert after[4]["d"] != before[4]["d"] and after[4]["opacity"] == 1.0
    # kl_coef now varies: its axis autoranges over 0.001 .. 0.002.
    ticks = chart(page, KL_COEF).locator(".ytick text")
    expect(ticks.first).not_to_have_text("0.0009", timeout=8_000)
    numbers = [float(t) for t in ticks.all_text_contents()]
    assert min(numbers) <= 0.0011 and max(numbers) >= 0.0019, numbers


def test_in_the_dark_theme_the_charts_text_reads_on_its_ground(run_page: tuple[Page, Run]) -> None:
    """Titles, tick labels and legends are drawn in the theme's text colour on what lies
    behind the chart (a white chart under light text was unreadable in the dark theme)."""
    page, _ = run_page
    page.emulate_media(color_scheme="dark")
    page.reload()
    expect(chart(page, REWARD).locator(".scatterlayer .trace")).to_have_count(len(POLICIES) + 1)
    ground, texts = chart(page, REWARD).evaluate(
        """div => {
             let node = div, ground = "";
             for (; node; node = node.parentElement) {
               ground = getComputedStyle(node).backgroundColor;
               if (!/^rgba\\(.*, 0\\)$/.test(ground) && ground !== "transparent") break;
             }
             const drawn = div.querySelectorAll(".gtitle, .xtick text, .ytick text, .legendtext");
             return [ground, Array.from(drawn, t => getComputedStyle(t).fill)];
           }"""
    )
    assert texts, "nothing drawn"
    for fill in set(texts):
        assert contrast(ground, fill) >= 4.5, (ground, fill)


def test_a_per_skill_key_is_named_and_grouped_by_the_catalogue_family(
    run_page: tuple[Page, Run],
) -> None:
    """``val/reward@1/<skill>`` is no catalogue entry but a family of one: its chart is
    titled "Validation reward@1 · addition" and sits with the rewards, not in Other."""
    page, run = run_page
    key = "val/reward@1/addition"
    series = MetricSeries.objects.create(run=run, policy=POLICIES[0], key=key)
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=step, value=0.1 * step, wall_time=1.7e9 + step)
        for step in (0, 10, 20)
    )
    page.reload()
    drawn = page.locator(f'#group-rewards [data-testid="chart-{key}"]')
    expect(drawn.locator(".gtitle")).to_have_text("Validation reward@1 · addition")
    expect(page.locator("#group-other")).to_have_count(0)

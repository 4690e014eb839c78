"""The compare page's bar views in the browser: Figure 12 (per-task evaluation) drawn for
seeded runs, the Figure 11 preset (relative improvement, zero line), and the message
for runs that were never evaluated."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.bars import NO_EVALUATIONS
from webapp.runs.models import Run

pytestmark = pytest.mark.browser

VAL = "val/reward@1"
TASKS = ("arith-addition", "larger", "smaller")
SCREENSHOTS = Path("/tmp")


def seed(owner: User) -> list[Run]:
    """standalone and sgt, two seeds each; llama and qwen evaluated on the synthetic
    suite at step 0 (the base model) and step 20, and validated every 5 steps."""
    runs = make_runs(owner, "standalone") + make_runs(owner, "sgt")
    for i, run in enumerate(runs):
        lift = 0.15 if run.regime == "sgt" else 0.05
        for p, policy in enumerate(("llama", "qwen")):
            for t, task in enumerate(TASKS):
                base = 0.2 + 0.1 * t + 0.05 * p
                add_series(
                    run,
                    policy,
                    f"eval/synthetic/{task}/accuracy",
                    (0, 20),
                    lambda s, b=base, i=i, lift=lift: b if s == 0 else b + lift + 0.02 * (i % 2),
                )
            add_series(
                run,
                policy,
                VAL,
                range(0, 21, 5),
                lambda s, i=i, lift=lift, p=p: 0.3 + 0.1 * p + lift * s / 20 + 0.01 * math.sin(i),
            )
    return runs


def bar_counts(page: Page) -> list[int]:
    """Per drawn bar panel, the number of bar shapes in its SVG."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="bar-panel"]'))
                 .map(p => p.querySelectorAll('.barlayer .trace.bars .point path').length)"""
    )


def test_figure_12_and_the_figure_11_preset(page: Page, live_server: object, alice: User) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    runs = seed(alice)
    ids = ",".join(str(run.pk) for run in runs)
    log_in(page, base_url, alice, "alice-password")

    page.goto(f"{base_url}/compare/?runs={ids}&view=tasks&policy=llama&policy=qwen")
    panels = page.get_by_test_id("bar-panel")
    expect(panels).to_have_count(2)
    expect(page.get_by_test_id("bars-title")).to_have_text("Per-task evaluation (Figure 12)")
    expect(page.get_by_test_id("curves-card")).to_be_hidden()
    page.wait_for_function(
        """() => document.querySelectorAll('[data-testid="bar-panel"] .barlayer .point path')
                 .length === 12"""
    )
    assert bar_counts(page) == [6, 6]  # 3 tasks x 2 groups per policy
    first = panels.first
    ticks = first.locator(".xaxislayer-above .xtick text").all_text_contents()
    assert ticks == list(TASKS)
    for task in TASKS:
        expect(first.locator(".xtick text", has_text=task)).to_be_visible()
    expect(first.locator(".ytitle")).to_have_text("accuracy")
    expect(first.locator(".xtitle")).to_have_text("task (synthetic)")
    expect(first.locator(".gtitle")).to_have_text("llama")
    legend = first.locator(".legendtext").all_text_contents()
    assert legend == ["standalone", "sgt", "base model (step 0)"]
    # The base model: one dashed line over each task's bars.
    dashes = first.locator(".shapelayer path").evaluate_all(
        "paths => paths.map(p => p.style.strokeDasharray)"
    )
    assert len(dashes) == 3 and all(dashes), dashes
    errors = first.locator(".errorbar").count()
    assert errors == 6
    expect(page.get_by_test_id("bars-interval-note")).to_be_hidden()  # the band's view
    href = page.get_by_test_id("bars-export-pdf").get_attribute("href") or ""
    assert href.startswith("/compare/bars.pdf?") and "view=tasks" in href
    assert "view=tasks" in page.url
    expect(page.locator("[data-testid=summary-table] table")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "bars-tasks.png"), full_page=True)

    # The Figure 11 preset: relative improvement over standalone, a dashed zero line.
    page.get_by_test_id("preset-fig11").click()
    # The preset's page writes its settings into the address (replacing preset=fig11).
    page.wait_for_url("**view=relative**")
    expect(page.get_by_test_id("bars-title")).to_have_text("Relative improvement (Figure 11)")
    panels = page.get_by_test_id("bar-panel")
    expect(panels).to_have_count(3)  # every pool policy: llama, qwen, gpt2 (no data)
    llama = panels.first
    expect(llama.locator(".ytitle")).to_have_text("relative improvement over standalone (%)")
    expect(llama.locator(".barlayer .point path")).to_have_count(1)  # sgt over standalone
    # Its error bar is the interval that counts standalone's variance, and the page says so
    # (seeds 0 and 1 in both groups: paired), not "± std" over the runs.
    expect(llama.locator(".errorbar")).to_have_count(1)
    expect(page.get_by_test_id("bars-interval-note")).to_have_text(
        "Error bars: 95% interval, paired delta method, 2 seeds (the baseline's variance included)."
    )
    expect(page.get_by_text("not the spread of the runs")).to_be_visible()
    expect(llama.locator(".xtick text")).to_have_text(["Validation reward@1"])
    zero = llama.locator(".shapelayer path")
    expect(zero).to_have_count(1)
    assert zero.evaluate("p => p.style.strokeDasharray") not in ("", "none")
    expect(panels.nth(2).get_by_text("no standalone value")).to_be_visible()
    assert "view=relative" in page.url and "baseline=standalone" in page.url
    expect(page.locator("[data-testid=summary-table] table")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "bars-relative.png"), full_page=True)

    # Back to the curves, from the View choice.
    page.get_by_test_id("view").select_option("curves")
    expect(page.get_by_test_id("compare-panel").first).to_be_visible()
    expect(page.get_by_test_id("bars-card")).to_be_hidden()


def test_runs_without_evaluations_say_so(page: Page, live_server: object, alice: User) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    [run] = make_runs(alice, "sgt", seeds=[0])
    add_series(run, "llama", VAL, range(0, 21, 5), lambda s: s / 40)
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}/compare/?runs={run.pk}&view=tasks")
    message = page.get_by_test_id("bars-empty")
    expect(message).to_be_visible()
    expect(message).to_have_text(NO_EVALUATIONS)
    assert "No evaluation results for these runs: evaluate a run from its page" in NO_EVALUATIONS
    expect(page.get_by_test_id("bar-panel")).to_have_count(0)
    expect(page.locator("[data-testid=summary-table] table")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "bars-no-evaluations.png"), full_page=True)

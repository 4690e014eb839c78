"""The pages under the Content-Security-Policy (webapp/core/csp.py), in Chromium.

Every main page is opened with the real header in force; the browser's
``securitypolicyviolation`` events and its console errors (where Chromium says "Refused
to execute ...") are collected, and none may occur. A page whose scripts were all blocked
would report nothing more, so each page is also used: its chart drawn with axis ticks and
a hover label, the compose form's "Add policy" adding a form, the delete button's
question asked, the runs list's column chooser, Django admin's "select all". The last
tests show the checks themselves see a blocked script: a policy that forbids this site's
scripts, and an inline script put back into a page.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Dialog, Locator, Page, Response, Route, expect

from tests.conftest import log_in
from tests.fixtures_browser import point_at
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.models import SavedComparison
from webapp.core.csp import POLICY
from webapp.core.demo_status import DemoStatus
from webapp.core.services import lab_for_user
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

VAL = "val/reward@1"
TASKS = ("arith-addition", "larger", "smaller")
RUN_POLICIES = ("llama", "qwen", "gpt2")
RUN_KEY = "train/reward_mean"

# Runs in the page before any of its own scripts: every violation goes to Python at once
# (an exposed binding outlives navigations, which a window variable would not).
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__reportCspViolation(
    `${event.effectiveDirective} refused ${event.blockedURI} ` +
    `at ${event.sourceFile || event.documentURI}:${event.lineNumber}` +
    (event.sample ? ` (${event.sample})` : ""));
});
"""


class PolicyWatch:
    """What the browser refused on ``page``, and its console errors, since the last check."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.violations: list[str] = []
        self.console_errors: list[str] = []
        page.expose_function("__reportCspViolation", self._violation)
        page.add_init_script(REPORT_VIOLATIONS)
        page.on("console", self._console)

    def _violation(self, description: str) -> None:
        self.violations.append(description)

    def _console(self, message: Any) -> None:
        # Django admin's pages name no icon, so Chromium asks for /favicon.ico (a 404).
        favicon = message.location.get("url", "").endswith("/favicon.ico")
        if message.type == "error" and not favicon:
            self.console_errors.append(f"{message.text} ({message.location.get('url')})")

    def reported(self) -> list[str]:
        """Everything reported so far (after a moment for the events in flight)."""
        self.page.wait_for_timeout(300)
        return self.violations + self.console_errors

    def check(self, where: str) -> None:
        reported = self.reported()
        assert not reported, f"{where}: the browser refused something: {reported}"
        self.violations.clear()
        self.console_errors.clear()


def open_page(page: Page, url: str) -> Response:
    """Opens ``url``; its response carries the policy (the header, not a meta tag)."""
    response = page.goto(url)
    assert response is not None and response.ok, (url, response and response.status)
    assert response.headers.get("content-security-policy") == POLICY, url
    return response


def expect_axes_drawn(chart: Locator) -> None:
    """Plotly laid the chart out: tick labels with text on both axes."""
    expect(chart.locator(".xtick text").first).to_be_visible()
    expect(chart.locator(".ytick text").first).to_be_visible()
    ticks = chart.locator(".xtick text, .ytick text").all_text_contents()
    assert len(ticks) >= 4 and all(tick.strip() for tick in ticks), ticks


def hover(page: Page, chart: Locator, x: float, y: float, shows: str) -> None:
    """Points the mouse at data (x, y) of ``chart``; Plotly's hover label says ``shows``."""
    point_at(page, chart, x, y)
    expect(chart.locator(".hoverlayer")).to_contain_text(shows)


def ship(base_url: str, run: Run, token: str, steps: Sequence[int]) -> None:
    """Points of every policy at ``steps``, through the ingest API, as a trainer sends."""
    points: list[dict[str, Any]] = [
        {"policy": policy, "key": RUN_KEY, "step": step, "value": 0.1 * p + step / 100}
        for step in steps
        for p, policy in enumerate(RUN_POLICIES)
    ]
    response = requests.post(
        f"{base_url}/api/v1/runs/{run.pk}/ingest",
        json={"points": points, "status": {"state": "running", "message": f"step {steps[-1]}"}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def rising(start: float, per_step: float) -> Callable[[int], float]:
    return lambda step: start + per_step * step


def seed_comparison(owner: User) -> list[Run]:
    """standalone and sgt, two seeds each: validation curves of llama and qwen every 5
    steps to 20, and the synthetic suite's accuracies at steps 0 and 20 (the bars)."""
    runs = make_runs(owner, "standalone") + make_runs(owner, "sgt")
    for i, run in enumerate(runs):
        lift = 0.15 if run.regime == "sgt" else 0.05
        for p, policy in enumerate(("llama", "qwen")):
            start = 0.3 + 0.1 * p + 0.01 * i
            add_series(run, policy, VAL, range(0, 21, 5), rising(start, lift / 20))
            for t, task in enumerate(TASKS):
                base = 0.2 + 0.1 * t + 0.05 * p
                add_series(
                    run, policy, f"eval/synthetic/{task}/accuracy", (0, 20), rising(base, lift / 20)
                )
    return runs


def test_the_lab_pages_work_under_the_policy(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """Login, dashboard, experiments, compose, a live run, runs list, tokens, registry."""
    base = live_server.url  # type: ignore[attr-defined]
    watch = PolicyWatch(page)

    open_page(page, f"{base}/accounts/login/")
    watch.check("login page")
    log_in(page, base, alice, "alice-password")  # the form posts (form-action 'self')
    expect(page.get_by_test_id("nav-new-experiment")).to_be_visible()
    watch.check("dashboard")

    experiment = make_experiment(seeds=(0,))
    open_page(page, f"{base}/experiments/")
    expect(page.get_by_test_id("experiment-table")).to_contain_text(experiment.name)
    watch.check("experiment list")

    # The delete button asks first (a listener of confirm-submit.js, not an onsubmit=).
    open_page(page, f"{base}{experiment.get_absolute_url()}")
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_test_id("delete").click()
    expect(page.get_by_test_id("experiment-name")).to_have_text(experiment.name)
    assert asked == ["Delete this experiment and all its runs and metrics?"]
    assert Experiment.objects.filter(pk=experiment.pk).exists()
    watch.check("experiment page")

    # Compose: "Add policy" adds a form in the page; Preview shows the plan.
    open_page(page, f"{base}/experiments/new/")
    page.fill("[name=name]", "csp-compose")
    expect(page.get_by_test_id("policy-form")).to_have_count(2)
    page.get_by_test_id("add-policy").click()
    expect(page.get_by_test_id("policy-form")).to_have_count(3)
    expect(page.locator("[name=pool-TOTAL_FORMS]")).to_have_value("3")
    page.fill("[name=pool-2-name]", "gpt2")
    page.fill("[name=pool-2-model]", "zoo:tiny-gpt2-unigram")
    watch.check("compose page")
    page.get_by_test_id("preview").click()
    expect(page.get_by_test_id("plan-row")).to_have_count(3)
    watch.check("compose preview")

    # A running run: its chart draws the points there, then those that arrive.
    run = services.runs_create(experiment, state="queued")[0]
    token = services.run_token_issue(run)
    ship(base, run, token, range(0, 6))
    open_page(page, f"{base}{run.get_absolute_url()}")
    chart = page.get_by_test_id(f"chart-{RUN_KEY}")
    expect(chart).to_have_attribute("data-points", str(6 * len(RUN_POLICIES)))
    expect_axes_drawn(chart)
    ship(base, run, token, range(6, 10))
    expect(chart).to_have_attribute("data-points", str(10 * len(RUN_POLICIES)), timeout=8_000)
    expect(page.locator("#run-state").get_by_test_id("run-state")).to_have_text("running")
    hover(page, chart, 5, 0.15, shows="qwen")
    watch.check("run page")

    # The runs list's column chooser shows a hidden column.
    open_page(page, f"{base}/runs/")
    table = page.get_by_test_id("run-table")
    hidden_owner = re.compile(r"\bhide-owner\b")
    expect(table).to_have_class(hidden_owner)
    page.get_by_test_id("column-chooser").locator("summary").click()
    page.locator("input[name=show-column][value=owner]").check()
    expect(table).not_to_have_class(hidden_owner)
    watch.check("runs list")

    open_page(page, f"{base}/settings/tokens/")
    page.fill("[name=name]", "csp laptop")
    page.get_by_test_id("token-create").click()
    expect(page.get_by_test_id("token-secret")).to_contain_text("mrlp_")
    watch.check("tokens page")

    for path, shown in (
        ("/models/", "model-create"),
        ("/models/new/", "model-form"),
        ("/suites/", "suite-empty"),
        ("/suites/new/", "suite-form"),
    ):
        open_page(page, f"{base}{path}")
        expect(page.get_by_test_id(shown)).to_be_visible()
        watch.check(path)


def test_the_comparison_pages_work_under_the_policy(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """Compare (curves, bars, significance), saved comparisons, sweeps."""
    from scheduler.launch import sweep_launch

    base = live_server.url  # type: ignore[attr-defined]
    watch = PolicyWatch(page)
    runs = seed_comparison(alice)
    ids = ",".join(str(run.pk) for run in runs)
    log_in(page, base, alice, "alice-password")
    watch.check("dashboard")

    open_page(page, f"{base}/compare/?runs={ids}&policy=llama&policy=qwen")
    panels = page.get_by_test_id("compare-panel")
    expect(panels).to_have_count(2)
    panel = panels.first
    expect_axes_drawn(panel)
    hover(page, panel, 10, 0.35, shows="standalone")
    # Plotly's own "Download plot as a png" (its mode bar) renders the SVG in the page.
    with page.expect_download() as png:
        panel.locator('.modebar-btn[data-title^="Download plot"]').click()
    assert png.value.suggested_filename.endswith(".png")
    with open(png.value.path(), "rb") as image:
        assert image.read(8) == b"\x89PNG\r\n\x1a\n"
    watch.check("compare page, curves")

    open_page(page, f"{base}/compare/?runs={ids}&view=tasks&policy=llama&policy=qwen")
    bars = page.get_by_test_id("bar-panel")
    expect(bars).to_have_count(2)
    page.wait_for_function(
        """() => document.querySelectorAll('[data-testid="bar-panel"] .barlayer .point path')
                 .length === 12"""
    )
    assert bars.first.locator(".xtick text").all_text_contents() == list(TASKS)
    watch.check("compare page, bars")

    open_page(page, f"{base}/compare/?runs={ids}&view=significance&policy=llama&policy=qwen")
    expect(page.get_by_test_id("sig-sentence")).to_have_count(2)
    # The seeded runs move by the same amount on every seed: a sentence, and no test.
    expect(page.get_by_test_id("sig-sentence").first).to_contain_text(
        "every seed moved by exactly 0.12: no spread, no test"
    )
    watch.check("compare page, significance")

    saved = SavedComparison.objects.create(
        lab=lab_for_user(alice),
        owner=alice,
        name="csp saved",
        query=f"runs={ids}&policy=llama",
        slug=secrets.token_urlsafe(9),
    )
    open_page(page, f"{base}/compare/saved/")
    expect(page.get_by_role("link", name="csp saved")).to_be_visible()
    watch.check("saved comparisons")
    open_page(page, f"{base}{saved.get_absolute_url()}")
    expect(page.get_by_test_id("compare-panel")).to_have_count(1)
    expect_axes_drawn(page.get_by_test_id("compare-panel").first)
    watch.check("a saved comparison")

    source = make_experiment(seeds=(0,))
    open_page(page, f"{base}/experiments/{source.pk}/sweep/")
    seeds = page.get_by_test_id("sweep-count").locator('[data-part="seeds"]')
    page.get_by_test_id("sweep-seeds").fill("0, 1, 2")
    expect(seeds).to_have_text("3 seeds")  # counted by sweep-form.js as typed
    watch.check("sweep form")
    sweep = sweep_launch(owner=alice, source=source, name="csp", regimes=["sgt"], seeds=[0])
    open_page(page, f"{base}/sweeps/")
    expect(page.get_by_role("link", name="csp", exact=True)).to_be_visible()
    watch.check("sweeps list")
    open_page(page, f"{base}/sweeps/{sweep.pk}/")
    expect(page.get_by_test_id("sweep-runs")).to_be_visible()
    watch.check("sweep page")


def test_django_admin_works_under_the_policy(page: Page, live_server: object, alice: User) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    watch = PolicyWatch(page)
    User.objects.create_superuser("root", password="root-password")
    make_runs(alice, "sgt")

    open_page(page, f"{base}/admin/login/")
    watch.check("admin login")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "root-password")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")
    watch.check("admin index")

    # The change list's "select all" box is admin's actions.js at work.
    open_page(page, f"{base}/admin/runs/run/")
    rows = page.locator("input.action-select")
    expect(rows).to_have_count(2)
    page.locator("#action-toggle").check()
    expect(rows.nth(0)).to_be_checked()
    expect(rows.nth(1)).to_be_checked()
    expect(page.locator(".action-counter")).to_contain_text("2 of 2 selected")
    watch.check("admin change list")
    page.locator("#result_list tbody th a").first.click()
    expect(page.locator("#run_form input[name=_save]")).to_be_visible()
    watch.check("admin change form")


def test_the_demo_card_reloads_while_the_zoo_builds(
    page: Page, live_server: object, alice: User, settings: Any, tmp_path: Path
) -> None:
    """The reload is demo-setup.js's (it was an inline script)."""
    base = live_server.url  # type: ignore[attr-defined]
    settings.VAR_DIR = tmp_path
    DemoStatus(state="building", models=["a", "b"], ready=["a"], pid=os.getpid()).save()
    watch = PolicyWatch(page)
    log_in(page, base, alice, "alice-password")
    expect(page.get_by_test_id("demo-setup")).to_have_attribute("data-state", "building")
    loads: list[float] = []
    page.on("load", lambda _: loads.append(time.monotonic()))
    deadline = time.monotonic() + 8
    while not loads and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert loads, "the dashboard did not reload while the demo's zoo builds"
    watch.check("dashboard while the demo builds")


def test_the_checks_see_a_blocked_script(
    page: Page, live_server: object, alice: User, settings: Any
) -> None:
    """The watch reports what the browser refuses: an inline script put back into a page
    under the real policy, and the pages' own scripts under a policy that forbids them
    (then the chart is not drawn either)."""
    base = live_server.url  # type: ignore[attr-defined]
    watch = PolicyWatch(page)
    log_in(page, base, alice, "alice-password")
    watch.check("dashboard")

    def with_inline_script(route: Route) -> None:
        response = route.fetch()
        body = response.text().replace("</main>", "<script>document.title = 'ran';</script></main>")
        route.fulfill(response=response, body=body)

    page.route(f"{base}/experiments/", with_inline_script)
    open_page(page, f"{base}/experiments/")
    assert page.title() != "ran"
    reported = watch.reported()
    assert any("script-src" in line and "refused inline" in line for line in reported), reported
    page.unroute(f"{base}/experiments/")
    watch.violations.clear()
    watch.console_errors.clear()

    settings.CONTENT_SECURITY_POLICY = "default-src 'self'; script-src 'none'"
    runs = seed_comparison(alice)
    response = page.goto(f"{base}/compare/?runs={','.join(str(run.pk) for run in runs)}")
    assert response is not None
    assert response.headers["content-security-policy"] == settings.CONTENT_SECURITY_POLICY
    page.wait_for_timeout(1_000)
    expect(page.get_by_test_id("compare-panel")).to_have_count(0)
    reported = watch.reported()
    assert any("script-src" in line and "plotly" in line for line in reported), reported
    assert json.loads(page.locator("#compare-page-config").text_content() or "null")

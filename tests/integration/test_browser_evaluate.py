"""The researcher evaluates a finished run from its page and watches the table fill in.

Chromium (Playwright) against the live server; a real Celery worker over Redis trains the
run and then runs the evaluation job on the local backend; the job's trainer ships the
results to the live server; the page polls them without a reload.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from scheduler.tasks import evaluations_sync
from tests.conftest import log_in
from tests.integration.conftest import SchedulerWorld
from tests.integration.test_evaluation_jobs import synthetic_suite
from tests.integration.test_run_lifecycle import STEPS, Watcher, launch

pytestmark = [pytest.mark.integration, pytest.mark.browser]

PERCENT = re.compile(r"^\d{1,3}\.\d$")
SIGNED = re.compile(r"^[+-]?\d{1,3}\.\d$")


def test_evaluate_a_run_and_watch_the_table_fill_in(
    page: Page, scheduler_world: SchedulerWorld, alice: User, tmp_path: Path
) -> None:
    suite = synthetic_suite(alice, tmp_path / "suite")
    run = launch(alice, "local", name="browser-evaluate")
    run = Watcher(scheduler_world, run).until_state("completed", "failed", "cancelled")
    assert run.state == "completed", run.failure_reason
    base = scheduler_world.live_url
    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}{run.get_absolute_url()}")
    panel = page.get_by_test_id("evaluation")
    expect(panel.get_by_test_id("evaluation-empty")).to_have_text("No evaluations yet.")

    panel.locator("select[name=suite]").select_option(label=suite.name)
    expect(panel.get_by_label(f"step {STEPS} (final)")).to_be_checked()
    panel.get_by_test_id("evaluate-run").click()
    page.wait_for_url(re.compile(r".*/runs/\d+/#evaluation$"))
    expect(page.locator(".messages")).to_contain_text(
        f"Evaluating on synthetic (base + step {STEPS})."
    )
    page.evaluate("window.__sameDocument = true")
    job = panel.get_by_test_id("evaluation-job")
    expect(job).to_have_count(1)
    expect(job.get_by_test_id("evaluation-state")).not_to_have_text("failed")

    state = job.get_by_test_id("evaluation-state")
    for _ in range(240):  # beat is not running in tests: this loop stands in for it
        evaluations_sync.apply_async(queue=scheduler_world.worker.queue)
        page.wait_for_timeout(500)
        if state.text_content() in ("completed", "failed", "cancelled"):
            break
    expect(state).to_have_text("completed")

    table = panel.get_by_test_id("evaluation-table")
    expect(table.locator("h3")).to_have_text(
        f"synthetic: accuracy (%), base model vs checkpoint at step {STEPS}"
    )
    for policy in run.policy_names:
        expect(table.locator("th.policy-head", has_text=policy)).to_be_visible()
    rows = table.get_by_test_id("evaluation-row")
    expect(rows).to_have_count(len(suite.tasks))
    expect(rows.first.locator("td").first).to_have_text(sorted(t["name"] for t in suite.tasks)[0])
    cells = [
        (cell, pattern)
        for testid, pattern in (
            ("base-value", PERCENT),
            ("checkpoint-value", PERCENT),
            ("delta-value", SIGNED),
        )
        for cell in table.get_by_test_id(testid).all()
    ]
    assert len(cells) == 3 * len(suite.tasks) * len(run.policy_names)
    for cell, pattern in cells:
        assert pattern.match(cell.inner_text()), cell.inner_text()
    assert page.evaluate("window.__sameDocument") is True  # filled in without a reload
    page.screenshot(path=str(tmp_path / "evaluation.png"), full_page=True)

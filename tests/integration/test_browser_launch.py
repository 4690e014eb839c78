"""The researcher's whole path in a browser: compose, launch, watch the run live.

Chromium (Playwright) against the live server; a real Celery worker over Redis submits
the run to the local backend; the trainer ships its metrics back to the live server.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from scheduler.tasks import runs_sync
from tests.conftest import log_in
from tests.integration.conftest import SchedulerWorld
from webapp.runs.models import Experiment

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_launch_from_the_form_and_watch_the_chart_fill(
    page: Page,
    scheduler_world: SchedulerWorld,
    alice: User,
) -> None:
    base = scheduler_world.live_url
    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}/experiments/new/")
    page.fill("[name=name]", "browser-launch")
    page.select_option("[name=regime]", "sgt")
    for index, model in enumerate(("zoo:tiny-llama-char", "zoo:tiny-gpt2-unigram")):
        page.fill(f"[name=pool-{index}-model]", model)
        page.fill(f"[name=pool-{index}-group_size]", "4")
        page.fill(f"[name=pool-{index}-max_new_tokens]", "8")
    page.fill("[name=steps]", "5")
    page.fill("[name=prompts_per_step]", "4")
    page.fill("[name=val_every]", "5")
    page.fill("[name=task-val_size]", "8")
    page.fill("[name=task-levels]", "1, 2")
    page.get_by_test_id("save").click()
    page.wait_for_url(f"{base}/experiments/*/")

    page.get_by_test_id("launch").click()
    page.locator('[data-testid="experiment-runs"] a').first.click()
    page.wait_for_url(f"{base}/runs/*/")
    page.evaluate("window.__sameDocument = true")
    run = Experiment.objects.get(name="browser-launch").runs.get()

    state = page.locator("#run-state").get_by_test_id("run-state")
    chart = page.locator('[data-testid="chart-train/reward_mean"]')
    # The beat is not running in tests: this loop is its stand-in.
    for _ in range(240):
        runs_sync.apply_async(queue=scheduler_world.worker.queue)
        page.wait_for_timeout(500)
        if state.text_content() == "completed":
            break
    expect(state).to_have_text("completed")
    # Two policies and the pool-wide aggregate, 5 steps each.
    expect(chart).to_have_attribute("data-points", "15", timeout=10_000)
    assert page.evaluate("window.__sameDocument") is True  # all of it without a reload
    run.refresh_from_db()
    assert run.state == "completed" and run.exit_code == 0
    states = list(run.state_changes.values_list("state", flat=True))
    assert states[:3] == ["queued", "submitted", "running"] and states[-1] == "completed"

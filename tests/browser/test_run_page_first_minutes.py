"""What a new user found on the run page in the first minutes (issue 31), read as shown:
a failed or cancelled run says so instead of promising points and folds its log tail,
Cancel asks first (a dialog; a page without JavaScript), Resubmit says whether the run
resumes or starts over, the ETA leaves the start-up step out, and the transfer log reads
as the filter does (kind labels, rounded weights) and opens on the prompt's text."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Browser, Dialog, Page, expect

from tests.conftest import log_in
from trainer.config import RunConfig
from trainer.tasks import make_task
from webapp.runs import services
from webapp.runs.models import Experiment, Run
from webapp.runs.progress import NO_VALUE

pytestmark = pytest.mark.browser

REASON = "RuntimeError: CUDA out of memory\n[job] Traceback (most recent call last)\n[job] exit 1"


def _ingest(base_url: str, run: Run, token: str, **body: Any) -> None:
    response = requests.post(
        f"{base_url}/api/v1/runs/{run.pk}/ingest",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def _points(step: int, at: float) -> list[dict[str, Any]]:
    return [
        {"policy": p, "key": "train/reward_mean", "step": step, "value": 0.1, "wall_time": at}
        for p in ("llama", "qwen", "gpt2")
    ]


def _open(page: Page, base_url: str, alice: User, run: Run) -> None:
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}{run.get_absolute_url()}")


# --- 1. a failed or cancelled run ------------------------------------------------------------
def test_a_run_that_fails_says_so_and_folds_its_log_tail(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    token = services.run_token_issue(run)
    _ingest(live_server.url, run, token, status={"state": "running", "message": "loading"})
    _open(page, live_server.url, alice, run)
    empty = page.get_by_test_id("charts-empty")
    expect(empty).to_have_text(
        "No metrics yet: points appear here within seconds of the trainer sending them."
    )

    _ingest(live_server.url, run, token, status={"state": "failed", "message": REASON})
    expect(page.locator("#run-state").get_by_test_id("run-state")).to_have_text(
        "failed", timeout=6_000
    )
    expect(empty).to_have_text(
        "No metrics: the run failed before it sent any (see the failure reason above and "
        "the job output below)."
    )
    reason = page.get_by_test_id("failure-reason")
    expect(reason.locator("strong")).to_have_text("RuntimeError: CUDA out of memory")
    expect(reason.locator("summary")).to_have_text("Details: 2 more lines")
    tail = reason.get_by_text("[job] Traceback (most recent call last)")
    expect(tail).to_be_hidden()  # folded
    reason.locator("summary").click()
    expect(tail).to_be_visible()
    page.wait_for_timeout(2_500)  # a poll later, it stays open
    expect(tail).to_be_visible()
    # The timeline's note of the failure reads the same way.
    note = page.get_by_test_id("timeline").locator("tbody tr").last
    expect(note.locator("td").last.locator("span")).to_have_text("RuntimeError: CUDA out of memory")
    expect(note.get_by_text("[job] exit 1")).to_be_hidden()


def test_a_cancelled_run_says_so(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    services.run_transition(run, Run.State.CANCELLED, failure_reason="cancelled by the user")
    _open(page, live_server.url, alice, run)
    expect(page.get_by_test_id("live-indicator")).to_have_text("finished", timeout=6_000)
    expect(page.get_by_test_id("charts-empty")).to_have_text(
        "No metrics: the run was cancelled before it sent any."
    )
    expect(page.get_by_test_id("failure-reason")).to_have_text("cancelled by the user")


# --- 4 and 5. Cancel asks first; Resubmit says where the run starts again -----------------------
def test_cancel_asks_first_and_resubmit_says_it_starts_over(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    _open(page, live_server.url, alice, run)
    badge = page.locator("#run-state").get_by_test_id("run-state")
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_test_id("cancel-run").click()
    page.wait_for_timeout(2_500)  # a poll: nothing was cancelled
    assert asked and asked[0].startswith(f"Cancel the run {run.name}?"), asked
    expect(badge).to_have_text("queued")
    assert Run.objects.get(pk=run.pk).state == "queued"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel-run").click()
    expect(page.locator(".messages")).to_contain_text("Run cancelled.")
    expect(badge).to_have_text("cancelled")

    # Cancelled before any checkpoint: a resubmission starts over, and the page says so.
    resubmit = page.get_by_test_id("resubmit-run")
    expect(resubmit).to_have_text("Resubmit (start over: no checkpoint)")
    resubmit.click()
    expect(page.locator(".messages")).to_have_text(
        "Resubmitted: it has no checkpoint, so it starts over from step 1."
    )


def test_without_javascript_cancel_asks_on_a_page(
    browser: Browser,
    live_server: Any,
    alice: User,
    make_experiment: Callable[..., Experiment],
    transactional_db: None,
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        _open(page, live_server.url, alice, run)
        page.get_by_test_id("cancel-run").click()
        expect(page.locator("h1")).to_have_text(f"Cancel the run {run.name}?")
        assert Run.objects.get(pk=run.pk).state == "queued"
        page.get_by_test_id("confirm-cancel").click()
        expect(page.locator(".messages")).to_contain_text("Run cancelled.")
        assert Run.objects.get(pk=run.pk).state == "cancelled"
    finally:
        context.close()


# --- 6. the ETA --------------------------------------------------------------------------------
def test_the_eta_leaves_the_start_up_step_out(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """Step 1 took 80 s (loading, compilation), the next ones 2 s: 57 steps left read
    about 2 minutes, not the half hour that counting step 1 in gives."""
    run = services.runs_create(make_experiment(seeds=(0,), steps=60), state="queued")[0]
    token = services.run_token_issue(run)
    now = time.time()
    _ingest(live_server.url, run, token, points=_points(0, now - 95) + _points(1, now - 15))
    _ingest(live_server.url, run, token, status={"state": "running", "message": "step 1"})
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(seconds=100))
    _open(page, live_server.url, alice, run)
    text = page.get_by_test_id("progress-text")
    expect(text).to_contain_text("step 1/60", timeout=6_000)
    expect(text).to_contain_text(f"ETA {NO_VALUE}")  # one trained step: no pace yet

    _ingest(live_server.url, run, token, points=_points(2, now - 13) + _points(3, now - 11))
    expect(text).to_contain_text("step 3/60", timeout=6_000)
    # 57 x 2 s, less the time since step 3 (counting step 1 in, it read 26m).
    expect(text).to_have_text(re.compile(r"· ETA [12]m$"))


# --- 2. the transfer log ---------------------------------------------------------------------
def _prompt(run: Run, step: int, index: int) -> tuple[str, str]:
    config = RunConfig.from_dict(run.config)
    problem = make_task(config.task, seed=config.seed).train_batch(step, index + 1)[index]
    return problem.id, problem.prompt


ROW = """() => Array.from(document.querySelector("#transfer-rows tr[data-event-id]").cells)
  .map((cell) => cell.innerText.trim())"""


def test_the_transfer_log_reads_as_its_filter_and_shows_the_prompt_text(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(regime="prp", seeds=(0,)), state="queued")[0]
    prompt_id, prompt = _prompt(run, 2, 1)
    event = {
        "step": 2, "source": "llama", "target": "qwen", "kind": "rollout",
        "prompt_id": prompt_id, "count": 1, "weight": 0.8548971767621961,
        "samples": [{"text": "so 7", "reward": 0.3333333333333333}],
    }  # fmt: skip
    _ingest(live_server.url, run, services.run_token_issue(run), events=[event])
    _open(page, live_server.url, alice, run)
    row = page.locator("#transfer-rows tr[data-event-id]")
    expect(row).to_have_count(1, timeout=8_000)
    cells = page.evaluate(ROW)
    assert cells[1:] == ["2", "llama", "qwen", "peer rollout (PRP)", prompt_id, "1", "0.855"]
    kind_filter = page.locator("#transfer-filter select[name=kind] option[value=rollout]")
    assert kind_filter.inner_text() == cells[4]  # the row says what the filter says

    row.get_by_role("button").click()
    detail = page.get_by_test_id("transfer-detail")
    expect(detail.get_by_test_id("transfer-prompt-text")).to_have_text(prompt)
    expect(detail).to_contain_text("Response 1 · reward 0.333")


def test_the_sequential_sft_log_shows_the_kind_label(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(regime="sequential_sft", seeds=(0,))
    run = services.runs_create(experiment, state="queued")[0]
    event = {
        "step": 5, "source": "llama", "target": "qwen", "kind": "sft_sample",
        "prompt_id": "no-such-prompt", "count": 1, "weight": None,
    }  # fmt: skip
    _ingest(live_server.url, run, services.run_token_issue(run), events=[event])
    _open(page, live_server.url, alice, run)
    expect(page.locator("#transfer-rows tr[data-event-id]")).to_have_count(1, timeout=8_000)
    cells = page.evaluate(ROW)
    assert cells[4] == "buffered peer success trained on (sequential SFT)", cells
    assert "sft_sample" not in " ".join(cells)
    page.locator("#transfer-rows tr[data-event-id]").get_by_role("button").click()
    expect(page.get_by_test_id("transfer-prompt")).to_contain_text(
        "Its text cannot be found in the run's task (only the id was recorded)."
    )

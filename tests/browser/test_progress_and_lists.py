"""What a researcher reads off a run's progress, and the lists' sort control.

The run page's progress bar and its text ("step 8/20 · 12s elapsed · ETA 12s") advance
while points ship at about one step a second, as read from the page (the text shown and
the bar's rendered width), without the page fetching itself again. The runs list's sort
control shows the order the list is in, and a Filter submit with empty filters keeps it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from scheduler.launch import experiment_launch
from tests.conftest import log_in
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

TOTAL = 20
OPENED_AT = 5
SHIPPED = 6  # steps shipped while the page is open, one a second
PROGRESS = re.compile(r"step (\d+)/20 · (\d+)s elapsed · ETA (\d+)s")


def _ship(
    base_url: str,
    run_id: int,
    token: str,
    steps: Sequence[int],
    state: str = "running",
    at: Callable[[int], float] | None = None,
) -> None:
    """Post the points of ``steps`` (wall time: ``at(step)``, default now) and a status."""
    points = [
        {
            "policy": policy,
            "key": "train/reward_mean",
            "step": step,
            "value": 0.1 * step,
            "wall_time": time.time() if at is None else at(step),
        }
        for step in steps
        for policy in ("llama", "qwen", "gpt2")
    ]
    status = {"state": state, "message": f"step {max(steps)}/{TOTAL}"}
    response = requests.post(
        f"{base_url}/api/v1/runs/{run_id}/ingest",
        json={"points": points, "status": status},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def _shown(page: Page) -> tuple[str, float]:
    """The progress text and the share of the bar that is filled, as rendered."""
    return page.evaluate(
        """() => {
          const box = document.getElementById("run-progress");
          const bar = box.querySelector(".progress-bar").getBoundingClientRect();
          const fill = box.querySelector(".progress-fill").getBoundingClientRect();
          return [box.querySelector(".progress-text").textContent, fill.width / bar.width];
        }"""
    )


def test_the_progress_bar_and_eta_advance_while_points_ship(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    run = services.runs_create(make_experiment(seeds=(0,), steps=TOTAL), state="queued")[0]
    token = services.run_token_issue(run)
    log_in(page, base_url, alice, "alice-password")
    own_fetches: list[str] = []
    page.on(
        "request",
        lambda request: (
            own_fetches.append(request.url)
            if request.url.rstrip("/").endswith(run.get_absolute_url().rstrip("/"))
            else None
        ),
    )
    page.goto(f"{base_url}{run.get_absolute_url()}")
    text = page.get_by_test_id("progress-text")
    expect(text).to_have_text("queued")
    assert _shown(page)[1] == 0

    # Steps 0..5 took a second each (their wall times say so), then one a second, live.
    now = time.time()
    _ship(base_url, run.pk, token, range(OPENED_AT + 1), at=lambda s: now - (OPENED_AT - s))
    expect(text).to_have_text(PROGRESS, timeout=6_000)

    def ship_live() -> None:
        for step in range(OPENED_AT + 1, OPENED_AT + 1 + SHIPPED):
            _ship(base_url, run.pk, token, [step])
            time.sleep(1.0)

    samples = []
    shipper = threading.Thread(target=ship_live, daemon=True)
    shipper.start()
    while shipper.is_alive():
        samples.append(_shown(page))
        page.wait_for_timeout(400)
    shipper.join()
    last = OPENED_AT + SHIPPED
    expect(text).to_contain_text(f"step {last}/{TOTAL}", timeout=6_000)
    page.wait_for_timeout(600)  # the bar's width eases in over 0.3 s
    samples.append(_shown(page))

    parsed = [(PROGRESS.fullmatch(shown), width) for shown, width in samples]
    assert all(match for match, _ in parsed), samples
    steps = [int(match.group(1)) for match, _ in parsed]  # type: ignore[union-attr]
    etas = [int(match.group(3)) for match, _ in parsed]  # type: ignore[union-attr]
    widths = [width for _, width in parsed]
    assert steps == sorted(steps) and len(set(steps)) >= 3, samples
    assert widths == sorted(widths) and len(set(widths)) >= 3, samples
    assert widths[-1] == pytest.approx(last / TOTAL, abs=0.02), samples
    # About a step a second, 9 steps to go: an ETA of about 9 s, down from about 15 s.
    assert etas[0] > etas[-1] and 4 <= etas[-1] <= 14, samples

    # Submitted to the local backend: the job fact says what the id is.
    expect(page.get_by_test_id("job-label")).to_have_text("Job")
    Run.objects.filter(pk=run.pk).update(backend="local", slurm_job_id="4242")
    expect(page.get_by_test_id("job-label")).to_have_text("Local process (pid)", timeout=6_000)
    expect(page.locator('#run-facts [data-field="slurm_job_id"]')).to_have_text("4242")
    Run.objects.filter(pk=run.pk).update(slurm_job_id="")  # its end comes from the trainer

    _ship(base_url, run.pk, token, range(last + 1, TOTAL + 1), state="completed")
    expect(text).to_have_text(re.compile(r"step 20/20 · ran \d+s"), timeout=6_000)
    page.wait_for_timeout(600)
    assert _shown(page)[1] == pytest.approx(1.0, abs=0.01)
    states = page.get_by_test_id("timeline").locator("tbody tr td:nth-child(2)")
    expect(states).to_have_text(["queued", "running", "completed"])
    expect(page.get_by_test_id("resubmit-run")).to_be_visible()
    expect(page.get_by_test_id("cancel-run")).to_have_count(0)
    assert own_fetches == [f"{base_url}{run.get_absolute_url()}"]  # only the page's own load


def test_the_sort_control_shows_the_order_used_and_survives_an_empty_filter(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    for name in ("banana", "apple", "cherry"):  # created in this order
        experiment_launch(make_experiment(name=name, seeds=(0,)))
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}/runs/")
    sort = page.locator("select[name=sort]")
    first_run = page.get_by_test_id("run-table").locator("tbody tr").first
    expect(sort.locator("option:checked")).to_have_text("created, newest first")
    expect(first_run).to_contain_text("cherry-s0")

    page.get_by_role("button", name="Filter").click()  # every filter left empty
    page.wait_for_load_state()
    expect(sort.locator("option:checked")).to_have_text("created, newest first")
    expect(first_run).to_contain_text("cherry-s0")

    sort.select_option(label="name, A → Z")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"sort=name"))
    expect(sort.locator("option:checked")).to_have_text("name, A → Z")
    expect(first_run).to_contain_text("apple-s0")
    page.get_by_role("button", name="Filter").click()
    expect(sort.locator("option:checked")).to_have_text("name, A → Z")
    expect(first_run).to_contain_text("apple-s0")

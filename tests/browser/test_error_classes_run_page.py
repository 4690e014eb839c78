"""Issue 45 on the run page: the addition slices' error classes, shipped through the
ingestion API, read as one table "Answers by error class" (policy x slice rows, a column
per class, the latest validation and in brackets step 0), not as twenty charts; the
discrimination metrics are charts with the names people read."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.fixtures_browser import log_in
from trainer import metrics as m
from trainer.tasks.addition_errors import ERROR_CLASSES
from trainer.tasks.addition_slices import SLICES
from webapp.runs import services
from webapp.runs.models import Experiment

pytestmark = pytest.mark.browser

LEARNS, SHORTCUT = "qwen", "gpt2"  # two policies of the pool (tests/fixtures_db.py)


def _shares(policy: str, step: int, slice_name: str) -> dict[str, float]:
    """Warm start: the ones carry always dropped. By step 20 ``qwen`` carries on 3 in 4
    carry answers; ``gpt2`` adds 10 whatever the digits (spurious on no_carry)."""
    if slice_name in ("carry", "carry_overflow"):
        if step == 0 or policy == SHORTCUT:
            return {"dropped_carry": 1.0} if step == 0 else {"correct": 1.0}
        return {"correct": 0.75, "dropped_carry": 0.25}
    if step > 0 and policy == SHORTCUT:
        return {"spurious_carry": 1.0}
    return {"correct": 1.0}


def _points(step: int) -> list[dict[str, Any]]:
    points = []
    for policy in (LEARNS, SHORTCUT):
        shares = {s: _shares(policy, step, s) for s in SLICES}
        values = {
            m.val_error_key(c, s): shares[s].get(c, 0.0) for c in ERROR_CLASSES for s in SLICES
        }
        correct = {s: shares[s].get("correct", 0.0) for s in SLICES}
        values[m.VAL_DISCRIMINATION_CARRY] = correct["carry"] + correct["no_carry"] - 1
        values[m.VAL_DISCRIMINATION_OVERFLOW] = correct["overflow"] + correct["no_carry"] - 1
        values[m.VAL_REWARD_AT_1] = sum(correct.values()) / len(SLICES)
        points += [
            {"policy": policy, "key": key, "step": step, "value": value, "wall_time": time.time()}
            for key, value in values.items()
        ]
    return points


def test_the_error_classes_are_one_table_and_the_discrimination_charts(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    token = services.run_token_issue(run)
    for step in (0, 10, 20):
        response = requests.post(
            f"{live_server.url}/api/v1/runs/{run.pk}/ingest",
            json={"points": _points(step)},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
    log_in(page, live_server.url, alice, "alice-password")
    page.goto(f"{live_server.url}{run.get_absolute_url()}")

    card = page.get_by_test_id("error-classes")
    expect(card).to_be_visible()
    expect(card.locator("h2")).to_have_text("Answers by error class")
    expect(card.locator("thead th")).to_have_text(
        [
            "Policy",
            "Slice",
            "Step (first)",
            "correct",
            "dropped carry",
            "spurious carry",
            "wrong digit count",
            "other",
        ]
    )
    rows = card.locator("tbody tr")
    expect(rows).to_have_count(2 * len(SLICES))  # policy x slice, in pool and slice order
    expect(rows.locator("td:nth-child(2)")).to_have_text([*SLICES, *SLICES])
    expect(page.get_by_test_id(f"error-row-{LEARNS}-carry")).to_have_text(
        f"{LEARNS}carry20 (0)0.75 (0.00)0.25 (1.00)0.00 (0.00)0.00 (0.00)0.00 (0.00)"
    )
    expect(page.get_by_test_id(f"error-row-{SHORTCUT}-no_carry")).to_have_text(
        f"{SHORTCUT}no_carry20 (0)0.00 (1.00)0.00 (0.00)1.00 (0.00)0.00 (0.00)0.00 (0.00)"
    )

    # The discrimination: charts titled by the catalogue, with the rewards.
    for key, title in (
        (m.VAL_DISCRIMINATION_CARRY, "Discrimination (J) · carry"),
        (m.VAL_DISCRIMINATION_OVERFLOW, "Discrimination (J) · overflow"),
    ):
        drawn = page.locator(f'#group-rewards [data-testid="chart-{key}"]')
        drawn.scroll_into_view_if_needed()
        expect(drawn.locator(".gtitle")).to_have_text(title)
        expect(drawn.locator(".gtitle")).to_be_visible()
    # ... and no chart for any of the twenty error-class keys.
    expect(page.locator(f'[data-testid^="chart-{m.VAL_ERROR_PREFIX}"]')).to_have_count(0)
    expect(page.get_by_test_id(f"chart-{m.VAL_REWARD_AT_1}")).to_be_visible()
    if os.environ.get("MRL_SCREENSHOT_DIR"):
        card.screenshot(path=f"{os.environ['MRL_SCREENSHOT_DIR']}/error-classes.png")


def test_a_run_without_error_classes_shows_no_table(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    token = services.run_token_issue(run)
    points = [
        {"policy": "qwen", "key": m.VAL_REWARD_AT_1, "step": s, "value": 0.5, "wall_time": 1.0}
        for s in (0, 10)
    ]
    response = requests.post(
        f"{live_server.url}/api/v1/runs/{run.pk}/ingest",
        json={"points": points},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    log_in(page, live_server.url, alice, "alice-password")
    page.goto(f"{live_server.url}{run.get_absolute_url()}")
    expect(page.get_by_test_id(f"chart-{m.VAL_REWARD_AT_1}")).to_be_visible()
    expect(page.get_by_test_id("error-classes")).to_have_count(1)  # in the page, hidden
    expect(page.get_by_test_id("error-classes")).to_be_hidden()

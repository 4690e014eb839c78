"""The runs list fits a 1400 px window: every column a researcher reads (run, regime,
state, progress, duration, final and best val/reward@1) is drawn inside the card, with
no horizontal scrolling; the rest (owner, job, created) sit behind the column
chooser, whose choice the page remembers (issue 31: Final/Best, Job and Created were cut
off by a 1435 px table in a 1010 px card)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser


def _overflow(page: Page) -> dict[str, float]:
    return page.evaluate(
        """() => {
            const table = document.querySelector('[data-testid="run-table"]');
            const card = table.closest('.card').getBoundingClientRect();
            const heads = Array.from(table.querySelectorAll('thead th'))
                .filter(th => th.offsetParent !== null);
            const right = Math.max(...heads.map(th => th.getBoundingClientRect().right));
            return {
                scroll: table.parentElement.scrollWidth - table.parentElement.clientWidth,
                beyond: right - card.right,
            };
        }"""
    )


def test_the_runs_list_fits_and_hides_columns_behind_a_chooser(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    experiment = make_experiment(
        name="complementary-sgt-lambda-0.05-warm", seeds=(0, 1, 2), steps=60
    )
    now = timezone.now()
    for run in services.runs_create(experiment, state=Run.State.QUEUED):
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.RUNNING,
            backend="slurm",
            slurm_job_id="12345678",
            last_step=17,
            started_at=now - timedelta(minutes=83),
            submitted_at=now - timedelta(minutes=84),
        )
    log_in(page, base, alice, "alice-password")
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{base}/runs/")
    table = page.get_by_test_id("run-table")
    heads = table.locator("thead th:visible")
    read = ["", "Run", "Experiment", "Regime", "Seed", "State", "Progress", "Duration"]
    expect(heads).to_have_text([*read, "Finalval/reward@1", "Bestval/reward@1"])
    shown = _overflow(page)
    assert shown["scroll"] <= 0 and shown["beyond"] <= 0, shown

    chooser = page.get_by_test_id("column-chooser")
    chooser.locator("summary").click()
    for column in ("Job", "Created"):
        chooser.get_by_label(column).check()
    expect(table.locator("thead th:visible")).to_contain_text(["Job", "Created"])
    expect(table.locator("tbody tr").first.get_by_test_id("job")).to_have_text("slurm 12345678")
    page.reload()  # the choice is remembered
    expect(table.locator("thead th:visible")).to_contain_text(["Job", "Created"])
    shown = _overflow(page)
    assert shown["scroll"] <= 0 and shown["beyond"] <= 0, shown

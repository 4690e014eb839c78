"""The sweep form says how many runs it will start, before Launch, and keeps the count
true as regimes, seeds and swept values change; on the local backend it says how many run
at once (issue 31: a default of 5 regimes x 3 seeds started 15 runs on two cores)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs.models import Experiment

pytestmark = pytest.mark.browser


def test_the_sweep_form_counts_the_runs_it_will_start(
    page: Page,
    live_server: object,
    alice: User,
    make_experiment: Callable[..., Experiment],
    settings: object,
) -> None:
    settings.LOCAL_MAX_JOBS = 2  # type: ignore[attr-defined]
    base = live_server.url  # type: ignore[attr-defined]
    source = make_experiment(seeds=(0,))
    source.resources = {"backend": "local", "partition": "local"}
    source.save()
    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}/experiments/{source.pk}/sweep/")
    count = page.get_by_test_id("sweep-count")
    expect(count).to_contain_text(
        "Launches 15 runs: 5 regimes \u00d7 3 seeds.", use_inner_text=True
    )
    expect(page.get_by_test_id("sweep-local-limit")).to_have_text(
        "On the local backend at most 2 runs at once (MRL_LOCAL_MAX_JOBS); the others wait, "
        "queued, and start as those end."
    )
    for regime in ("prp", "xgrpo", "sequential_sft"):
        page.locator(f'input[name="regimes"][value="{regime}"]').uncheck()
    expect(count).to_contain_text("Launches 6 runs: 2 regimes \u00d7 3 seeds.", use_inner_text=True)
    page.get_by_test_id("sweep-seeds").fill("0, 1, 1, 2, 3")  # a repeat counts once
    expect(count).to_contain_text("Launches 8 runs: 2 regimes \u00d7 4 seeds.", use_inner_text=True)
    page.get_by_test_id("sweep-param_path").select_option("grpo.kl_coef")
    page.get_by_test_id("sweep-param_values").fill("0.0, 0.01, 0.1")
    expect(count).to_contain_text(
        "Launches 24 runs: 2 regimes \u00d7 4 seeds \u00d7 3 values.", use_inner_text=True
    )

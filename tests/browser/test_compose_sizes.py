"""Sizes a person would question, in the browser (issue 31): Preview shows the warnings
and the run's size; Save needs "I have checked these sizes" ticked."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs.models import Experiment

pytestmark = pytest.mark.browser


def test_preview_shows_the_size_warnings_and_save_needs_them_checked(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}/experiments/new/")
    page.fill("[name=name]", "huge")
    page.fill("[name=pool-0-lr]", "1000")
    page.fill("[name=pool-0-group_size]", "100000")
    page.fill("[name=pool-0-max_new_tokens]", "1000000")
    page.fill("[name=steps]", "100000000")
    page.get_by_test_id("preview").click()

    expect(page.get_by_role("status")).to_contain_text("4 sizes to check before saving")
    warnings = page.get_by_test_id("size-warning")
    expect(warnings).to_have_text(
        [
            "Policy 1 · Learning rate: lr is 1000.0, far outside the usual 1e-07 to 0.001",
            "Policy 1 · Group size (G): group_size is 100000, far outside the usual 2 to 256",
            "Policy 1 · Max new tokens: max_new_tokens is 1000000, far outside the usual 1 to "
            "32768",
            "Steps: steps is 100000000, far outside the usual 1 to 100000",
        ]
    )
    for warning in warnings.all():
        expect(warning).to_be_visible()
    expect(page.get_by_test_id("size-total-tokens")).to_have_text("3.20e+20")
    expect(page.get_by_test_id("size-wall-time")).to_have_text(
        "no step rate measured on this backend yet"
    )
    expect(page.get_by_test_id("size-memory")).to_have_count(2)

    # Save without the tick: nothing saved, the page says why, the warnings stay.
    page.get_by_test_id("save").click()
    refusal = page.get_by_test_id("size-refusal")
    expect(refusal).to_be_visible()
    expect(refusal).to_contain_text("Nothing was saved: these sizes need a second look")
    expect(page.get_by_test_id("size-warning")).to_have_count(4)
    assert not Experiment.objects.exists()

    page.get_by_label("I have checked these sizes").check()
    page.get_by_test_id("save-checked-sizes").click()
    page.wait_for_url(f"{base}/experiments/*/")
    experiment = Experiment.objects.get()
    assert experiment.name == "huge"
    assert experiment.config["steps"] == 100_000_000

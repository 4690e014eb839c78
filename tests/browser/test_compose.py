"""Composing an experiment in the browser: a 3-policy SGT pool, an error, its fix, save."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs.models import Experiment

pytestmark = pytest.mark.browser


def test_compose_a_three_policy_sgt_experiment(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    log_in(page, base, alice, "alice-password")
    page.get_by_test_id("nav-new-experiment").click()
    page.wait_for_url(f"{base}/experiments/new/")
    page.evaluate("window.__sameDocument = true")

    # Only the chosen regime's hyperparameters are shown.
    expect(page.get_by_test_id("section-sgt")).to_be_hidden()
    page.select_option("[name=regime]", "sgt")
    expect(page.get_by_test_id("section-sgt")).to_be_visible()
    expect(page.get_by_test_id("section-prp")).to_be_hidden()
    expect(page.get_by_test_id("section-remix")).to_be_hidden()
    page.fill("[name=name]", "browser-sgt")
    page.fill("[name=seeds]", "0, 1")

    # Add a third and a fourth policy, remove the fourth, move the third to the top:
    # all in the page, without a reload.
    page.get_by_test_id("add-policy").click()
    page.fill("[name=pool-2-name]", "gpt2")
    page.fill("[name=pool-2-model]", "zoo:tiny-gpt2-unigram")
    page.get_by_test_id("add-policy").click()
    expect(page.locator("[name=pool-TOTAL_FORMS]")).to_have_value("4")
    page.get_by_test_id("policy-form").nth(3).get_by_test_id("remove-policy").click()
    expect(page.get_by_test_id("policy-form")).to_have_count(3)
    page.get_by_test_id("policy-form").nth(2).get_by_test_id("move-up").click()
    page.get_by_test_id("policy-form").nth(1).get_by_test_id("move-up").click()
    assert page.evaluate("window.__sameDocument") is True

    # What counts as a correct answer (issue 45): both task options, shown with their help.
    finished_only = page.locator("label[for=id_task-finished_only]")
    expect(finished_only).to_be_visible()
    expect(finished_only).to_contain_text("Score finished answers only")
    expect(page.locator("#id_task-finished_only_helptext")).to_be_visible()
    expect(page.locator("#id_task-finished_only_helptext")).to_contain_text(
        "a response counts only if it ended with EOS or holds a closed \\boxed{...}"
    )
    expect(page.locator("[name=task-finished_only]")).to_have_value("auto")
    page.select_option("[name=task-finished_only]", "on")
    strict = page.locator("label[for=id_task-strict_format]")
    expect(strict).to_be_visible()
    expect(strict).to_contain_text("Strict answer format (boxed only)")
    expect(page.locator("#id_task-strict_format_helptext")).to_contain_text(
        "no fallback to the last number"
    )
    page.check("[name=task-strict_format]")

    # A mistake: G = 1. Preview shows the message next to the field.
    page.fill("[name=pool-1-group_size]", "1")
    page.fill("[name=sgt-lambda_sgt]", "0.3")
    page.get_by_test_id("preview").click()
    expect(page.get_by_test_id("error-pool-1-group_size")).to_contain_text("G must be at least 2")
    expect(page.get_by_test_id("preview-panel")).to_have_count(0)
    assert not Experiment.objects.exists()

    # Fixed: the preview shows the trainer config and the MWRA plan, in pool order.
    page.fill("[name=pool-1-group_size]", "4")
    page.get_by_test_id("preview").click()
    expect(page.get_by_test_id("preview-plan")).to_be_visible()
    expect(page.get_by_test_id("plan-row")).to_have_count(3)
    expect(page.get_by_test_id("plan-row").nth(0)).to_have_attribute("data-policy", "gpt2")
    expect(page.get_by_test_id("preview-config")).to_contain_text('"lambda_sgt": 0.3')
    expect(page.get_by_test_id("preview-config")).to_contain_text('"finished_only": "on"')

    page.get_by_test_id("save").click()
    page.wait_for_url(f"{base}/experiments/*/")
    expect(page.get_by_test_id("experiment-name")).to_have_text("browser-sgt")
    experiment = Experiment.objects.get()
    assert experiment.owner == alice and experiment.regime == "sgt"
    assert [p["name"] for p in experiment.config["pool"]] == ["gpt2", "llama-char", "qwen-bpe"]
    # pool-1 is the second policy as first rendered (qwen-bpe), wherever it moved.
    assert [p["group_size"] for p in experiment.config["pool"]] == [8, 8, 4]
    assert experiment.config["sgt"]["lambda_sgt"] == 0.3
    assert experiment.config["task"]["finished_only"] == "on"
    assert experiment.config["task"]["strict_format"] is True
    assert experiment.seeds == [0, 1]

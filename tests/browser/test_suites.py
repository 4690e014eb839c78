"""The evaluation-suite registry in the browser: add the synthetic suite from its suite
file through the form, see its tasks and "readable" on the list, open its page.

With ``MRL_SCREENSHOTS=DIR`` it also saves the pages there as ``suites-*.png`` (to look
at them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.webapp.registry.test_suites import SYNTHETIC_TASKS
from trainer.evals.synthetic import write_synthetic_suite
from webapp.registry.models import EvalSuite

pytestmark = pytest.mark.browser

TASKS = tuple(SYNTHETIC_TASKS)


def screenshot(page: Page, name: str) -> None:
    directory = os.environ.get("MRL_SCREENSHOTS")
    if directory:
        page.screenshot(path=str(Path(directory) / name), full_page=True)


def test_a_suite_added_from_a_suite_file_is_listed_as_readable(
    page: Page, live_server: object, alice: User, tmp_path: Path
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    suite_json = write_synthetic_suite(tmp_path / "synthetic", size=8)
    log_in(page, base, alice, "alice-password")

    page.get_by_role("link", name="Suites", exact=True).click()
    expect(page.get_by_test_id("suite-empty")).to_contain_text(
        "python -m trainer eval-suite synthetic --out DIR"
    )
    page.get_by_test_id("suite-create").click()

    # Bad lines first: a message for each, and what was typed is still there.
    typed = (
        f"larger essay {suite_json.parent / 'larger.jsonl'}\n"
        f"addition math {tmp_path / 'nowhere.jsonl'}"
    )
    page.get_by_test_id("description").fill("the trainer's synthetic suite")
    page.get_by_test_id("tasks").fill(typed)
    page.get_by_test_id("save").click()
    errors = page.get_by_test_id("error-tasks")
    expect(errors).to_have_count(2)
    expect(errors.nth(0)).to_contain_text("line 1 (larger): unknown task type 'essay'")
    expect(errors.nth(1)).to_contain_text("line 2 (addition): ")
    expect(errors.nth(1)).to_contain_text("nowhere.jsonl: not a task file this deployment can read")
    expect(page.get_by_test_id("tasks")).to_have_value(typed)
    expect(page.get_by_test_id("description")).to_have_value("the trainer's synthetic suite")
    screenshot(page, "suites-form-error.png")

    # The suite file's tasks replace the lines.
    page.get_by_test_id("suite_file").fill(str(suite_json))
    page.get_by_test_id("save").click()

    page.wait_for_url(f"{base}/suites/")
    row = page.locator('[data-testid=suite-row][data-suite="synthetic"]')
    expect(row).to_be_visible()
    expect(row.get_by_test_id("suite-tasks")).to_contain_text("6 tasks")
    for name in TASKS:
        expect(row.get_by_test_id("suite-tasks")).to_contain_text(name)
    expect(row.get_by_test_id("suite-status")).to_have_text("all 6 files readable")
    expect(row).to_contain_text("the trainer's synthetic suite")
    screenshot(page, "suites-list.png")

    row.get_by_test_id("suite-link").click()
    expect(page.get_by_test_id("suite-name")).to_have_text("Suite synthetic")
    expect(page.get_by_test_id("task-row")).to_have_count(6)
    larger = page.locator('[data-testid=task-row][data-task="larger"]')
    expect(larger).to_contain_text("multiple_choice")
    expect(larger).to_contain_text(str(suite_json.parent / "larger.jsonl"))
    expect(larger.get_by_test_id("task-check")).to_contain_text("8 items")
    expect(page.get_by_test_id("suite-json")).to_contain_text('"name": "synthetic"')
    screenshot(page, "suites-detail.png")

    suite = EvalSuite.objects.get()
    assert [task["name"] for task in suite.tasks] == list(TASKS)

    # A file that goes away shows as a problem on both pages.
    (suite_json.parent / "larger.jsonl").unlink()
    page.goto(f"{base}/suites/")
    expect(row.get_by_test_id("suite-status")).to_contain_text("1 problem")
    screenshot(page, "suites-list-problem.png")
    row.get_by_test_id("suite-link").click()
    expect(larger.get_by_test_id("task-check")).to_contain_text(
        "not a task file this deployment can read"
    )
    screenshot(page, "suites-detail-problem.png")

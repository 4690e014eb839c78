"""The compose form's feedback in the browser: the error summary links to each field,
and Preview scrolls to its result and announces it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from trainer.zoo import ZOO_IDS

pytestmark = pytest.mark.browser


def open_compose_form(page: Page, base: str, user: User) -> None:
    log_in(page, base, user, "alice-password")
    page.goto(f"{base}/experiments/new/")
    page.fill("[name=name]", "feedback")


def test_the_error_summary_links_to_and_focuses_each_field(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    open_compose_form(page, base, alice)
    page.fill("[name=pool-1-group_size]", "1")  # the trainer's check: G >= 2
    page.fill("[name=steps]", "0")  # steps >= 1, far down the page
    page.get_by_test_id("preview").click()

    summary = page.get_by_test_id("error-summary")
    expect(summary).to_be_focused()
    expect(summary).to_be_in_viewport()
    links = summary.get_by_test_id("error-link")
    expect(links).to_have_count(2)
    expect(links.nth(0)).to_have_text(
        "Policy 2 · Group size (G): G must be at least 2 for a group baseline; got 1"
    )
    expect(links.nth(1)).to_contain_text("Steps: steps must be >= 1")

    links.nth(1).click()
    steps = page.locator("[name=steps]")
    expect(steps).to_be_focused()
    expect(steps).to_be_in_viewport()
    expect(page.get_by_test_id("error-summary")).not_to_be_in_viewport()

    page.evaluate("window.scrollTo(0, 0)")
    links.nth(0).click()
    group_size = page.locator("[name=pool-1-group_size]")
    expect(group_size).to_be_focused()
    expect(group_size).to_be_in_viewport()
    assert page.evaluate("location.hash") == "#id_pool-1-group_size"


def test_a_link_to_a_field_in_closed_details_opens_them(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    open_compose_form(page, base, alice)
    page.get_by_test_id("policy-form").nth(0).locator("details.advanced summary").click()
    page.fill("[name=pool-0-tokenizer]", "/no/such/tokenizer")
    page.get_by_test_id("preview").click()

    # The server opens the details of a field with an error; closed again by hand, the
    # summary's link still reaches the field.
    details = page.get_by_test_id("policy-form").nth(0).locator("details.advanced")
    details.locator("summary").click()
    expect(page.locator("[name=pool-0-tokenizer]")).to_be_hidden()
    page.get_by_test_id("error-link").filter(has_text="Policy 1 · Tokenizer").click()
    expect(page.locator("[name=pool-0-tokenizer]")).to_be_focused()
    expect(page.locator("[name=pool-0-tokenizer]")).to_be_in_viewport()


def test_preview_scrolls_to_its_result_and_announces_it(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    open_compose_form(page, base, alice)
    page.get_by_test_id("preview").click()

    panel = page.get_by_test_id("preview-panel")
    expect(panel).to_be_visible()
    expect(page.get_by_test_id("preview-title")).to_be_focused()
    expect(page.get_by_test_id("preview-title")).to_be_in_viewport()
    # Scrolled down to it: the panel's heading sits at the top of the window.
    assert abs(page.evaluate("document.getElementById('preview').getBoundingClientRect().top")) < 40
    assert page.evaluate("window.scrollY") > 1000
    status = page.get_by_role("status")
    expect(status).to_contain_text("The config is valid: 2 policies")
    expect(status).to_contain_text("Nothing is saved until you press Save")
    expect(page.get_by_role("region", name="Preview")).to_be_visible()


def test_one_preview_shows_every_problem_next_to_its_field(
    page: Page, live_server: object, alice: User, settings: Any, built_zoo: Path, tmp_path: Path
) -> None:
    """Issue 31: mistakes in every part of the form (names, the schedule, the seeds, a
    policy, a section, the resources, an unbuilt zoo model) are all on the page after one
    Preview, each next to its field, counted in the summary."""
    zoo = tmp_path / "zoo"  # the default zoo built, nothing else
    zoo.mkdir()
    for zoo_id in ZOO_IDS:
        (zoo / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(zoo)
    base = live_server.url  # type: ignore[attr-defined]
    open_compose_form(page, base, alice)
    mistakes = {
        "name": "first ten minutes",
        "steps": "1e12",
        "seeds": "0, 0, abc",
        "prompts_per_step": "0",
        "pool-0-temperature": "0",
        "pool-1-model": "zoo:tiny-qwen-bpe-sub",
        "grpo-clip_eps": "1.5",
        "resources-gpus": "64",
        "resources-mem_gb": "99999999",
        "resources-time_limit": "99:99:99",
    }
    for name, value in mistakes.items():
        page.fill(f"[name={name}]", value)
    page.get_by_test_id("preview").click()

    command = f"python -m trainer zoo build --recipe complementary --zoo-dir {zoo}"
    expected = {
        "name": ["'first ten minutes' is not a valid name"],
        "steps": ["Enter a whole number."],
        "seeds": ["'abc' is not one", "duplicate seed 0"],
        "prompts_per_step": ["prompts_per_step must be >= 1; got 0"],
        "pool-0-temperature": ["temperature must be > 0"],
        "pool-1-model": [f"zoo model 'tiny-qwen-bpe-sub' is not built in {zoo}", command],
        "grpo-clip_eps": ["clip_eps must be in (0, 1); got 1.5"],
        "resources-gpus": ["more GPUs than the partition has"],
        "resources-mem_gb": ["less than or equal to 100000"],
        "resources-time_limit": ["'99:99:99' is not a time limit"],
    }
    messages = page.locator("p.field-error")
    expect(messages).to_have_count(11)  # seeds has two
    for name, fragments in expected.items():
        shown = page.locator(f'[data-field="{name}"] p.field-error')
        for fragment in fragments:
            expect(shown.filter(has_text=fragment)).to_be_visible()
    summary = page.get_by_test_id("error-summary")
    expect(summary).to_be_focused()
    expect(summary.locator("h2")).to_have_text("Please fix these 11 problems; nothing was saved")
    expect(summary.get_by_test_id("error-link")).to_have_count(11)
    expect(page.get_by_test_id("preview-panel")).to_have_count(0)


def test_the_build_button_starts_the_build_in_place_and_follows_it(
    page: Page,
    live_server: object,
    alice: User,
    settings: Any,
    built_zoo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31: "Build <recipe> zoo" next to a "not built" error starts the build as a
    job without leaving the page (what was typed stays), then shows its progress until
    it says to press Preview again. The job is recorded, not run: this test plays the
    worker's part by writing the build's status as the worker does."""
    from scheduler import dispatch
    from webapp.registry import zoo_builds

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for zoo_id in ZOO_IDS:
        (zoo / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(zoo)
    settings.VAR_DIR = str(tmp_path / "var")
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(dispatch, "send_zoo_build", lambda *job: sent.append(job) or True)
    base = live_server.url  # type: ignore[attr-defined]
    open_compose_form(page, base, alice)
    page.fill("[name=pool-1-model]", "zoo:tiny-qwen-bpe-sub")
    page.get_by_test_id("preview").click()
    field = page.locator('[data-field="pool-1-model"]')
    button = field.get_by_role("button", name="Build complementary zoo")
    expect(button).to_be_visible()
    page.fill("[name=steps]", "7")  # typed after Preview: must survive the button
    url = page.url

    button.click()
    status = field.get_by_test_id("zoo-build-status")
    expect(status).to_have_text("Building the complementary zoo (started): 0 of 3 models ready.")
    expect(button).to_be_hidden()
    assert page.url == url and page.input_value("[name=steps]") == "7"
    assert sent == [("complementary", str(zoo))]

    build = zoo_builds.load("complementary")
    assert build is not None
    build.state, build.ready = "building", ["tiny-llama-char-add"]
    build.save()
    expect(status).to_have_text(
        "Building the complementary zoo: 1 of 3 models ready.", timeout=15_000
    )
    build.state, build.ready = "ready", list(build.models)
    build.save()
    expect(status).to_have_text("Built: press Preview again.", timeout=15_000)
    expect(button).to_be_hidden()

"""The run page's peer-transfer panel, read as a user reads it: the matrix and the chart
count what the filters let through, a matrix cell filters the log, a row opens to show
what crossed, and a regime where nothing crosses says so."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

TEXT = "12 + 30 = 42, so the answer is \\boxed{42} 🙂"
TOKENS = ["12", "Ġ+", "Ġ30", "Ġ=", "Ġ42", ",", "Ġso", "<|endoftext|>"]


def _event(step: int, source: str, target: str, count: int = 1, **extra: Any) -> dict:
    return {
        "step": step,
        "source": source,
        "target": target,
        "kind": "rollout",
        "prompt_id": f"arith-{step:05d}",
        "count": count,
        "weight": 0.75,
        **extra,
    }


EVENTS = [
    _event(1, "llama", "qwen", 2, samples=[{"text": TEXT, "tokens": TOKENS, "reward": 1.0}]),
    _event(2, "qwen", "llama"),
    _event(5, "gpt2", "qwen", 3),
    _event(8, "llama", "qwen"),  # shipped by an older trainer: no samples
    _event(9, "qwen", "gpt2", 4),
]

# The matrix as shown: {"source->target": the cell's text} of the visible table.
MATRIX = """() => {
  const table = document.querySelector("#transfer-matrix table");
  if (!table || !table.offsetParent) return null;
  const [head, ...rows] = Array.from(table.rows);
  const targets = Array.from(head.cells).slice(1).map((cell) => cell.textContent.trim());
  const shown = {};
  for (const row of rows) {
    const source = row.cells[0].textContent.trim();
    Array.from(row.cells).slice(1).forEach((cell, i) => {
      if (source !== targets[i]) shown[`${source}->${targets[i]}`] = cell.textContent.trim();
    });
  }
  return shown;
}"""
# The bars Plotly drew in the over-time chart, summed.
CHARTED = """() => {
  const div = document.getElementById("transfer-over-time");
  if (!div || !div._fullData || !div.offsetParent) return null;
  return div._fullData.reduce((sum, trace) => sum + trace.y.reduce((a, b) => a + b, 0), 0);
}"""
# The log's visible rows as (step, source, target).
LOG = """() => Array.from(document.querySelectorAll("#transfer-rows tr"))
  .filter((row) => row.offsetParent && row.cells.length > 2)
  .map((row) => Array.from(row.cells).map((cell) => cell.textContent.trim()))
  .map((cells) => cells.slice(-7, -4).join(" "))"""


def _wait_for(page: Page, script: str, wanted: Any, timeout: float = 8.0) -> None:
    started, seen = time.monotonic(), None
    while time.monotonic() - started < timeout:
        seen = page.evaluate(script)
        if seen == wanted:
            return
        page.wait_for_timeout(100)
    pytest.fail(f"wanted {wanted!r}, the page shows {seen!r}")


def _open(
    page: Page, base_url: str, alice: User, experiment: Experiment, events: list[dict]
) -> Run:
    run = services.runs_create(experiment, state="queued")[0]
    if events:
        response = requests.post(
            f"{base_url}/api/v1/runs/{run.pk}/ingest",
            json={"events": events, "status": {"state": "running", "message": "step 9"}},
            headers={"Authorization": f"Bearer {services.run_token_issue(run)}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}{run.get_absolute_url()}")
    return run


ALL = {
    "llama->qwen": "3",
    "llama->gpt2": "0",
    "qwen->llama": "1",
    "qwen->gpt2": "4",
    "gpt2->llama": "0",
    "gpt2->qwen": "3",
}
LOG_ALL = ["1 llama qwen", "2 qwen llama", "5 gpt2 qwen", "8 llama qwen", "9 qwen gpt2"]


@pytest.fixture
def prp_run(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> Run:
    return _open(page, live_server.url, alice, make_experiment(regime="prp", seeds=(0,)), EVENTS)


def test_the_matrix_and_the_chart_count_what_the_filters_let_through(
    page: Page, prp_run: Run
) -> None:
    _wait_for(page, MATRIX, ALL)
    _wait_for(page, CHARTED, 11)

    page.fill("#transfer-filter input[name=step_min]", "2")
    page.fill("#transfer-filter input[name=step_max]", "8")
    page.click("#transfer-filter button[type=submit]")
    steps_2_to_8 = {**ALL, "llama->qwen": "1", "qwen->gpt2": "0"}
    _wait_for(page, MATRIX, steps_2_to_8)
    _wait_for(page, CHARTED, 5)
    _wait_for(page, LOG, ["2 qwen llama", "5 gpt2 qwen", "8 llama qwen"])

    page.select_option("#transfer-filter select[name=target]", "qwen")
    page.click("#transfer-filter button[type=submit]")
    _wait_for(page, MATRIX, {**steps_2_to_8, "qwen->llama": "0"})
    _wait_for(page, CHARTED, 4)

    page.select_option("#transfer-filter select[name=source]", "qwen")
    page.click("#transfer-filter button[type=submit]")
    expect(page.get_by_test_id("transfer-message")).to_have_text(
        "No transfers match these filters."
    )
    expect(page.locator("#transfer-over-time .main-svg")).to_have_count(0)  # no empty chart


def test_a_matrix_cell_filters_the_log_and_a_second_click_clears_it(
    page: Page, prp_run: Run
) -> None:
    _wait_for(page, LOG, LOG_ALL)
    cell = page.locator("#transfer-matrix td[data-source=llama][data-target=qwen]")
    cell.click()
    _wait_for(page, LOG, ["1 llama qwen", "8 llama qwen"])
    expect(page.locator("#transfer-filter select[name=source]")).to_have_value("llama")
    expect(page.locator("#transfer-filter select[name=target]")).to_have_value("qwen")
    selected = page.locator("#transfer-matrix td.selected")
    expect(selected).to_have_count(1)
    expect(selected).to_have_attribute("data-source", "llama")
    expect(selected).to_have_text("3")

    page.locator("#transfer-matrix td[data-source=llama][data-target=qwen]").click()
    _wait_for(page, LOG, LOG_ALL)
    expect(page.locator("#transfer-filter select[name=source]")).to_have_value("")
    expect(page.locator("#transfer-matrix td.selected")).to_have_count(0)

    page.locator("#transfer-matrix td[data-source=gpt2][data-target=qwen]").click()
    _wait_for(page, LOG, ["5 gpt2 qwen"])
    page.click("#transfer-clear")
    _wait_for(page, LOG, LOG_ALL)


def test_a_row_opens_to_show_what_crossed(page: Page, prp_run: Run) -> None:
    _wait_for(page, LOG, LOG_ALL)
    first = page.locator("#transfer-rows tr[data-event-id]").first
    first.get_by_role("button").click()
    detail = page.get_by_test_id("transfer-detail")
    expect(detail.get_by_test_id("transfer-text")).to_have_text(TEXT)
    expect(detail).to_contain_text("1 of the 2 that crossed")
    expect(detail).to_contain_text("Retokenized for qwen (THL): 8 tokens")
    expect(detail.locator("[data-testid=transfer-tokens] li")).to_have_text(TOKENS)
    expect(detail.get_by_test_id("transfer-reason")).to_have_count(0)  # its trainer said none
    page.evaluate("window.MRLRun.transfers.refresh()")  # what the poll loop does: it stays open
    expect(page.get_by_test_id("transfer-text")).to_have_text(TEXT)
    first.get_by_role("button").click()
    expect(page.get_by_test_id("transfer-detail")).to_have_count(0)

    old = page.locator("#transfer-rows tr[data-event-id]").nth(3)
    old.get_by_role("button").click()
    expect(page.get_by_test_id("transfer-detail").locator("p.empty")).to_have_text(
        "No text recorded for this event (its trainer did not ship what crossed)."
    )


def test_a_regime_without_transfers_says_so(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(regime="standalone", seeds=(0,))
    _open(page, live_server.url, alice, experiment, [])
    panel = page.locator("#transfers")
    expect(panel.get_by_test_id("transfer-none")).to_have_text(
        "Standalone GRPO: policies share no experience, so there are no transfers."
    )
    expect(panel.locator("table, .js-plotly-plot, form")).to_have_count(0)


def test_a_sharing_run_without_events_says_no_transfers_yet(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    _open(page, live_server.url, alice, make_experiment(regime="sgt", seeds=(0,)), [])
    expect(page.get_by_test_id("transfer-message")).to_have_text("No transfers yet.")
    expect(page.get_by_test_id("transfer-matrix")).to_be_hidden()
    expect(page.locator("#transfer-over-time .main-svg")).to_have_count(0)
    expect(page.get_by_test_id("transfer-table")).to_be_visible()


CUT_OFF = "Computing 1 (1 + 1) is a classic reminder that some"
RESCUES = [
    {
        "step": 3,
        "source": "llama",
        "target": "qwen",
        "kind": "success",
        "prompt_id": "arith-00001",
        "samples": [
            {
                "text": CUT_OFF,
                "finished": False,
                "reason": "last number 1 = 1 (no box); cut off at max_new_tokens",
            }
        ],
    },
    {
        "step": 4,
        "source": "qwen",
        "target": "llama",
        "kind": "success",
        "prompt_id": "arith-00002",
        "samples": [
            {"text": "\\boxed{85}", "finished": True, "reason": "\\boxed{85} = 85; ended with EOS"}
        ],
    },
]


def test_a_rescue_row_says_why_its_response_counted_and_marks_an_unfinished_one(
    page: Page, live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(regime="sgt", seeds=(0,))
    _open(page, live_server.url, alice, experiment, RESCUES)
    _wait_for(page, LOG, ["3 llama qwen", "4 qwen llama"])
    rows = page.locator("#transfer-rows tr[data-event-id]")

    rows.nth(0).get_by_role("button").click()
    detail = page.get_by_test_id("transfer-detail")
    expect(detail.get_by_test_id("transfer-text")).to_have_text(CUT_OFF)
    expect(detail.locator(".transfer-sample h4").first).to_have_text("Response 1 · unfinished")
    expect(detail.get_by_test_id("transfer-reason")).to_have_text(
        "Unfinished: cut off at max_new_tokens. "
        "Scored: last number 1 = 1 (no box); cut off at max_new_tokens"
    )
    rows.nth(0).get_by_role("button").click()
    expect(page.get_by_test_id("transfer-detail")).to_have_count(0)

    rows.nth(1).get_by_role("button").click()
    detail = page.get_by_test_id("transfer-detail")
    expect(detail.locator(".transfer-sample h4").first).to_have_text("Response 1")
    expect(detail.get_by_test_id("transfer-reason")).to_have_text(
        "Scored: \\boxed{85} = 85; ended with EOS"
    )

"""The run page follows a running run without a reload: its charts draw new points as they
arrive, a zoomed chart keeps its zoom, and the state, the timeline and the job output
update too.

The chart checks read what Plotly drew (the x range it laid out and the points of each
trace's SVG line), not the arrays handed to it: those can grow while the picture stays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

POLICIES = (("llama", 0.0), ("qwen", 0.1), ("gpt2", 0.2))
KEYS = ("train/reward_mean", "actor/entropy")
SHIPPED = 10  # steps shipped while the page is open, one a second
CAUGHT_UP_S = 6.0  # a shipped point is drawn within this (the page polls every 2 s)

# What Plotly drew for one chart: the x range of its layout, and the number of points in
# the SVG line of each trace ("M x,y L x,y ..."), in trace order.
DRAWN = """(key) => {
  const div = document.querySelector(`[data-testid="chart-${key}"]`);
  if (!div || !div._fullLayout || !div._fullLayout.xaxis) return null;
  const lines = Array.from(div.querySelectorAll(".scatterlayer .trace path.js-line"));
  return {
    range: Array.from(div._fullLayout.xaxis.range, Number),
    points: lines.map((line) => ((line.getAttribute("d") || "").match(/[ML]/g) || []).length),
  };
}"""


def _value(key: str, offset: float, step: int) -> float:
    # A zigzag: Plotly leaves the middle points of a straight line out of the path it draws.
    wiggle = 0.05 * (step % 2)
    trend = step / 100 if key == "train/reward_mean" else 2.0 - step / 50
    return offset + trend + wiggle


def _ship(base_url: str, run_id: int, token: str, steps: Sequence[int], **extra: object) -> None:
    points = [
        {
            "policy": policy,
            "key": key,
            "step": step,
            "value": _value(key, offset, step),
            "wall_time": time.time(),
        }
        for step in steps
        for policy, offset in POLICIES
        for key in KEYS
    ]
    response = requests.post(
        f"{base_url}/api/v1/runs/{run_id}/ingest",
        json={"points": points, **extra},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


class _Shipper(threading.Thread):
    """Ships one step a second, as a trainer does (the test's own thread drives the page)."""

    def __init__(self, base_url: str, run_id: int, token: str, steps: range) -> None:
        super().__init__(daemon=True)
        self.args = (base_url, run_id, token)
        self.steps = steps
        self.shipped = -1
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            for i, step in enumerate(self.steps):
                time.sleep(max(0.0, started + i - time.monotonic()))
                _ship(*self.args, [step], status={"state": "running", "message": f"step {step}"})
                self.shipped = step
        except (AssertionError, requests.RequestException) as exc:  # raised by finish()
            self.error = exc

    def finish(self) -> None:
        self.join(timeout=30)
        assert not self.is_alive(), "the shipper did not finish"
        if self.error is not None:
            raise self.error


def _drawn(page: Page) -> dict[str, Any]:
    return {key: page.evaluate(DRAWN, key) for key in KEYS}


def _shows_up_to(drawn: dict[str, Any] | None, last_step: int) -> bool:
    """The chart's x range reaches ``last_step`` and every trace's line holds every step."""
    return bool(
        drawn
        and drawn["range"][1] >= last_step
        and drawn["points"] == [last_step + 1] * len(POLICIES)
    )


def _wait_until_drawn(
    page: Page, last_step: int, keys: Sequence[str] = KEYS, timeout: float = CAUGHT_UP_S
) -> float:
    """Seconds until every chart of ``keys`` shows steps 0..``last_step``; fails with what
    was drawn when it does not within ``timeout``."""
    started = time.monotonic()
    while True:
        drawn = _drawn(page)
        if all(_shows_up_to(drawn[key], last_step) for key in keys):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            pytest.fail(f"steps 0..{last_step} not drawn after {timeout} s; drawn: {drawn}")
        page.wait_for_timeout(200)


def _open_run(
    page: Page, base_url: str, alice: User, experiment: Experiment, up_to_step: int
) -> tuple[Run, str]:
    run = services.runs_create(experiment, state="queued")[0]
    token = services.run_token_issue(run)
    status = {"state": "running", "message": f"step {up_to_step}"}
    _ship(base_url, run.pk, token, range(up_to_step + 1), status=status)
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}{run.get_absolute_url()}")
    page.evaluate("window.__sameDocument = true")
    return run, token


@pytest.mark.parametrize("opened_at", [0, 30], ids=["opened-at-step-0", "opened-mid-run"])
def test_charts_draw_new_points_as_they_arrive(
    page: Page,
    live_server: object,
    alice: User,
    make_experiment: Callable[..., Experiment],
    opened_at: int,
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    run, token = _open_run(page, base_url, alice, make_experiment(seeds=(0,)), opened_at)
    _wait_until_drawn(page, opened_at)

    shipper = _Shipper(base_url, run.pk, token, range(opened_at + 1, opened_at + 1 + SHIPPED))
    shipper.start()
    samples = []  # (shipped step, what was drawn), every half second while shipping
    while shipper.is_alive():
        samples.append((shipper.shipped, _drawn(page)))
        page.wait_for_timeout(500)
    shipper.finish()

    # While the points arrived, the drawn range and lines grew, poll after poll.
    for key in KEYS:
        ends = [drawn[key]["range"][1] for _, drawn in samples]
        counts = [sum(drawn[key]["points"]) for _, drawn in samples]
        trail = [(step, drawn[key]) for step, drawn in samples]
        assert ends == sorted(ends) and counts == sorted(counts), f"{key} shrank: {trail}"
        assert len(set(ends)) >= 3 and len(set(counts)) >= 3, f"{key} did not grow: {trail}"
        assert ends[-1] > opened_at + 1 and counts[-1] > len(POLICIES) * (opened_at + 1), trail
    # Within seconds of the last point, the axis is laid out over all of them, from step 0.
    last = opened_at + SHIPPED
    caught_up = _wait_until_drawn(page, last)
    for key in KEYS:
        start, end = _drawn(page)[key]["range"]
        assert start <= 0 and last <= end < last + 1, (key, start, end)
    assert caught_up < CAUGHT_UP_S
    assert page.evaluate("window.__sameDocument") is True  # no reload happened
    # The data behind the lines: one trace per policy, in pool order.
    names = page.evaluate(
        """() => document.querySelector('[data-testid="chart-train/reward_mean"]')
                 ._fullData.map((trace) => trace.name)"""
    )
    assert names == [name for name, _ in POLICIES]


def test_a_zoomed_chart_keeps_its_zoom_while_the_others_follow(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    run, token = _open_run(page, base_url, alice, make_experiment(seeds=(0,)), 20)
    _wait_until_drawn(page, 20)

    # Drag across the middle of the reward chart: an x zoom, as a user does it.
    zoomed_key, other_key = KEYS
    drag_layer = page.locator(f'[data-testid="chart-{zoomed_key}"] .nsewdrag')
    drag_layer.scroll_into_view_if_needed()  # the mouse acts on what is on screen
    area = drag_layer.bounding_box()
    assert area is not None
    y = area["y"] + area["height"] / 2
    page.mouse.move(area["x"] + area["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(area["x"] + area["width"] * 0.5, y, steps=8)
    page.mouse.up()
    zoomed = _drawn(page)[zoomed_key]["range"]
    assert 3 < zoomed[0] < zoomed[1] < 12, zoomed

    shipper = _Shipper(base_url, run.pk, token, range(21, 25))
    shipper.start()
    shipper.finish()
    _wait_until_drawn(page, 24, keys=[other_key])  # the chart nobody zoomed follows
    page.wait_for_timeout(500)
    assert _drawn(page)[zoomed_key]["range"] == pytest.approx(zoomed)  # the zoom stays

    # A double click autoscales the zoomed chart, and from then on it follows again.
    page.mouse.dblclick(area["x"] + area["width"] / 2, y)
    _wait_until_drawn(page, 24, timeout=2.0)
    _ship(base_url, run.pk, token, [25])
    _wait_until_drawn(page, 25)
    assert page.evaluate("window.__sameDocument") is True


def test_a_chart_scrolled_into_view_catches_up(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """Charts far off screen wait for the user to scroll to them; then they draw at once."""
    base_url = live_server.url  # type: ignore[attr-defined]
    page.set_viewport_size({"width": 1400, "height": 500})
    run, token = _open_run(page, base_url, alice, make_experiment(seeds=(0,)), 5)
    _wait_until_drawn(page, 5)
    page.get_by_test_id("config-json").scroll_into_view_if_needed()
    for key in KEYS:
        box = page.get_by_test_id(f"chart-{key}").bounding_box()
        assert box is not None and box["y"] + box["height"] < -400, box  # far above the view

    _ship(base_url, run.pk, token, [6, 7, 8])
    chart = page.get_by_test_id(f"chart-{KEYS[0]}")
    expect(chart).to_have_attribute("data-points", str(9 * len(POLICIES)), timeout=6_000)
    page.wait_for_timeout(500)
    assert all(_shows_up_to(drawn, 5) for drawn in _drawn(page).values())  # not redrawn

    chart.scroll_into_view_if_needed()
    _wait_until_drawn(page, 8, timeout=3.0)  # no new points needed: the scroll draws it
    assert page.evaluate("window.__sameDocument") is True


def test_state_timeline_and_job_output_follow_the_run(
    page: Page,
    live_server: object,
    alice: User,
    make_experiment: Callable[..., Experiment],
    tmp_path: Path,
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    token = services.run_token_issue(run)
    Run.objects.filter(pk=run.pk).update(run_dir=str(tmp_path))
    log = tmp_path / "job" / "output.log"
    log.parent.mkdir(parents=True)
    log.write_text("worker 0: loading tiny-llama-char\n")
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}{run.get_absolute_url()}")
    page.evaluate("window.__sameDocument = true")

    badge = page.locator("#run-state").get_by_test_id("run-state")
    rows = page.get_by_test_id("timeline").locator("tbody tr")
    job_log = page.get_by_test_id("job-log")
    expect(badge).to_have_text("queued")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("queued")
    expect(job_log).to_contain_text("loading tiny-llama-char", timeout=6_000)
    expect(page.get_by_test_id("cancel-run")).to_be_visible()

    _ship(base_url, run.pk, token, [0], status={"state": "running", "message": "step 0/2"})
    expect(badge).to_have_text("running", timeout=6_000)
    expect(rows).to_have_count(2, timeout=6_000)
    expect(rows.nth(1)).to_contain_text("running")
    expect(rows.nth(1)).to_contain_text("step 0/2")
    expect(rows.nth(1).get_by_test_id("run-state")).to_have_class("state state-running")

    with log.open("a") as output:
        output.write("step 1/2 reward 0.41\n")
    expect(job_log).to_contain_text("step 1/2 reward 0.41", timeout=6_000)

    _ship(base_url, run.pk, token, [1], status={"state": "completed", "message": "done"})
    expect(badge).to_have_text("completed", timeout=6_000)
    expect(rows).to_have_count(3, timeout=6_000)
    expect(rows.nth(2)).to_contain_text("completed")
    expect(rows.nth(2)).to_contain_text("done")
    # The actions follow the state: a finished run is resubmitted, not cancelled.
    expect(page.get_by_test_id("resubmit-run")).to_be_visible(timeout=6_000)
    expect(page.get_by_test_id("cancel-run")).to_have_count(0)
    expect(page.locator("#run-actions form input[name=csrfmiddlewaretoken]").first).to_be_attached()
    assert page.evaluate("window.__sameDocument") is True

    # The rebuilt forms post as the page's own did.
    page.get_by_test_id("clone-run").click()
    expect(page.locator(".messages")).to_contain_text("Cloned into the new draft")
    assert Experiment.objects.count() == 2

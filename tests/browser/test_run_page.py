"""The run page fills its charts live from the ingestion API, without a reload."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from webapp.experiments import services
from webapp.experiments.models import Experiment

pytestmark = pytest.mark.browser


def _ship(base_url: str, run_id: int, token: str, steps: range, **extra: object) -> None:
    points = [
        {"policy": policy, "key": key, "step": step, "value": value, "wall_time": time.time()}
        for step in steps
        for policy, offset in (("llama", 0.0), ("qwen", 0.1), ("gpt2", 0.2))
        for key, value in (
            ("train/reward_mean", offset + step / 100),
            ("actor/entropy", 2.0 - step / 50),
        )
    ]
    response = requests.post(
        f"{base_url}/api/v1/runs/{run_id}/ingest",
        json={"points": points, **extra},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def _chart_points(page: Page, key: str) -> int:
    return int(page.get_attribute(f'[data-testid="chart-{key}"]', "data-points") or 0)


def test_new_points_appear_without_a_reload(
    page: Page, live_server: object, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    run = services.runs_create(make_experiment(seeds=(0,)), state="queued")[0]
    token = services.run_token_issue(run)
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}{run.get_absolute_url()}")
    expect(page.locator("#charts-empty")).to_be_visible()
    page.evaluate("window.__sameDocument = true")

    _ship(base_url, run.pk, token, range(0, 5), status={"state": "running", "message": "step 4"})
    chart = page.locator('[data-testid="chart-train/reward_mean"]')
    expect(chart).to_have_attribute("data-points", "15", timeout=5_000)  # 3 policies x 5
    expect(page.locator("#run-state").get_by_test_id("run-state")).to_have_text(
        "running", timeout=5_000
    )

    started = time.monotonic()
    _ship(base_url, run.pk, token, range(5, 12))
    expect(chart).to_have_attribute("data-points", "36", timeout=5_000)
    assert time.monotonic() - started < 5.0
    assert page.evaluate("window.__sameDocument") is True  # no reload happened

    # One trace per policy, in pool order, holding exactly the shipped values.
    traces = page.evaluate(
        """() => document.querySelector('[data-testid="chart-train/reward_mean"]').data
                 .map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))"""
    )
    assert [t["name"] for t in traces] == ["llama", "qwen", "gpt2"]
    assert traces[1]["x"] == list(range(12))
    assert all(
        math.isclose(y, 0.1 + s / 100) for s, y in zip(traces[1]["x"], traces[1]["y"], strict=True)
    )
    assert _chart_points(page, "actor/entropy") == 36

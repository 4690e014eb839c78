"""A comparison of ingested runs in the browser: regroup, smooth, download PDF and CSV."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from scheduler.launch import sweep_launch
from tests.conftest import log_in
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.browser

STEPS = 30


def ship_curves(base_url: str, run: Run) -> None:
    """Two metrics for each policy: a rising reward, noisy by seed, and an entropy."""
    token = services.run_token_issue(run)
    offset = {"standalone": 0.0, "sgt": 0.1}[run.regime]
    points = [
        {
            "policy": policy,
            "key": key,
            "step": step,
            "value": value,
            "wall_time": 1_700_000_000.0 + step,
        }
        for policy in run.policy_names
        for step in range(STEPS)
        for key, value in (
            ("val/reward@1", offset + step / 100 + 0.02 * math.sin(step + run.seed)),
            ("train/reward_mean", offset + step / 120),
        )
    ]
    response = requests.post(
        f"{base_url}/api/v1/runs/{run.pk}/ingest",
        json={"points": points},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def panel_groups(page: Page) -> list[str]:
    return page.evaluate(
        """() => document.querySelector('[data-testid="compare-panel"]').data
                 .filter(t => t.showlegend !== false).map(t => t.name)"""
    )


def first_mean(page: Page) -> list[float]:
    return page.evaluate(
        """() => Array.from(document.querySelector('[data-testid="compare-panel"]').data
                 .filter(t => t.showlegend !== false)[0].y)"""
    )


def test_compare_regroup_smooth_and_download(
    page: Page,
    live_server: object,
    alice: User,
    make_experiment: Callable[..., Experiment],
    tmp_path: Path,
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="cmp", regimes=["standalone", "sgt"], seeds=[0, 1]
    )
    for run in Run.objects.filter(experiment__sweep=sweep):
        ship_curves(base, run)

    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}/sweeps/{sweep.pk}/")
    page.get_by_test_id("sweep-compare").click()
    panels = page.get_by_test_id("compare-panel")
    expect(panels).to_have_count(6, timeout=10_000)  # 3 policies x 2 metrics
    assert panel_groups(page) == ["standalone", "sgt"]
    # Drawn titles and y-axes name metrics as people read them (the metric catalogue).
    titles = page.locator("[data-testid=compare-panel] .gtitle").all_text_contents()
    assert any("Validation reward@1" in title for title in titles), titles
    assert not any("val/reward@1" in title for title in titles), titles
    y_titles = page.locator("[data-testid=compare-panel] .ytitle").all_text_contents()
    assert "Validation reward@1" in y_titles, y_titles

    page.fill("[data-testid=group-by]", "seed")
    page.get_by_test_id("apply").click()
    page.wait_for_function(
        """() => { const p = document.querySelector('[data-testid="compare-panel"]');
                   return p && p.data && p.data.filter(t => t.showlegend !== false)
                          .map(t => t.name).join() === "seed = 0,seed = 1"; }"""
    )
    raw = first_mean(page)
    page.fill("[data-testid=smooth]", "0.8")
    page.get_by_test_id("smooth").dispatch_event("change")
    deadline = time.monotonic() + 10
    while first_mean(page) == raw and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    smoothed = first_mean(page)
    assert smoothed != raw and smoothed[0] == pytest.approx(raw[0])  # debiased EMA
    assert "group_by=seed" in page.url and "smooth=0.8" in page.url

    with page.expect_download() as pdf:
        page.get_by_test_id("export-pdf").click()
    pdf_path = tmp_path / "figure.pdf"
    pdf.value.save_as(pdf_path)
    assert pdf_path.read_bytes().startswith(b"%PDF")
    with page.expect_download() as csv:
        page.get_by_test_id("export-csv").click()
    csv_path = tmp_path / "data.csv"
    csv.value.save_as(csv_path)
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("group,policy,metric,x,mean")
    assert {line.split(",")[0] for line in lines[1:]} == {"0", "1"}

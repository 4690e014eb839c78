"""Figure 11 has one estimator (trainer.stats.relative_improvement) and one interval
(trainer.stats.relative_interval): the compare page's relative view, its CSV export and
bench/figures_11_12.py give the same numbers on the same runs, a seed whose standalone
run scored 0 included."""

from __future__ import annotations

import csv
import io
import math

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from bench.figures_11_12 import relative_improvements
from tests.webapp.compare.test_compare_support import add_series, make_runs
from trainer.stats import ZERO_BASELINE

pytestmark = pytest.mark.django_db

VAL = "val/reward@1"


def seeded(owner: User, standalone: list[float], sgt: list[float]) -> str:
    """Runs of seeds 0.. with these final val/reward@1 values of llama; their ids."""
    runs = make_runs(owner, "standalone", seeds=range(len(standalone)))
    runs += make_runs(owner, "sgt", seeds=range(len(sgt)))
    for run, final in zip(runs, standalone + sgt, strict=True):
        add_series(run, "llama", VAL, (0, 10), lambda s, f=final: 0.1 if s == 0 else f)
    return ",".join(str(run.pk) for run in runs)


def test_the_bars_the_export_and_the_bench_agree_with_a_zero_seed(
    client: Client, alice: User
) -> None:
    standalone, sgt = [0.0, 0.5, 0.4], [0.3, 0.6, 0.6]
    # mean_b = 0.3 (seed 0's 0 counts), mean_x = 0.5: (0.5 - 0.3) / 0.3 * 100 = 66.67%.
    # Per seed (x - 0.3) / 0.3 * 100 = 0, 100, 100: mean 66.67, sample std 57.74.
    # (The old bench estimator dropped seed 0 and averaged per-seed ratios: 35%.)
    expected, std = 200 / 3, math.sqrt(((200 / 3) ** 2 + 2 * (100 / 3) ** 2) / 2)
    ids = seeded(alice, standalone, sgt)
    client.force_login(alice)
    query = {"runs": ids, "view": "relative", "policy": "llama"}
    reply = client.get(reverse("compare:bars"), query).json()
    [trace] = reply["panels"][0]["traces"]
    assert trace["mean"] == pytest.approx([expected]) and trace["n"] == [3]
    assert trace["std"] == pytest.approx([std])
    bench = relative_improvements(sgt, standalone)
    assert bench["mean"] == pytest.approx(expected) and bench["seeds"] == 3
    assert bench["std"] == pytest.approx(std) and bench["undefined"] == ""
    assert bench["per_seed"] == pytest.approx([0.0, 100.0, 100.0])
    # The error bar: the paired delta method's 95% interval (seeds 0-2 in both groups),
    # which the per-seed ratios (x - b) / |b| could not give: seed 0's b is 0.
    paired = relative_improvements(sgt, standalone, seeds=[0, 1, 2])
    assert paired["method"] == "95% interval, paired delta method, 3 seeds"
    assert trace["lower"] == pytest.approx([paired["low"]])
    assert trace["upper"] == pytest.approx([paired["high"]])
    assert paired["low"] < expected < paired["high"]
    assert reply["interval_note"].startswith("Error bars: " + paired["method"])
    exported = client.get(reverse("compare:bars_file", args=["csv"]), query).content.decode()
    [row] = list(csv.DictReader(io.StringIO(exported)))
    assert float(row["mean"]) == pytest.approx(bench["mean"])
    assert float(row["lower"]) == pytest.approx(paired["low"])
    assert float(row["upper"]) == pytest.approx(paired["high"])
    assert row["error_bar"] == paired["method"]


def test_a_zero_baseline_mean_is_undefined_in_both(client: Client, alice: User) -> None:
    standalone, sgt = [0.0, 0.0], [0.3, 0.4]
    ids = seeded(alice, standalone, sgt)
    client.force_login(alice)
    query = {"runs": ids, "view": "relative", "policy": "llama"}
    reply = client.get(reverse("compare:bars"), query).json()
    assert reply["panels"][0]["traces"] == []
    assert reply["panels"][0]["message"] == "the standalone mean is 0: no relative improvement"
    bench = relative_improvements(sgt, standalone, seeds=[0, 1])
    assert bench["mean"] is None and bench["undefined"] == ZERO_BASELINE
    assert bench["low"] is None and bench["high"] is None
    assert bench["seeds"] == 2  # every seed is counted, none silently dropped

"""The compare page's significance view in the browser: the sentences as rendered, the
interval numbers in the table, Welch said for unpaired runs, Holm named, the forest plot,
a chosen step, and the exports' links; the gap preset's primary endpoint marked and said,
and a one-seed comparison's link to a sweep."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.significance import metric_words
from webapp.runs.models import Run

pytestmark = pytest.mark.browser

VAL = "val/reward@1"
SCREENSHOTS = Path("/tmp")
STANDALONE = (0.3, 0.4, 0.5, 0.4, 0.4)
DIFFERENCES = (0.1, 0.2, 0.3, 0.2, 0.2)  # sgt - standalone per seed: 0.2 [0.112, 0.288]
XGRPO = (0.5, 0.6, 0.7, 0.6, 0.6)  # seeds 10..14: Welch, 0.2 [0.097, 0.303], df 8


def seed(owner: User) -> list[Run]:
    """llama's val/reward@1 at steps 0, 10, 20 (final * step / 20); qwen's differs by
    seed, and under sgt by -0.04, 0.02, -0.02, 0.04, 0 more (a mean difference of 0)."""
    standalone = make_runs(owner, "standalone", seeds=range(5))
    sgt = make_runs(owner, "sgt", seeds=range(5))
    xgrpo = make_runs(owner, "xgrpo", seeds=range(10, 15))
    for run in standalone + sgt + xgrpo:
        if run.regime == "standalone":
            final = STANDALONE[run.seed]
        elif run.regime == "sgt":
            final = STANDALONE[run.seed] + DIFFERENCES[run.seed]
        else:
            final = XGRPO[run.seed - 10]
        add_series(run, "llama", VAL, (0, 10, 20), lambda s, f=final: f * s / 20)
        qwen = 0.5 + 0.05 * ((run.seed * 7) % 5 - 2)
        if run.regime == "sgt":
            qwen += 0.02 * ((run.seed * 3) % 5 - 2)
        add_series(run, "qwen", VAL, (0, 10, 20), lambda s, q=qwen: q * s / 20)
    return standalone + sgt + xgrpo


def test_the_significance_view(page: Page, live_server: object, alice: User) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    runs = seed(alice)
    ids = ",".join(str(run.pk) for run in runs)
    log_in(page, base_url, alice, "alice-password")

    page.goto(f"{base_url}/compare/?runs={ids}&view=significance&policy=llama&policy=qwen")
    # The tests used: paired by seed (sgt) and Welch (xgrpo, no seed shared), Holm over both.
    expect(page.get_by_test_id("sig-title")).to_have_text("Significance (paired t and Welch, Holm)")
    expect(page.get_by_test_id("curves-card")).to_be_hidden()
    expect(page.get_by_test_id("bars-card")).to_be_hidden()
    expect(page.get_by_test_id("baseline")).to_be_visible()
    expect(page.get_by_test_id("sig-step")).to_be_visible()
    sentences = page.get_by_test_id("sig-sentence")
    expect(sentences).to_have_count(4)  # llama, qwen x xgrpo, sgt
    texts = sentences.all_text_contents()
    # Paired by seed: d = [0.1, 0.2, 0.3, 0.2, 0.2], 0.2 +- 2.776445 * 0.0316228; Holm
    # over the 4 comparisons shown multiplies sgt's p = 0.0031982 by 3 (its rank 2 of 4).
    assert (
        "sgt raises llama's validation reward@1 by 0.20 [0.11, 0.29] over standalone, "
        "5 seeds (paired t, Holm p = 0.010)." in texts
    ), texts
    # No seed in common: Welch over all runs, and said so.
    welch = next(text for text in texts if text.startswith("xgrpo raises llama's"))
    assert "by 0.20 [0.10, 0.30] over standalone, 5 vs 5 runs (Welch, Holm p" in welch
    assert welch.endswith("unpaired: no seed is in both groups, so Welch's interval over all runs.")
    assert any(t.startswith("sgt does not clearly change qwen's") for t in texts), texts

    # The table shows the interval numbers.
    row = page.locator('[data-testid="sig-row"][data-group="sgt"][data-policy="llama"]')
    cells = row.locator("td").all_text_contents()
    assert cells[:7] == ["llama", "sgt", "paired t", "5 seeds", "0.20", "[0.11, 0.29]", "0.003"]
    assert cells[7] == "0.010"  # Holm
    welch_row = page.locator('[data-testid="sig-row"][data-group="xgrpo"][data-policy="llama"]')
    expect(welch_row.locator("td").nth(2)).to_have_text("Welch")
    expect(welch_row.locator("td").nth(5)).to_have_text("[0.10, 0.30]")
    expect(page.get_by_test_id("sig-table").get_by_text("[0.11, 0.29]")).to_be_visible()
    method = page.get_by_test_id("sig-method")
    expect(method).to_contain_text("Holm-Bonferroni over the 4 comparisons shown")
    expect(method).to_contain_text("Welch: where fewer than two seeds pair")

    # The forest plot: one row per comparison, a marker each, a dashed zero line.
    forest = page.get_by_test_id("sig-forest")
    expect(forest.locator(".scatterlayer .point")).to_have_count(4)
    ticks = forest.locator(".yaxislayer-above .ytick text").all_text_contents()
    assert ticks == ["sgt · qwen", "xgrpo · qwen", "sgt · llama", "xgrpo · llama"]
    zero = forest.locator(".shapelayer path")
    assert zero.evaluate("p => p.style.strokeDasharray") not in ("", "none")

    href = page.get_by_test_id("sig-export-csv").get_attribute("href") or ""
    assert href.startswith("/compare/bars.csv?") and "view=significance" in href
    tex = page.get_by_test_id("sig-export-tex").get_attribute("href") or ""
    assert tex.startswith("/compare/bars.tex?")
    page.screenshot(path=str(SCREENSHOTS / "significance.png"), full_page=True)

    # At step 10 every value is half its final: the differences halve.
    page.get_by_test_id("sig-step").fill("10")
    page.get_by_test_id("apply").click()
    page.wait_for_url("**sig_step=10**")
    expect(sentences.first).to_contain_text("over standalone")
    expect(
        page.get_by_text("sgt raises llama's validation reward@1 by 0.100 [0.056, 0.144]")
    ).to_be_visible()
    expect(page.get_by_test_id("sig-card")).to_contain_text("at step 10")
    page.screenshot(path=str(SCREENSHOTS / "significance-step10.png"), full_page=True)


GAP_POOL = [
    {"name": "llama", "model": "zoo:tiny-llama-char"},
    {"name": "qwen-nocarry", "model": "zoo:tiny-qwen-bpe"},
]
GAP_METRICS = (
    "val/discrimination/carry",
    "val/discrimination/overflow",
    f"{VAL}/carry",
    f"{VAL}/no_carry",
    VAL,
)
PRIMARY_STANDALONE = (0.00, 0.05, -0.02)  # qwen-nocarry's carry discrimination, seeds 0-2
PRIMARY_SGT = (0.30, 0.30, 0.33)  # differences 0.30, 0.25, 0.35


def gap_seed(owner: User) -> tuple[list[Run], Run]:
    """standalone and sgt seeds 0-2 and one xgrpo run (seed 0) of a two-policy pool, every
    key of the gap-significance preset and the pool mean; every sgt difference varies by
    seed (all tested). Returns the runs and the xgrpo run."""
    standalone = make_runs(owner, "standalone", seeds=range(3), pool=GAP_POOL)
    sgt = make_runs(owner, "sgt", seeds=range(3), pool=GAP_POOL)
    xgrpo = make_runs(owner, "xgrpo", seeds=(0,), pool=GAP_POOL)
    for run in standalone + sgt + xgrpo:
        lift = {"standalone": 0.0, "sgt": 0.05 + 0.02 * run.seed, "xgrpo": 0.1}[run.regime]
        for policy in ("llama", "qwen-nocarry"):
            for k, key in enumerate(GAP_METRICS):
                value = 0.3 + 0.05 * k + 0.03 * run.seed + lift
                if (policy, key) == ("qwen-nocarry", GAP_METRICS[0]):
                    pick = PRIMARY_SGT if run.regime == "sgt" else PRIMARY_STANDALONE
                    value = pick[run.seed]
                add_series(run, policy, key, (0, 20), lambda s, v=value: v * s / 20)
        add_series(run, "_pool", VAL, (0, 20), lambda s, v=0.4 + 0.01 * run.seed + lift: v * s / 20)
    return standalone + sgt + xgrpo, xgrpo[0]


def test_the_gap_preset_marks_the_primary_endpoint_and_links_one_seed_to_a_sweep(
    page: Page, live_server: object, alice: User
) -> None:
    base_url = live_server.url  # type: ignore[attr-defined]
    runs, one_seed = gap_seed(alice)
    ids = ",".join(str(run.pk) for run in runs)
    log_in(page, base_url, alice, "alice-password")
    page.goto(f"{base_url}/compare/?runs={ids}&preset=gap-significance")
    expect(page.get_by_test_id("sig-primary")).to_have_value(
        "qwen-nocarry|val/discrimination/carry|sgt"
    )
    # Only paired t gave a p (xgrpo's one seed has no interval, no test): the title says so.
    expect(page.get_by_test_id("sig-title")).to_have_text("Significance (paired t, Holm)")
    # 5 metrics x 2 policies + the pool mean's val/reward@1, against sgt and xgrpo.
    sentences = page.get_by_test_id("sig-sentence")
    expect(sentences).to_have_count(22)

    # The primary row: marked in the table where the others have their Holm p.
    primary = page.locator('[data-testid="sig-row"][data-primary="1"]')
    expect(primary).to_have_count(1)
    assert primary.get_attribute("data-policy") == "qwen-nocarry"
    assert primary.get_attribute("data-group") == "sgt"
    assert primary.get_attribute("data-metric") == "val/discrimination/carry"
    cells = primary.locator("td").all_text_contents()
    assert "primary" in cells and "0.009" in cells, cells  # its own p, t = 10.39 on 2 df
    # Its sentence: d = 0.30, 0.25, 0.35, mean 0.30, se 0.028868, t_{0.975, 2} = 4.302653:
    # [0.18, 0.42]; outside the Holm family of the 10 other (tested) comparisons.
    words = metric_words("val/discrimination/carry")
    expect(
        page.get_by_text(
            f"sgt raises qwen-nocarry's {words} by 0.30 [0.18, 0.42] over standalone, 3 seeds "
            "(paired t, p = 0.009; the primary endpoint, outside the Holm family of the 10 "
            "other comparisons).",
            exact=True,
        )
    ).to_be_visible()
    # The pool's net effect is there, Holm-adjusted. Every other sgt row moved by 0.05,
    # 0.07, 0.09 (seeds 0-2): 0.07, se 0.011547, t = 6.062 on 2 df, p = 0.026; its 95%
    # interval [0.020, 0.120] excludes 0, but Holm over 10 tied p gives 0.26: no verb.
    expect(
        page.get_by_text(
            "sgt does not clearly change the pool's mean validation reward@1 over standalone "
            "(not significant after Holm): +0.070 [0.020, 0.120] unadjusted interval, 3 seeds "
            "(paired t, unadjusted p = 0.026, Holm p = 0.26).",
            exact=True,
        )
    ).to_be_visible()
    expect(sentences.filter(has_text="sgt raises")).to_have_count(1)  # the primary only

    # xgrpo has one seed: no interval, no Welch named, a link to a sweep of its experiment.
    one = sentences.filter(has_text="xgrpo changes qwen-nocarry's").first
    expect(one).to_contain_text("1 vs 3 runs (one seed: launch a sweep for an interval)")
    expect(one).not_to_contain_text("Welch")
    # Its table row names no test either: none was run.
    one_row = page.locator(
        '[data-testid="sig-row"][data-group="xgrpo"][data-policy="qwen-nocarry"]'
    ).first
    expect(one_row.locator("td").nth(3)).to_have_text("none (one seed)")
    link = one.get_by_test_id("sig-sweep-link")
    expect(link).to_have_text("launch a sweep")
    sweep_form = reverse("compare:sweep_create", args=[one_seed.experiment_id])
    expect(link).to_have_attribute("href", sweep_form)
    page.screenshot(path=str(SCREENSHOTS / "significance-gap-primary.png"), full_page=True)
    link.click()
    page.wait_for_url(f"**{sweep_form}")

"""The compare page's significance view in the browser: the sentences as rendered, the
interval numbers in the table, Welch said for unpaired runs, Holm named, the forest plot,
a chosen step, and the exports' links."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.webapp.compare.test_compare_support import add_series, make_runs
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
    expect(page.get_by_test_id("sig-title")).to_have_text("Significance (paired t, Holm)")
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

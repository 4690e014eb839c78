"""The pages' one decoder of the APIs' non-finite numbers (static/js/non-finite.js: the
strings "NaN", "Infinity", "-Infinity" back into numbers), and the compare page's summary
metric, which the page carries from the server (no key spelled in the JavaScript)."""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.browser.test_compare_first_minutes import compare_url, log_in_fast
from tests.webapp.compare.test_compare_support import add_series, make_runs
from trainer import metrics as m
from webapp.compare.spec import DEFAULT_TABLE_METRIC

pytestmark = pytest.mark.browser

DECODED = """() => ["NaN", "Infinity", "-Infinity", 0.5, null, "other"].map((value) => {
    const number = window.MRLNonFinite.toNumber(value);
    return number === undefined ? "undefined" : String(number);
})"""
EXPECTED = ["NaN", "Infinity", "-Infinity", "0.5", "null", "undefined"]


def watch_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def test_the_compare_page_decodes_the_summary_of_one_seed(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    runs = make_runs(alice, "standalone", seeds=[0])
    for policy in runs[0].policy_names:
        add_series(runs[0], policy, m.VAL_REWARD_AT_1, range(5), lambda s: s / 10)
    errors = watch_errors(page)
    log_in_fast(page, base, alice)
    page.goto(compare_url(base, runs))
    expect(page.get_by_test_id("compare-panel").first).to_be_visible()
    # One seed: the std is "NaN" in the summary's JSON, a number again on the page.
    row = page.get_by_test_id("summary-table").locator("tr", has_text="llama")
    expect(row).to_contain_text("0.400 ± \u2013 (n=1)")
    assert page.evaluate(DECODED) == EXPECTED
    assert errors == []


def test_the_summary_metric_comes_from_the_page_when_no_key_is_listed(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    runs = make_runs(alice, "standalone", seeds=[0])  # no series yet: no key to choose
    errors = watch_errors(page)
    log_in_fast(page, base, alice)
    page.goto(compare_url(base, runs))
    select = page.get_by_test_id("summary-metric")
    expect(select).to_have_attribute("data-default", DEFAULT_TABLE_METRIC)
    assert select.locator("option").count() == 0
    csv = page.get_by_test_id("table-csv")
    expect(csv).to_have_attribute("href", re.compile("table_metric="))
    query = parse_qs(urlsplit(csv.get_attribute("href") or "").query)
    assert query["table_metric"] == [m.VAL_REWARD_AT_1]
    assert errors == []


def test_the_run_page_loads_the_decoder_before_its_charts(
    page: Page, live_server: Any, alice: User
) -> None:
    base = live_server.url
    run = make_runs(alice, "standalone", seeds=[0])[0]
    add_series(run, "llama", m.VAL_REWARD_AT_1, range(3), lambda s: [0.1, math.nan, 0.3][s])
    errors = watch_errors(page)
    log_in_fast(page, base, alice)
    page.goto(f"{base}{run.get_absolute_url()}")
    expect(page.locator("#charts .js-plotly-plot").first).to_be_visible()
    assert page.evaluate(DECODED) == EXPECTED
    assert errors == []

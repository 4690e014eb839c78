"""The compare page's export links with an export over a cap (issue 44): the server's
400 message shows beside the links, the page stays, and nothing downloads."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.export_limits import MAX_FIGURE_GROUPS

pytestmark = pytest.mark.browser


def test_an_export_over_a_cap_shows_its_message_on_the_page(
    page: Page, live_server: object, alice: User
) -> None:
    base = live_server.url  # type: ignore[attr-defined]
    runs = make_runs(alice, "sgt", seeds=range(MAX_FIGURE_GROUPS + 1))
    for run in runs:
        add_series(run, "llama", "val/reward@1", range(0, 30, 5), lambda s: s / 100)
    log_in(page, base, alice, "alice-password")
    ids = ",".join(str(run.pk) for run in runs)
    page.goto(f"{base}/compare/?runs={ids}&group_by=seed&metric=val/reward@1&policy=llama")
    link = page.get_by_test_id("export-pdf")
    page.wait_for_function(  # the page sets the links' query once the curves are in
        "() => (document.querySelector('[data-testid=export-pdf]').getAttribute('href') || '')"
        ".includes('group_by=seed')"
    )
    downloads: list[object] = []
    page.on("download", lambda download: downloads.append(download))
    link.click()
    note = page.get_by_test_id("export-note").first
    expect(note).to_contain_text("export too large")
    expect(note).to_contain_text(f"{MAX_FIGURE_GROUPS + 1} groups")
    expect(note).to_contain_text("coarser group_by")
    assert page.url.startswith(f"{base}/compare/") and downloads == []

"""The README's tour: screenshots of the running demo, taken with Playwright + Chromium.

Start the demo first (``make demo``) and let its sweep run for a minute or two, then:

    .venv/bin/python scripts/tour_screenshots.py [--base-url http://127.0.0.1:8000]
        [--out docs/tour] [--user demo --password demo-password] [--chromium PATH]

It logs in and saves eight PNGs into ``--out``: the demo's SGT run page with its live
curves (``run-live.png``), its answers by error class (``error-classes.png``), its
peer-transfer panel with a transfer opened (``transfers.png``), the compose form with a
preview (``compose-preview.png``), the runs' comparison by regime (``compare.png``) and
the first page of the exported PDF figure (``export-pdf.png``, rendered with poppler's
``pdftoppm``), the gap pool's carry and no-carry slices, the carry discrimination and
the overall reward by regime (``gap-carry.png``: the swing and the net effect) and the
"gap-significance" preset's significance view (``significance.png``). It only reads and
previews: nothing is saved or launched. Each step waits for what it shows to be drawn and says
which step failed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

VIEWPORT = {"width": 1280, "height": 900}


def log_in(page: Page, base_url: str, user: str, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def shoot_run_page(page: Page, base_url: str, out: Path) -> None:
    """The demo's SGT run (else the newest run): curves, then the transfer panel."""
    page.goto(f"{base_url}/runs/?regime=sgt")
    page.locator("main table a[href^='/runs/']").first.click()
    page.locator(".chart .main-svg").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)  # let every chart on screen draw its lines
    page.screenshot(path=out / "run-live.png")
    table = page.get_by_test_id("error-classes")
    table.locator("tbody tr").first.wait_for(timeout=60_000)
    table.scroll_into_view_if_needed()
    table.screenshot(path=out / "error-classes.png")
    transfers = page.locator("#transfers")
    transfers.scroll_into_view_if_needed()
    page.locator("#transfer-rows button").first.click()  # open a row: what crossed
    page.wait_for_timeout(1500)
    box = transfers.evaluate(
        """panel => { const r = panel.getBoundingClientRect();
                      return {x: r.left + scrollX, y: r.top + scrollY, width: r.width,
                              height: r.height}; }"""
    )
    # The filters, the matrix, the chart and the log's first rows (the opened one).
    clip = {**box, "height": min(box["height"], 1100)}
    page.screenshot(path=out / "transfers.png", clip=clip, full_page=True)


def shoot_compose_preview(page: Page, base_url: str, out: Path) -> None:
    page.goto(f"{base_url}/experiments/new/")
    page.fill("input[name=name]", "tour-preview")
    page.get_by_test_id("preview").click()
    panel = page.get_by_test_id("preview-panel")
    panel.wait_for()
    panel.scroll_into_view_if_needed()
    page.screenshot(path=out / "compose-preview.png")


def shoot_compare_and_export(page: Page, base_url: str, out: Path) -> None:
    """Every run of the runs list's first page, compared by regime; then the PDF."""
    page.goto(f"{base_url}/runs/")
    for box in page.locator("#compare-selected input[type=checkbox][name=run]").all():
        box.check()
    page.get_by_test_id("compare-selected").click()
    page.locator("#compare-panels .main-svg").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    page.screenshot(path=out / "compare.png")
    with page.expect_download(timeout=120_000) as download:
        page.get_by_test_id("export-pdf").click()
    with tempfile.TemporaryDirectory() as scratch:
        pdf = Path(scratch) / "figure.pdf"
        download.value.save_as(pdf)
        subprocess.run(
            [
                "pdftoppm",
                "-png",
                "-r",
                "110",
                "-singlefile",
                "-f",
                "1",
                str(pdf),
                str(out / "export-pdf"),
            ],
            check=True,
        )


GAP_QUERY = (
    "q_tag=demo&group_by=regime&metric=val/reward@1/carry&metric=val/reward@1/no_carry"
    "&metric=val/discrimination/carry&metric=val/reward@1&policy=qwen-nocarry"
)


def shoot_gap(page: Page, base_url: str, out: Path) -> None:
    """The demo's two runs on qwen-nocarry's carry and no-carry slices, its carry
    discrimination and its overall reward (the swing and the net effect), then the
    "gap-significance" preset's view against standalone."""
    page.goto(f"{base_url}/compare/?{GAP_QUERY}")
    panels = page.locator("#compare-panels")
    panels.locator(".main-svg").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    panels.screenshot(path=out / "gap-carry.png")
    page.goto(f"{base_url}/compare/?q_tag=demo&preset=gap-significance")
    card = page.get_by_test_id("sig-card")
    card.locator(".main-svg").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1000)
    box = card.bounding_box()
    assert box is not None  # the card is drawn: its plot just was
    # The sentences, the forest plot and the table's first rows (the whole card of the
    # preset's 17 comparisons is some 4,700 pixels tall).
    clip = {**box, "height": min(box["height"], 1400)}
    page.screenshot(path=out / "significance.png", clip=clip, full_page=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=Path("docs/tour"))
    parser.add_argument("--user", default="demo")
    parser.add_argument("--password", default="demo-password")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    if shutil.which("pdftoppm") is None:
        print("pdftoppm is missing: apt-get install poppler-utils", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    base_url = args.base_url.rstrip("/")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_context(viewport=VIEWPORT, accept_downloads=True).new_page()
        step = "log in"
        try:
            log_in(page, base_url, args.user, args.password)
            step = "run page"
            shoot_run_page(page, base_url, args.out)
            step = "compose preview"
            shoot_compose_preview(page, base_url, args.out)
            step = "compare and export"
            shoot_compare_and_export(page, base_url, args.out)
            step = "the gap pool's carry slice"
            shoot_gap(page, base_url, args.out)
        except (PlaywrightError, subprocess.CalledProcessError) as error:
            print(f"[tour] {step} failed: {error}", file=sys.stderr)
            return 1
        finally:
            browser.close()
    print(f"[tour] screenshots in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())

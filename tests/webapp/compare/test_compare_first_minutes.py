"""What a new user met on the compare page (issue 31): legends that name the grouping key,
a clear message for run ids that do not exist (never a 5xx, never "Loading..." forever),
and a two-column figure whose rows are filled evenly."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from PIL import Image

from tests.webapp.compare.test_compare_export import PDFTOPPM, check_booktabs
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL, TRAIN = "val/reward@1", "train/reward_mean"
KEY = "sgt.lambda_sgt"


def lambda_runs(owner: User) -> list[Run]:
    """SGT at lambda_sgt 0.05 and 0.5, two seeds each; llama, qwen and gpt2 log a rising
    validation and training reward over 20 steps."""
    runs = make_runs(owner, "sgt", sgt={"lambda_sgt": 0.05})
    runs += make_runs(owner, "sgt", sgt={"lambda_sgt": 0.5})
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen", "gpt2"):
            for key in (VAL, TRAIN):
                add_series(run, policy, key, range(20), lambda s, i=i: s / 40 + i / 20)
    return runs


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def query(runs: list[Run], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(str(run.pk) for run in runs),
        "group_by": KEY,
        "metric": [VAL, TRAIN],
        **extra,
    }


# --------------------------------------------------------------------------- 1. legends


def test_groups_by_a_config_key_are_named_with_the_key(logged_in: Client, alice: User) -> None:
    runs = lambda_runs(alice)
    data = logged_in.get(reverse("compare:data"), query(runs)).json()
    assert [(g["label"], g["name"]) for g in data["groups"]] == [
        ("0.05", f"{KEY} = 0.05"),
        ("0.5", f"{KEY} = 0.5"),
    ]
    assert {trace["group"] for trace in data["panels"][0]["traces"]} == {"0.05", "0.5"}  # keys
    summary = logged_in.get(reverse("compare:summary"), query(runs)).json()
    assert summary["group_names"] == {"0.05": f"{KEY} = 0.05", "0.5": f"{KEY} = 0.5"}
    # By regime (or experiment) the label names itself.
    by_regime = logged_in.get(reverse("compare:data"), query(runs, group_by="regime")).json()
    assert [(g["label"], g["name"]) for g in by_regime["groups"]] == [("sgt", "sgt")]


def test_the_figure_legends_name_the_grouping_key(logged_in: Client, alice: User) -> None:
    """What the figure draws (the SVG writes each text as a comment before its glyphs): the
    curves' and the bars' legends, the LaTeX table's group column."""
    runs = lambda_runs(alice)
    svg = logged_in.get(reverse("compare:export", args=["svg"]), query(runs))
    assert svg.status_code == 200
    texts = re.findall(r"<!-- (.*?) -->", svg.content.decode())
    assert f"{KEY} = 0.05" in texts and f"{KEY} = 0.5" in texts, texts
    assert "0.05" not in texts and KEY not in texts  # no bare value, no separate title
    bars = logged_in.get(
        reverse("compare:bars_file", args=["svg"]),
        query(runs, view="relative", metric=VAL, baseline="0.05"),
    )
    assert bars.status_code == 200
    assert f"{KEY} = 0.5" in re.findall(r"<!-- (.*?) -->", bars.content.decode())
    tex = logged_in.get(reverse("compare:table", args=["tex"]), query(runs, table_metric=VAL))
    rows = check_booktabs(tex.content.decode())
    assert rows[0][:2] == ["Policy", r"sgt.lambda\_sgt"]
    assert {row[1] for row in rows[1:]} == {"0.05", "0.5"}


def test_the_log_scale_box_shows_the_links_log_y_and_a_bad_one_says_so(
    logged_in: Client, alice: User
) -> None:
    """A link's ``log_y=0`` (as a saved comparison's query writes it) leaves the box
    unchecked: the page's script draws what the box says, and it had read any value,
    "0" too, as checked."""
    runs = lambda_runs(alice)
    box = re.compile(r'<input type="checkbox" name="log_y"[^>]*>')
    for value, checked in [("0", False), ("false", False), ("", False), ("1", True), ("on", True)]:
        page = logged_in.get(reverse("compare:page"), query(runs, log_y=value))
        assert page.status_code == 200
        assert (" checked" in box.findall(page.content.decode())[0]) is checked, value
    page = logged_in.get(reverse("compare:page"), query(runs, log_y="maybe"))
    assert page.status_code == 400
    assert "log_y: must be 1 or 0, not &#x27;maybe&#x27;" in page.content.decode()


# --------------------------------------------------------------------------- 2. unknown ids


def test_an_unknown_run_id_says_so_instead_of_an_empty_page(logged_in: Client) -> None:
    response = logged_in.get(reverse("compare:page"), {"run": "99999"})
    assert response.status_code == 404
    html = response.content.decode()
    assert "Run 99999 does not exist or is not visible to you." in html
    assert 'data-testid="selection-error"' in html
    assert "Loading" not in html and "compare-page-config" not in html  # no cards to wait on


def test_a_run_of_another_lab_reads_as_unknown(client: Client, alice: User, charlie: User) -> None:
    [run] = make_runs(alice, "sgt", seeds=[0])
    client.force_login(charlie)
    response = client.get(reverse("compare:page"), {"runs": f"{run.pk},99999"})
    assert response.status_code == 404
    assert f"Runs {run.pk}, 99999 do not exist or are not visible to you." in (
        response.content.decode()
    )


def test_known_and_unknown_ids_show_the_known_and_name_the_others(
    logged_in: Client, alice: User
) -> None:
    [run] = make_runs(alice, "sgt", seeds=[0])
    response = logged_in.get(reverse("compare:page"), {"run": [str(run.pk), "99999"]})
    assert response.status_code == 200
    assert [r.pk for r in response.context["selection"].runs] == [run.pk]
    html = response.content.decode()
    assert 'data-testid="selection-missing"' in html
    assert "Run 99999 does not exist or is not visible to you." in html
    # Asked for two, shown one: said once, without "2 selected run(s): 1 run".
    assert "Chosen by id (2 asked for): 1 run." in " ".join(html.split())


def test_an_unknown_sweep_and_an_empty_filter_say_so(logged_in: Client) -> None:
    response = logged_in.get(reverse("compare:page"), {"sweep": "424242"})
    assert response.status_code == 404
    assert "Sweep 424242 does not exist or is not visible to you." in response.content.decode()
    response = logged_in.get(reverse("compare:page"), {"q_regime": "nothing-like-this"})
    assert response.status_code == 200
    assert "No run matches this selection" in response.content.decode()


@pytest.mark.parametrize("bad", ["99999", str(2**31), str(2**63), "9" * 30, "-1", "0", "1e3"])
def test_bad_run_ids_are_4xx_on_every_compare_endpoint(logged_in: Client, bad: str) -> None:
    """Unknown, out of any integer column's range, negative or not a number: 4xx, never 5xx
    (the JSON endpoints answer JSON)."""
    for name, args in (
        ("compare:data", ()),
        ("compare:summary", ()),
        ("compare:bars", ()),
        ("compare:export", ("pdf",)),
        ("compare:table", ("csv",)),
    ):
        response = logged_in.get(reverse(name, args=args), {"runs": bad})
        assert 400 <= response.status_code < 500, (name, bad, response.status_code)
        if name in ("compare:data", "compare:summary", "compare:bars"):
            assert "error" in response.json()
    page = logged_in.get(reverse("compare:page"), {"run": bad})
    assert 400 <= page.status_code < 500, (bad, page.status_code)


# --------------------------------------------------------------------------- 4. layout


def spine_rows(png: Path) -> list[int]:
    """The drawn panels per row of a rendered figure: each panel's x-axis is a long
    horizontal neutral-dark line (the curves are coloured, the grid light grey); lines at
    (nearly) the same height are one row."""
    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    dark = (pixels.max(axis=2) < 110) & (np.ptp(pixels, axis=2) < 25)
    min_length = pixels.shape[1] // 8
    segments: list[tuple[int, int]] = []  # (y, x where the run starts)
    for y, row in enumerate(dark):
        padded = np.concatenate(([0], row.astype(int), [0]))
        edges = np.flatnonzero(np.diff(padded))
        for start, stop in zip(edges[::2], edges[1::2], strict=True):
            if stop - start >= min_length:
                segments.append((y, int(start)))
    rows: list[list[tuple[int, int]]] = []
    for y, x in segments:
        if rows and y - rows[-1][-1][0] <= 3:
            rows[-1].append((y, x))
        else:
            rows.append([(y, x)])
    # A thick line covers a few pixel rows: count the distinct starts of each row.
    counts = []
    for row in rows:
        starts = sorted({x for _y, x in row})
        merged = [s for k, s in enumerate(starts) if k == 0 or s - starts[k - 1] > 5]
        counts.append(len(merged))
    return counts


def test_the_two_column_pdf_fills_its_rows_evenly(
    logged_in: Client, alice: User, tmp_path: Path
) -> None:
    """3 policies x 2 metrics: three rows of two panels (a policy a row), not 4 + 2."""
    runs = lambda_runs(alice)
    for columns, expected in (("2", [2, 2, 2]), ("1", [2, 2, 2])):
        response = logged_in.get(
            reverse("compare:export", args=["pdf"]), query(runs, columns=columns)
        )
        assert response.status_code == 200
        pdf = tmp_path / f"figure-{columns}.pdf"
        pdf.write_bytes(response.content)
        stem = tmp_path / f"page-{columns}"
        subprocess.run([PDFTOPPM, "-png", "-r", "100", str(pdf), str(stem)], check=True)
        [png] = tmp_path.glob(f"page-{columns}*.png")
        assert spine_rows(png) == expected, columns


def test_an_odd_count_leaves_only_the_last_row_short(
    logged_in: Client, alice: User, tmp_path: Path
) -> None:
    """5 policies of one metric in two columns: 3 + 2 (balanced, not 4 + 1)."""
    runs = make_runs(alice, "sgt", seeds=[0], sgt={"lambda_sgt": 0.05})
    runs += make_runs(alice, "sgt", seeds=[0], sgt={"lambda_sgt": 0.5})
    policies = ("llama", "qwen", "gpt2", "_pool", "extra")
    for i, run in enumerate(runs):
        for policy in policies:
            add_series(run, policy, VAL, range(20), lambda s, i=i: s / 40 + i / 20)
    response = logged_in.get(
        reverse("compare:export", args=["pdf"]),
        {**query(runs, columns="2", metric=VAL), "policy": list(policies)},
    )
    assert response.status_code == 200
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(response.content)
    subprocess.run([PDFTOPPM, "-png", "-r", "100", str(pdf), str(tmp_path / "page")], check=True)
    [png] = tmp_path.glob("page*.png")
    assert spine_rows(png) == [3, 2]

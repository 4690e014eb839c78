"""Group labels are text in every export: a label that reads as matplotlib mathtext draws
literally (no 500), a 2,000-character label does not make a giant legend, and a line
break in a label can neither end a LaTeX comment nor split a table row."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from PIL import Image

from tests.conftest import pool_config
from tests.webapp.compare.test_compare_export import check_booktabs
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare import export
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL = "val/reward@1"
ALPHA, BETA = "eval/synthetic/alpha/accuracy", "eval/synthetic/beta/accuracy"
GROUP_BY = "pool.0.chat_template"
MATHTEXT = r"$\undefinedcmd$"
# A label whose second line would be LaTeX code if it started a line of the .tex file,
# and a blank line (a paragraph break, an error inside a tabular).
BROKEN = "first line\n\\input{/etc/passwd}\r\n\nSECOND\u2028third\x0bfourth\x85fifth"
LONG = "{{ bos_token }}" + "x" * 2000
# A legend names the grouping key: "pool.0.chat_template = <label>".
PREFIX = f"{GROUP_BY} = "


def labelled_runs(owner: User, labels: tuple[str, ...]) -> list[Run]:
    """Two seeds per label (the label as the first policy's chat template); llama and
    qwen validated at steps 0..20 and evaluated on synthetic/alpha and beta at steps 0
    (the base model) and 10."""
    runs: list[Run] = []
    for g, label in enumerate(labels):
        pool = pool_config()["pool"]
        pool[0] = {**pool[0], "chat_template": label}
        runs += make_runs(owner, "sgt", pool=pool)
        for i, run in enumerate(runs[-2:]):
            for policy in ("llama", "qwen"):
                add_series(run, policy, VAL, range(0, 21, 5), lambda s, g=g, i=i: s / 40 + g / 5)
                for key, base in ((ALPHA, 0.1), (BETA, 0.3)):
                    add_series(
                        run, policy, key, (0, 10), lambda s, b=base, g=g, i=i: b + s * (g + i) / 50
                    )
    return runs


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def query(runs: list[Run], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(str(run.pk) for run in runs),
        "group_by": GROUP_BY,
        "metric": VAL,
        "policy": ["llama", "qwen"],
        **extra,
    }


def figures(client: Client, runs: list[Run]) -> dict[str, Any]:
    """The curves' and the bars' figure exports, by name (the relative view over the
    group "plain", so that the other group has bars and a legend entry)."""
    found = {}
    for fmt in ("pdf", "svg", "png"):
        found[f"curves.{fmt}"] = client.get(reverse("compare:export", args=[fmt]), query(runs))
        for view in ("tasks", "relative"):
            found[f"{view}.{fmt}"] = client.get(
                reverse("compare:bars_file", args=[fmt]),
                query(runs, view=view, baseline="plain" if view == "relative" else ""),
            )
    return found


def drawn_glyphs(svg: bytes, text: str) -> list[str]:
    """The glyphs an SVG (text as paths) draws for its first text ``text``: matplotlib
    writes the text as a comment, then a glyph per character (a ligature for "fi")."""
    source = svg.decode()
    start = source.index(f"<!-- {text} -->")
    end = source.find("<!--", start + 5)
    return re.findall(r'<use xlink:href="#([^"]+)"', source[start : end if end > 0 else None])


def test_a_mathtext_label_renders_literally_in_every_figure(logged_in: Client, alice: User) -> None:
    runs = labelled_runs(alice, (MATHTEXT, "plain"))
    for name, response in figures(logged_in, runs).items():
        assert response.status_code == 200, (name, response.content[:300])
        if name.endswith(".svg"):
            ET.fromstring(response.content)
            # The label is drawn as it is written, dollar signs included: a glyph for
            # (nearly) every character, the label's first one (a "$") again last.
            glyphs = drawn_glyphs(response.content, PREFIX + MATHTEXT)
            assert len(glyphs) >= len(PREFIX + MATHTEXT) - 2, (name, glyphs)
            assert glyphs[len(PREFIX)] == glyphs[-1], (name, glyphs)
        elif name.endswith(".png"):
            with Image.open(io.BytesIO(response.content)) as image:
                assert image.format == "PNG"
        else:
            assert response.content.startswith(b"%PDF")


def test_a_log_axis_keeps_its_powers_of_ten_as_plain_text(logged_in: Client, alice: User) -> None:
    runs = labelled_runs(alice, (MATHTEXT, "plain"))
    svg = logged_in.get(reverse("compare:export", args=["svg"]), query(runs, log_y="1"))
    assert svg.status_code == 200
    comments = re.findall(r"<!-- (.*?) -->", svg.content.decode())
    assert any(re.fullmatch(r"([2-9]\u00d7)?10\u207b\u00b9", text) for text in comments), comments
    assert PREFIX + MATHTEXT in comments and not any("mathdefault" in text for text in comments)


def test_a_very_long_label_is_ellipsized_in_the_figure_legend_but_whole_in_the_csv(
    logged_in: Client, alice: User
) -> None:
    runs = labelled_runs(alice, (LONG, "plain"))
    svg = logged_in.get(reverse("compare:export", args=["svg"]), query(runs))
    assert svg.status_code == 200
    comments = re.findall(r"<!-- (.*?) -->", svg.content.decode())
    [legend] = [text for text in comments if text.startswith(PREFIX + "{{ bos_token }}")]
    assert legend.endswith("…") and len(legend) <= 60
    png = logged_in.get(reverse("compare:export", args=["png"]), query(runs)).content
    Path("/tmp/export-long-label.png").write_bytes(png)  # to look at
    with Image.open(io.BytesIO(png)) as image:
        assert image.size[1] < 3 * image.size[0]  # not a tower of legend text
    bars_svg = logged_in.get(reverse("compare:bars_file", args=["svg"]), query(runs, view="tasks"))
    comments = re.findall(r"<!-- (.*?) -->", bars_svg.content.decode())
    assert [text for text in comments if text.startswith(PREFIX + "{{ bos_token }}")] == [legend]
    data = logged_in.get(reverse("compare:export", args=["csv"]), query(runs)).content.decode()
    assert {row["group"] for row in csv.DictReader(io.StringIO(data))} == {LONG, "plain"}


# --------------------------------------------------------------------------- LaTeX

TABLE_LINE = re.compile(r"\\(begin|end)\{tabular\}.*|\\(top|mid|bottom)rule|.* \\\\")


def check_lines(tex: str) -> None:
    """Every line of ``tex`` is a whole comment or a whole table line, none starts with
    what came from the label's later lines, and no line is blank but the last."""
    lines = tex.split("\n")
    assert lines[-1] == "" and all(lines[:-1]), lines
    for line in lines[:-1]:
        assert line.startswith("% ") or TABLE_LINE.fullmatch(line), line
        for part in ("SECOND", "third", "fourth", "fifth", r"\input", r"\textbackslash{}input"):
            assert not line.startswith(part), line
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", tex.replace("\n", ""))


def test_a_line_break_in_a_label_stays_inside_the_table_cell(
    logged_in: Client, alice: User
) -> None:
    runs = labelled_runs(alice, (BROKEN, "plain"))
    response = logged_in.get(reverse("compare:table", args=["tex"]), query(runs, table_metric=VAL))
    assert response.status_code == 200
    tex = response.content.decode()
    check_lines(tex)
    rows = check_booktabs(tex)
    groups = {row[1] for row in rows[1:]}
    assert groups == {
        "plain",
        r"first line \textbackslash{}input\{/etc/passwd\}   SECOND third fourth fifth",
    }


@pytest.mark.parametrize("view", ["tasks", "relative"])
def test_a_line_break_in_a_label_cannot_end_a_bars_latex_comment(
    logged_in: Client, alice: User, view: str
) -> None:
    runs = labelled_runs(alice, (BROKEN, "plain"))
    extra = {"baseline": BROKEN} if view == "relative" else {}
    response = logged_in.get(
        reverse("compare:bars_file", args=["tex"]), query(runs, view=view, **extra)
    )
    assert response.status_code == 200, response.content[:300]
    tex = response.content.decode()
    check_lines(tex)
    check_booktabs(tex)
    comments = [line for line in tex.splitlines() if line.startswith("%")]
    assert any("first line" in line and "fifth" in line for line in comments), comments


def test_the_latex_helpers_turn_every_line_break_and_control_into_a_space() -> None:
    breaks = "\n\r\x0b\x0c\x85\u2028\u2029\x00\x1b\x1c\x1d\x1e\x7f\x9f\t"
    assert export.latex_escape(f"a{breaks}b") == "a" + " " * len(breaks) + "b"
    assert export.latex_escape("ok_ünï€") == r"ok\_ünï€"
    comment = export.latex_comment(f"x{breaks}y 50% done")
    assert comment.startswith("% ") and comment.splitlines() == [comment]
    assert export.latex_comment("two\nlines") == "% two lines"


def test_a_long_y_label_is_broken_to_its_panels_height() -> None:
    """The gap-errors preset's labels ran into the panels above and below (seen in its
    PDF): a label longer than the panel is broken at spaces into lines that fit it; a
    short one is left alone."""
    label = "Validation errors · spurious carry · no_carry"
    fitted = export.fit_axis_label(label, length_points=100.0, font_points=8.0)
    lines = fitted.split("\n")
    assert len(lines) > 1 and " ".join(lines) == label
    assert all(len(line) <= export.MIN_LABEL_CHARS for line in lines)
    assert export.fit_axis_label("Validation reward@1", 100.0, 8.0) == "Validation reward@1"

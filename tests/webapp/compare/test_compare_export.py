"""Paper exports: figures that render and parse, CSV equal to the JSON, booktabs LaTeX, the
figure bundle, and byte-identical output for identical input."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from PIL import Image

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.export import CSV_COLUMNS, latex_escape
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL, TRAIN = "val/reward@1", "train/reward_mean"
PDFTOPPM = "/usr/bin/pdftoppm"


@pytest.fixture
def runs(alice: User) -> list[Run]:
    """prp and sgt, two seeds each; llama, qwen and _pool log val and train reward, one
    NaN included; 300 steps (so the grid of 50 buckets averages 6 steps each)."""
    runs = make_runs(alice, "prp") + make_runs(alice, "sgt")
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen", "_pool"):
            add_series(run, policy, TRAIN, range(300), lambda s, i=i: math.sin(s / 30) + i / 7)
            add_series(
                run,
                policy,
                VAL,
                range(0, 300, 10),
                lambda s, i=i: math.nan if (i, s) == (1, 100) else 0.3 + s / 1000 + i / 50,
            )
    return runs


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def params(runs: list[Run], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(str(run.pk) for run in runs),
        "metric": [VAL, TRAIN],
        "policy": ["llama", "qwen", "_pool"],
        "smooth": "0.5",
        "buckets": "50",
        "band": "ci95",
        **extra,
    }


def export(client: Client, fmt: str, runs: list[Run], **extra: Any) -> Any:
    response = client.get(reverse("compare:export", args=[fmt]), params(runs, **extra))
    assert response.status_code == 200, response.content[:300]
    return response


# --------------------------------------------------------------------------- figures


def test_pdf_renders_with_pdftoppm_and_embeds_its_fonts(
    logged_in: Client, runs: list[Run], tmp_path: Path
) -> None:
    response = export(logged_in, "pdf", runs)
    assert response["Content-Type"] == "application/pdf"
    assert re.fullmatch(
        r'attachment; filename="comparison-regime-4runs-[0-9a-f]{8}\.pdf"',
        response["Content-Disposition"],
    )
    pdf = tmp_path / "figure.pdf"
    pdf.write_bytes(response.content)
    subprocess.run([PDFTOPPM, "-png", "-r", "50", str(pdf), str(tmp_path / "page")], check=True)
    [page] = tmp_path.glob("page*.png")
    with Image.open(page) as image:
        assert image.size[0] == 175  # 3.5 in at 50 dpi
        assert len(image.convert("L").getcolors(maxcolors=256 * 256)) > 10  # something was drawn
    assert b"/FontFile2" in response.content  # TrueType (fonttype 42), embedded
    assert b"CreationDate" not in response.content


def test_svg_parses_and_draws_text_as_paths(logged_in: Client, runs: list[Run]) -> None:
    response = export(logged_in, "svg", runs, columns="2")
    assert response["Content-Type"] == "image/svg+xml"
    root = ET.fromstring(response.content)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.attrib["width"] == "504pt"  # 7.0 in, two columns
    assert not root.findall(".//{http://www.w3.org/2000/svg}text")
    assert root.findall(".//{http://www.w3.org/2000/svg}path")


def test_png_is_300_dpi_at_the_column_width(logged_in: Client, runs: list[Run]) -> None:
    response = export(logged_in, "png", runs)
    with Image.open(io.BytesIO(response.content)) as image:
        assert image.format == "PNG"
        assert image.info["dpi"] == pytest.approx((300, 300), abs=0.01)
        assert image.size[0] == 1050  # 3.5 in x 300 dpi


def test_identical_comparisons_give_identical_bytes(logged_in: Client, runs: list[Run]) -> None:
    for fmt in ("pdf", "svg", "png"):
        assert export(logged_in, fmt, runs).content == export(logged_in, fmt, runs).content


# --------------------------------------------------------------------------- data CSV


def test_csv_holds_exactly_the_json_values(logged_in: Client, runs: list[Run]) -> None:
    reply = logged_in.get(reverse("compare:data"), params(runs)).json()
    rows = list(csv.DictReader(io.StringIO(export(logged_in, "csv", runs).content.decode())))
    expected = []
    for panel in reply["panels"]:
        for trace in panel["traces"]:
            for k in range(len(trace["x"])):
                expected.append(
                    {
                        "group": trace["group"],
                        "policy": panel["policy"],
                        "metric": panel["metric"],
                        **{
                            name: trace[name][k]
                            for name in ("x", "mean", "lower", "upper", "n", "raw_mean")
                        },
                    }
                )
    assert len(rows) == len(expected) > 0
    for row, want in zip(rows, expected, strict=True):
        assert tuple(row) == CSV_COLUMNS
        for name, value in want.items():
            if isinstance(value, float):
                assert float(row[name]) == value, (name, row)
            else:
                assert row[name] == str(value), (name, row)
    smoothed = [r for r in rows if r["mean"] != r["raw_mean"]]
    assert smoothed  # both the smoothed and the raw mean are there
    assert any(r["mean"] == "NaN" or r["n"] == "1" for r in rows)  # the NaN of run 1


# --------------------------------------------------------------------------- tables


def check_booktabs(tex: str) -> list[list[str]]:
    """Structural check of booktabs tabulars; returns the cells of every data row."""
    lines = [line.strip() for line in tex.splitlines()]
    lines = [line for line in lines if line and not line.startswith("%")]
    begins = [i for i, line in enumerate(lines) if line.startswith(r"\begin{tabular}")]
    ends = [i for i, line in enumerate(lines) if line == r"\end{tabular}"]
    assert begins and len(begins) == len(ends)
    rows = []
    for begin, end in zip(begins, ends, strict=True):
        assert begin < end
        spec = re.fullmatch(r"\\begin\{tabular\}\{([lcr]+)\}", lines[begin])
        assert spec, lines[begin]
        n_columns = len(spec.group(1))
        body = lines[begin + 1 : end]
        assert body[0] == r"\toprule" and body[-1] == r"\bottomrule"
        midrules = [i for i, line in enumerate(body) if line == r"\midrule"]
        assert midrules and midrules[0] > 0 and midrules[-1] < len(body) - 1
        assert body.count(r"\toprule") == body.count(r"\bottomrule") == 1
        for line in body:
            if line in (r"\toprule", r"\midrule", r"\bottomrule"):
                continue
            assert line.endswith(r"\\"), line
            cells = re.split(r"(?<!\\)&", line[:-2])
            assert len(cells) == n_columns, line
            assert line.count("{") - line.count(r"\{") == line.count("}") - line.count(r"\}")
            assert (line.count("$") - line.count(r"\$")) % 2 == 0  # math mode closed
            rows.append([cell.strip() for cell in cells])
    return rows


def test_latex_table_is_booktabs_with_the_best_in_bold(logged_in: Client, runs: list[Run]) -> None:
    response = logged_in.get(reverse("compare:table", args=["tex"]), params(runs, table_metric=VAL))
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="table-val-reward-1')
    rows = check_booktabs(response.content.decode())
    assert rows[0] == ["Policy", "Group", "Final", "Best", "Mean", "$n$"]
    assert [row[:2] for row in rows[1:]] == [
        ["llama", "prp"],
        ["", "sgt"],
        ["qwen", "prp"],
        ["", "sgt"],
        ["pool mean", "prp"],
        ["", "sgt"],
    ]
    # sgt runs (i = 2, 3) are better everywhere; final = 0.59 + i / 50
    assert rows[2][2] == r"\textbf{0.640 $\pm$ 0.014}" and rows[2][5] == "2"
    assert rows[1][2] == r"0.600 $\pm$ 0.014"


def test_latex_specials_are_escaped() -> None:
    assert latex_escape(r"a_b%c&d#e$f{g}~h^i\j") == (
        r"a\_b\%c\&d\#e\$f\{g\}\textasciitilde{}h\textasciicircum{}i\textbackslash{}j"
    )


def test_table_csv_matches_the_summary_json(logged_in: Client, runs: list[Run]) -> None:
    query = params(runs, table_metric=TRAIN)
    summary = logged_in.get(reverse("compare:summary"), query).json()
    response = logged_in.get(reverse("compare:table", args=["csv"]), query)
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 3 * 2 * 3  # policies x groups x statistics
    for row in rows:
        assert row["metric"] == TRAIN
        [cells] = [r["cells"] for r in summary["rows"] if r["policy"] == row["policy"]]
        [cell] = [c for c in cells if c["group"] == row["group"]]
        stat = cell[row["statistic"]]
        assert float(row["mean"]) == stat["mean"] and float(row["std"]) == stat["std"]
        assert int(row["n"]) == stat["n"] == 2
        assert row["best"] == str(
            int(summary["best"][row["statistic"]][row["policy"]] == row["group"])
        )


# --------------------------------------------------------------------------- bundle


def test_the_bundle_holds_everything_and_every_runs_config(
    logged_in: Client, runs: list[Run]
) -> None:
    response = export(logged_in, "zip", runs, columns="2")
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"].endswith('-bundle.zip"')
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None
    names = set(archive.namelist())
    configs = {f"configs/run-{run.pk}.json" for run in runs}
    fixed = {"figure.pdf", "figure.svg", "figure.png", "data.csv", "table.csv", "table.tex"}
    assert names == fixed | configs | {"spec.txt", "README.txt"}
    for run in runs:
        assert json.loads(archive.read(f"configs/run-{run.pk}.json")) == run.config
    data = logged_in.get(reverse("compare:data"), params(runs)).json()
    assert archive.read("spec.txt").decode() == data["spec"] + "\n"
    assert archive.read("data.csv") == export(logged_in, "csv", runs).content
    assert archive.read("figure.pdf") == export(logged_in, "pdf", runs, columns="2").content
    assert archive.read("figure.pdf").startswith(b"%PDF")
    ET.fromstring(archive.read("figure.svg"))
    tex = archive.read("table.tex").decode()
    tables = check_booktabs(tex)
    assert "$-$" in tex and " -0" not in tex  # train reward goes negative: minus signs
    assert len(tables) == 2 * (1 + 3 * 2)  # a table per metric: header + 6 rows
    metrics = {
        row["metric"] for row in csv.DictReader(io.StringIO(archive.read("table.csv").decode()))
    }
    assert metrics == {VAL, TRAIN}
    assert response.content == export(logged_in, "zip", runs, columns="2").content

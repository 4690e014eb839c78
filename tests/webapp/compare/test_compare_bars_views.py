"""The bar views against PostgreSQL: final values in SQL, the JSON endpoint, the exports,
parameter errors, permissions, and the compare page's view choice and Figure 11 preset."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from PIL import Image

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare import selectors
from webapp.compare.bars import NO_EVALUATIONS
from webapp.compare.bars_export import BAR_CSV_COLUMNS
from webapp.compare.models import SavedComparison
from webapp.compare.stats import t_975
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL = "val/reward@1"
ALPHA, BETA = "eval/synthetic/alpha/accuracy", "eval/synthetic/beta/accuracy"


@pytest.fixture
def runs(alice: User) -> list[Run]:
    """standalone (i = 0, 1) and sgt (i = 2, 3). llama and qwen are evaluated on
    synthetic/alpha and beta at step 0 (base: 0.1 and 0.3) and step 10 (alpha 0.2 + i/10,
    beta 0.5 + i/10). val/reward@1 at steps 0..20 (every 5): llama's final 0.4 + i/10
    (run 3 then logs a NaN at step 25), qwen's final 0 for standalone, 0.3 for sgt."""
    runs = make_runs(alice, "standalone") + make_runs(alice, "sgt")
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen"):
            add_series(run, policy, ALPHA, (0, 10), lambda s, i=i: 0.1 if s == 0 else 0.2 + i / 10)
            add_series(run, policy, BETA, (0, 10), lambda s, i=i: 0.3 if s == 0 else 0.5 + i / 10)
            add_series(run, policy, f"{ALPHA[:-8]}n", (0, 10), lambda s: 50.0)
        steps = [*range(0, 21, 5), *([25] if i == 3 else [])]
        add_series(
            run, "llama", VAL, steps, lambda s, i=i: math.nan if s == 25 else s / 50 + i / 10
        )
        qwen_final = 0.0 if i < 2 else 0.3
        add_series(run, "qwen", VAL, range(0, 21, 5), lambda s, q=qwen_final: q * s / 20)
    return runs


def ids(runs: list[Run]) -> str:
    return ",".join(str(run.pk) for run in runs)


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def bars(client: Client, runs: list[Run], **params: Any) -> Any:
    return client.get(reverse("compare:bars"), {"runs": ids(runs), **params})


def bars_file(client: Client, runs: list[Run], fmt: str, **params: Any) -> Any:
    return client.get(reverse("compare:bars_file", args=[fmt]), {"runs": ids(runs), **params})


# --------------------------------------------------------------------------- selectors


def test_final_values_in_one_statement_match_the_portable_reference(runs: list[Run]) -> None:
    run_ids = [run.pk for run in runs]
    keys = [ALPHA, BETA, VAL]
    with CaptureQueriesContext(connection) as queries:
        found = selectors.final_values(run_ids, ["llama", "qwen"], keys)
    assert len(queries) == 1
    assert found == selectors.final_values_portable(run_ids, ["llama", "qwen"], keys)
    assert len(found) == 4 * 2 * 3
    alpha = found[(runs[3].pk, "llama", ALPHA)]
    assert (alpha.final, alpha.step, alpha.base) == (pytest.approx(0.5), 10, pytest.approx(0.1))
    val = found[(runs[3].pk, "llama", VAL)]  # the NaN at step 25 is not its final value
    assert (val.final, val.step) == (pytest.approx(0.7), 20) and val.base == pytest.approx(0.3)
    assert selectors.eval_keys(run_ids) == sorted([ALPHA, BETA, "eval/synthetic/alpha/n"])


# --------------------------------------------------------------------------- JSON


def test_the_per_task_view(logged_in: Client, runs: list[Run]) -> None:
    response = bars(logged_in, runs, view="tasks", policy="llama")
    assert response.status_code == 200, response.content
    reply = response.json()
    assert reply["view"] == "tasks" and reply["title"].startswith("Per-task evaluation")
    assert reply["suites"] == {"synthetic": ["alpha", "beta"]} and reply["suite"] == "synthetic"
    assert reply["spec"].startswith(f"runs={ids(runs)}&group_by=regime")
    assert reply["spec"].endswith("&view=tasks")
    assert reply["empty"] is None and reply["zero_line"] is False
    [panel] = reply["panels"]
    assert panel["policy"] == "llama" and panel["categories"] == ["alpha", "beta"]
    assert panel["y_label"] == "accuracy" and panel["base"] == pytest.approx([0.1, 0.3])
    standalone, sgt = panel["traces"]
    assert standalone["group"] == "standalone" and sgt["group"] == "sgt"
    assert standalone["mean"] == pytest.approx([0.25, 0.55])
    assert sgt["mean"] == pytest.approx([0.45, 0.75])
    # sample std of (0.2, 0.3) = 0.1 / sqrt(2)
    assert standalone["upper"] == pytest.approx([0.25 + 0.1 / math.sqrt(2), 0.55 + 0.1 / 2**0.5])
    assert standalone["n"] == [2, 2]
    assert set(sgt) == {"group", "colour", "dash", "mean", "lower", "upper", "n", "std"}


def test_the_relative_view(logged_in: Client, runs: list[Run]) -> None:
    reply = bars(logged_in, runs, view="relative").json()
    assert reply["baseline"] == "standalone" and reply["metrics"] == [VAL]
    assert reply["zero_line"] is True
    llama, qwen, gpt2 = reply["panels"]
    assert llama["y_label"] == "relative improvement over standalone (%)"
    assert llama["category_labels"] == ["Validation reward@1"]
    [sgt] = llama["traces"]
    # standalone finals 0.4, 0.5 (b = 0.45); sgt 0.6, 0.7: 33.3 % and 55.6 %
    assert sgt["mean"] == pytest.approx([(0.15 / 0.45 + 0.25 / 0.45) / 2 * 100])
    assert sgt["n"] == [2] and llama["base"] == pytest.approx([0.45])
    # Seeds 0 and 1 in both groups: the paired delta method. d = (0.2, 0.2), r = 0.2 /
    # 0.45; e = d - r b = +-0.2 / 9, se = sd(e) / sqrt(2) / 0.45 * 100, t on 1 df.
    se = float(np.std([0.2 / 9, -0.2 / 9], ddof=1)) / math.sqrt(2) / 0.45 * 100
    assert sgt["lower"] == pytest.approx([sgt["mean"][0] - t_975(1) * se])
    assert sgt["upper"] == pytest.approx([sgt["mean"][0] + t_975(1) * se])
    assert reply["interval_note"] == (
        "Error bars: 95% interval, paired delta method, 2 seeds (the baseline's variance included)."
    )
    assert qwen["traces"] == [] and gpt2["traces"] == []
    assert qwen["message"] == "the standalone mean is 0: no relative improvement"
    assert gpt2["message"] == "no standalone value" and llama["message"] == ""
    assert any("qwen · Validation reward@1: the standalone mean is 0" in n for n in reply["notes"])
    named = bars(logged_in, runs, view="relative", baseline="sgt", policy="llama").json()
    assert named["baseline"] == "sgt" and named["spec"].endswith("view=relative&baseline=sgt")
    [standalone] = named["panels"][0]["traces"]
    assert standalone["mean"] == pytest.approx([(0.45 - 0.65) / 0.65 * 100])


def test_runs_without_evaluations_say_so(logged_in: Client, alice: User) -> None:
    [run] = make_runs(alice, "sgt", seeds=[0])
    add_series(run, "llama", VAL, range(3), float)
    reply = bars(logged_in, [run], view="tasks").json()
    assert reply["panels"] == [] and reply["suites"] == {}
    assert reply["empty"] == NO_EVALUATIONS
    assert NO_EVALUATIONS in reply["notes"]
    assert "evaluate a run from its page" in NO_EVALUATIONS
    # The exports still render (a figure saying so, an empty table).
    assert bars_file(logged_in, [run], "pdf", view="tasks").content.startswith(b"%PDF")
    assert bars_file(logged_in, [run], "csv").content.decode().splitlines() == [
        ",".join(BAR_CSV_COLUMNS)
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"view": "pie"}, "view: the bar views are"),
        ({"view": "curves"}, "view: "),
        ({"suite": "nosuch"}, "suite: these runs have no accuracy results of suite 'nosuch'"),
        ({"suite": "a b"}, "suite: "),
        ({"score": "f1"}, "score: must be one of"),
        ({"view": "relative", "baseline": "xgrpo"}, "baseline: no group 'xgrpo'"),
        ({"x": "epochs"}, "x: must be one of"),
        ({"metric": "no spaces", "view": "relative"}, "metric: "),
    ],
)
def test_bad_parameters_are_a_json_400(
    logged_in: Client, runs: list[Run], params: dict[str, str], message: str
) -> None:
    for response in (bars(logged_in, runs, **params), bars_file(logged_in, runs, "csv", **params)):
        assert response.status_code == 400
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"].startswith(message)


def test_files_check_columns_and_format(logged_in: Client, runs: list[Run]) -> None:
    response = bars_file(logged_in, runs, "pdf", columns="3")
    assert response.status_code == 400 and response.json()["error"].startswith("columns: ")
    assert bars_file(logged_in, runs, "zip").status_code == 404


def test_who_may_see_the_bars(
    client: Client, alice: User, bob: User, charlie: User, runs: list[Run]
) -> None:
    response = bars(client, runs)
    assert response.status_code == 401 and response.json() == {"error": "log in first"}
    anonymous_file = bars_file(client, runs, "csv")
    assert anonymous_file.status_code == 302
    assert anonymous_file["Location"].startswith(reverse("login"))
    client.force_login(bob)
    assert bars(client, runs).status_code == 200
    client.force_login(charlie)
    assert bars(client, runs).status_code == 404
    assert bars_file(client, runs, "csv").status_code == 404
    [foreign] = make_runs(charlie, "sgt", seeds=[0])
    client.force_login(alice)
    for extra in (foreign.pk, 999_999):
        response = client.get(reverse("compare:bars"), {"runs": f"{ids(runs)},{extra}"})
        assert response.status_code == 404 and response.json() == {"error": "no such run"}


# --------------------------------------------------------------------------- exports


@pytest.mark.parametrize("view", ["tasks", "relative"])
def test_figures_render_and_are_deterministic(
    logged_in: Client, runs: list[Run], view: str
) -> None:
    pdf = bars_file(logged_in, runs, "pdf", view=view)
    assert pdf.status_code == 200 and pdf["Content-Type"] == "application/pdf"
    assert pdf.content.startswith(b"%PDF")
    assert f'filename="bars-{view}-regime-4runs-' in pdf["Content-Disposition"]
    assert bars_file(logged_in, runs, "pdf", view=view).content == pdf.content
    svg = bars_file(logged_in, runs, "svg", view=view)
    assert ET.fromstring(svg.content).tag.endswith("svg")
    assert bars_file(logged_in, runs, "svg", view=view).content == svg.content
    png = bars_file(logged_in, runs, "png", view=view, columns=2)
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(png.content)) as image:
        assert image.size[0] == 7 * 300  # two columns at 300 dpi
    assert bars_file(logged_in, runs, "png", view=view, columns=2).content == png.content
    assert bars_file(logged_in, runs, "svg", view=view, columns=2).content != svg.content


def test_the_csv_has_one_row_per_bar(logged_in: Client, runs: list[Run]) -> None:
    response = bars_file(logged_in, runs, "csv", view="tasks", policy=["llama", "qwen"])
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert tuple(rows[0]) == BAR_CSV_COLUMNS
    assert len(rows) == 2 * 2 * 2  # policies x tasks x groups
    row = next(r for r in rows if (r["policy"], r["x"], r["group"]) == ("qwen", "beta", "sgt"))
    assert row["view"] == "tasks" and float(row["mean"]) == pytest.approx(0.75)
    assert row["n"] == "2" and float(row["base"]) == pytest.approx(0.3)
    assert float(row["lower"]) == pytest.approx(0.75 - 0.1 / math.sqrt(2))
    relative = bars_file(logged_in, runs, "csv", view="relative").content.decode().splitlines()
    assert len(relative) == 2  # the header and llama's sgt bar; qwen's baseline is 0
    assert relative[1].startswith(f"relative,llama,{VAL},sgt,")
    assert relative[1].endswith(',2,0.45,"95% interval, paired delta method, 2 seeds"')
    [row] = list(csv.DictReader(io.StringIO("\n".join(relative))))
    assert float(row["lower"]) < float(row["mean"]) < float(row["upper"])
    assert float(row["upper"]) - float(row["mean"]) == pytest.approx(62.75, abs=0.01)
    tasks_band = {r["error_bar"] for r in rows}
    assert tasks_band == {"std"}


def test_the_latex_table_has_the_numbers_and_bolds_the_best(
    logged_in: Client, runs: list[Run]
) -> None:
    tex = bars_file(logged_in, runs, "tex", view="tasks", policy="llama").content.decode()
    assert r"\begin{tabular}{llrrr}" in tex and r"\toprule" in tex
    assert r"Policy & Task & standalone & sgt & Base \\" in tex
    # alpha: standalone 0.250 +- 0.0707, sgt 0.450 +- 0.0707 (bold), base 0.1
    assert r"llama & alpha & 0.250 $\pm$ 0.071 & \textbf{0.450 $\pm$ 0.071} & 0.100 \\" in tex
    assert r" & beta & 0.550 $\pm$ 0.071 & \textbf{0.750 $\pm$ 0.071} & 0.300 \\" in tex
    assert "suite synthetic" in tex and "standalone 2, sgt 2" in tex
    assert bars_file(logged_in, runs, "tex", view="tasks", policy="llama").content.decode() == tex
    relative = bars_file(logged_in, runs, "tex", view="relative").content.decode()
    assert r"Policy & Metric & sgt & standalone mean \\" in relative
    # 44.4 % [-18.3, 107.2]: the paired delta method's interval, not the old "± std".
    assert r"llama & Validation reward@1 & 44.4 [$-$18.3, 107.2] & 0.450 \\" in relative
    assert "95\\% interval, paired delta method, 2 seeds" in relative
    assert r"qwen & Validation reward@1 & -- & 0.000 \\" in relative


# --------------------------------------------------------------------------- the page


def test_the_figure_11_preset_sets_the_relative_view(logged_in: Client, runs: list[Run]) -> None:
    page = logged_in.get(reverse("compare:page"), {"runs": ids(runs), "preset": "fig11"})
    assert page.status_code == 200
    params = page.context["params"]
    assert params["view"] == "relative" and params["baseline"] == "standalone"
    assert params.getlist("metric") == [VAL] and params["group_by"] == "regime"
    html = page.content.decode()
    assert 'data-testid="preset-fig11"' in html and 'data-testid="preset-fig12"' in html
    assert '<option value="relative" selected>' in html
    assert page.context["suites"] == ["synthetic"]
    assert page.context["page_config"]["urls"]["bars"] == reverse("compare:bars")


def test_a_saved_comparison_keeps_the_view_suite_and_baseline(
    logged_in: Client, runs: list[Run]
) -> None:
    query = f"runs={ids(runs)}&view=tasks&suite=synthetic&baseline=sgt"
    response = logged_in.post(reverse("compare:comparison_save"), {"name": "fig", "query": query})
    assert response.status_code == 302
    saved = SavedComparison.objects.get(name="fig")
    assert saved.query == query
    page = logged_in.get(saved.get_absolute_url())
    html = page.content.decode()
    assert '<option value="tasks" selected>' in html
    assert '<option value="synthetic" selected>' in html
    assert 'name="baseline" list="baseline-options" value="sgt"' in html


def test_a_tie_is_bolded_nowhere_in_the_latex_table(alice: User, client: Client) -> None:
    """Every group at 0.000 on a task: no group is the best there, so none is bold."""
    runs = make_runs(alice, "standalone") + make_runs(alice, "sgt")
    for i, run in enumerate(runs):
        add_series(run, "llama", ALPHA, (0, 10), lambda s: 0.0)
        add_series(run, "llama", BETA, (0, 10), lambda s, i=i: 0.0 if s == 0 else i / 10)
    client.force_login(alice)

    tex = bars_file(client, runs, "tex", view="tasks", policy="llama").content.decode()

    assert r"llama & alpha & 0.000 $\pm$ 0.000 & 0.000 $\pm$ 0.000 & 0.000 \\" in tex
    assert r"& beta & 0.050 $\pm$ 0.071 & \textbf{0.250 $\pm$ 0.071} & 0.000 \\" in tex

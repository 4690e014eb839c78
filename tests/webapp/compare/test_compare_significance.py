"""The compare page's significance view against hand-computed intervals: paired t by seed,
Welch for unpaired runs, Holm over the comparisons shown; at the final step and at a
chosen one; its CSV, LaTeX and figure exports; bad parameters answered 400.

Student t with an even number of degrees of freedom has a closed-form tail: with
tan(theta) = t / sqrt(df), P(|T| > t) = 1 - sin(theta) * sum_{k < df/2} c_k cos(theta)^(2k),
c = 1, 1/2, 3/8, 5/16, ... (c_k = c_{k-1} (2k - 1) / (2k)); the p-values below use it.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.significance_export import SIG_CSV_COLUMNS
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL = "val/reward@1"
STANDALONE = (0.3, 0.4, 0.5, 0.4, 0.4)  # seeds 0..4: mean 0.4, variance 0.02 / 4 = 0.005
DIFFERENCES = (0.1, 0.2, 0.3, 0.2, 0.2)  # sgt - standalone, seed by seed
XGRPO = (0.5, 0.6, 0.7, 0.6, 0.6)  # seeds 10..14 (no seed shared): mean 0.6, variance 0.005


def p_two_sided(t: float, df: int) -> float:
    """P(|T_df| > |t|) for an even ``df`` (see the module docstring)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    total, c = 0.0, 1.0
    for k in range(df // 2):
        if k:
            c *= (2 * k - 1) / (2 * k)
        total += c * math.cos(theta) ** (2 * k)
    return 1.0 - math.sin(theta) * total


# Paired t, sgt vs standalone: d = [0.1, 0.2, 0.3, 0.2, 0.2], mean 0.2, sum of squares
# 0.02, sd = sqrt(0.005) = 0.0707107, se = sd / sqrt(5) = 0.0316228, t_{0.975, 4} =
# 2.776445: half-width 0.0877989, [0.112201, 0.287799]; t = 6.324555 on 4 df.
PAIRED_SE = math.sqrt(0.005) / math.sqrt(5)
PAIRED_LOW, PAIRED_HIGH = 0.2 - 2.776445 * PAIRED_SE, 0.2 + 2.776445 * PAIRED_SE
PAIRED_P = p_two_sided(0.2 / PAIRED_SE, 4)  # 1 - sqrt(10/11) * 23/22 = 0.0031982
# Welch, xgrpo vs standalone: 0.6 - 0.4 = 0.2; va/na = vb/nb = 0.005 / 5 = 0.001, se^2 =
# 0.002, se = 0.0447214; df = 0.002^2 / (0.001^2 / 4 + 0.001^2 / 4) = 8, t_{0.975, 8} =
# 2.306004: half-width 0.103127, [0.096873, 0.303127]; t = 0.2 / 0.0447214 = sqrt(20).
WELCH_SE = math.sqrt(0.002)
WELCH_LOW, WELCH_HIGH = 0.2 - 2.306004 * WELCH_SE, 0.2 + 2.306004 * WELCH_SE
WELCH_P = p_two_sided(math.sqrt(20), 8)  # 0.0020773
# Holm over the two: sorted p 0.0020773 (x 2 = 0.0041546), 0.0031982 (x 1, raised to the
# running maximum 0.0041546): both adjusted to 0.0041546.
HOLM = 2 * WELCH_P


def test_the_hand_numbers() -> None:
    assert abs(PAIRED_LOW - 0.112201) < 1e-6
    assert math.isclose(PAIRED_P, 1 - math.sqrt(10 / 11) * 23 / 22)
    assert abs(PAIRED_P - 0.0031982) < 1e-7
    assert abs(WELCH_LOW - 0.096873) < 1e-6
    assert abs(WELCH_P - 0.0020773) < 1e-7
    assert HOLM > PAIRED_P  # so Holm raises sgt's p to xgrpo's adjusted one


@pytest.fixture
def runs(alice: User) -> list[Run]:
    """standalone seeds 0..4, sgt seeds 0..4 (standalone + DIFFERENCES), xgrpo seeds
    10..14; llama's val/reward@1 at steps 0, 10, 20 is final * step / 20."""
    standalone = make_runs(alice, "standalone", seeds=range(5))
    sgt = make_runs(alice, "sgt", seeds=range(5))
    xgrpo = make_runs(alice, "xgrpo", seeds=range(10, 15))
    finals = {run.pk: STANDALONE[run.seed] for run in standalone}
    finals |= {run.pk: STANDALONE[run.seed] + DIFFERENCES[run.seed] for run in sgt}
    finals |= {run.pk: XGRPO[run.seed - 10] for run in xgrpo}
    for run in standalone + sgt + xgrpo:
        add_series(run, "llama", VAL, (0, 10, 20), lambda s, f=finals[run.pk]: f * s / 20)
    return standalone + sgt + xgrpo


def ids(runs: list[Run]) -> str:
    return ",".join(str(run.pk) for run in runs)


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def significance(client: Client, runs: list[Run], **params: Any) -> Any:
    query = {"runs": ids(runs), "view": "significance", "policy": "llama", **params}
    return client.get(reverse("compare:bars"), query)


def sig_file(client: Client, runs: list[Run], fmt: str, **params: Any) -> Any:
    query = {"runs": ids(runs), "view": "significance", "policy": "llama", **params}
    return client.get(reverse("compare:bars_file", args=[fmt]), query)


def row_of(reply: dict[str, Any], group: str) -> dict[str, Any]:
    return next(row for row in reply["rows"] if row["group"] == group)


# --------------------------------------------------------------------------- JSON


def test_paired_by_seed_welch_when_unpaired_and_holm_over_both(
    logged_in: Client, runs: list[Run]
) -> None:
    response = significance(logged_in, runs)
    assert response.status_code == 200, response.content
    reply = response.json()
    assert reply["view"] == "significance"
    assert reply["title"] == "Significance (paired t and Welch, Holm)"  # the tests used
    assert reply["baseline"] == "standalone" and reply["metrics"] == [VAL]
    assert reply["step"] is None and reply["where"] == "the final step"
    assert reply["correction"] == "Holm-Bonferroni over the 2 comparisons shown"
    assert reply["spec"].endswith("&view=significance") and reply["empty"] is None
    assert [row["group"] for row in reply["rows"]] == ["xgrpo", "sgt"]  # the regimes' order

    sgt = row_of(reply, "sgt")
    paired = sgt["interval"]
    assert paired["method"] == "paired t" and paired["n"] == 5 and paired["df"] == 4
    assert paired["estimate"] == pytest.approx(0.2)
    assert paired["low"] == pytest.approx(PAIRED_LOW) and paired["high"] == pytest.approx(
        PAIRED_HIGH
    )
    assert paired["p"] == pytest.approx(PAIRED_P, rel=1e-6)
    assert paired["p_adjusted"] == pytest.approx(HOLM, rel=1e-6)
    assert sgt["seeds"] == [0, 1, 2, 3, 4] and sgt["unpaired"] == [] and sgt["note"] == ""
    assert sgt["baseline_mean"] == pytest.approx(0.4) and sgt["group_mean"] == pytest.approx(0.6)
    assert sgt["steps"] == [20]
    assert sgt["sentence"] == (
        "sgt raises llama's validation reward@1 by 0.20 [0.11, 0.29] over standalone, "
        "5 seeds (paired t, Holm p = 0.004)."
    )

    xgrpo = row_of(reply, "xgrpo")
    unpaired = xgrpo["interval"]
    assert unpaired["method"] == "Welch" and (unpaired["n"], unpaired["n_other"]) == (5, 5)
    assert unpaired["df"] == pytest.approx(8.0)
    assert unpaired["estimate"] == pytest.approx(0.2)
    assert unpaired["low"] == pytest.approx(WELCH_LOW) and unpaired["high"] == pytest.approx(
        WELCH_HIGH
    )
    assert unpaired["p"] == pytest.approx(WELCH_P, rel=1e-6)
    assert unpaired["p_adjusted"] == pytest.approx(HOLM, rel=1e-6)
    assert xgrpo["note"] == "unpaired: no seed is in both groups, so Welch's interval over all runs"
    assert xgrpo["sentence"] == (
        "xgrpo raises llama's validation reward@1 by 0.20 [0.10, 0.30] over standalone, "
        "5 vs 5 runs (Welch, Holm p = 0.004); unpaired: no seed is in both groups, so "
        "Welch's interval over all runs."
    )


def test_one_comparison_is_not_corrected(logged_in: Client, runs: list[Run]) -> None:
    pair = [run for run in runs if run.regime in ("standalone", "sgt")]
    reply = significance(logged_in, pair).json()
    [row] = reply["rows"]
    assert reply["correction"] == "" and row["interval"]["p_adjusted"] is None
    assert row["sentence"].endswith("5 seeds (paired t, p = 0.003).")


def test_at_a_chosen_step(logged_in: Client, runs: list[Run]) -> None:
    # At step 10 every value is half its final one: the differences, the estimate and
    # the interval halve, t and p stay.
    reply = significance(logged_in, runs, sig_step="10").json()
    assert reply["step"] == 10 and reply["where"] == "step 10"
    assert reply["spec"].endswith("&view=significance&sig_step=10")
    paired = row_of(reply, "sgt")["interval"]
    assert paired["estimate"] == pytest.approx(0.1)
    assert paired["low"] == pytest.approx(PAIRED_LOW / 2) and paired["high"] == pytest.approx(
        PAIRED_HIGH / 2
    )
    assert paired["p"] == pytest.approx(PAIRED_P, rel=1e-6)
    # Step 15 has no point: the last value before it (step 10) is used, and said so.
    between = significance(logged_in, runs, sig_step="15").json()
    assert row_of(between, "sgt")["interval"]["estimate"] == pytest.approx(0.1)
    assert any(
        "the last values at or before step 15 are at step(s) 10" in n for n in between["notes"]
    )


def test_partly_paired_seeds_name_the_runs_left_out(logged_in: Client, alice: User) -> None:
    # standalone seeds 0, 1, 2; sgt seeds 0, 1, 2, 3: three pairs, sgt's seed 3 unpaired.
    standalone = make_runs(alice, "standalone", seeds=range(3))
    sgt = make_runs(alice, "sgt", seeds=range(4))
    for run in standalone:
        add_series(run, "llama", VAL, (5,), lambda s, r=run: 0.1 * r.seed)
    for run in sgt:  # differences 0.1, 0.3, 0.2 (seed 3: 0.9, no partner)
        add_series(run, "llama", VAL, (5,), lambda s, r=run: [0.1, 0.4, 0.4, 0.9][r.seed])
    reply = significance(logged_in, standalone + sgt).json()
    [row] = reply["rows"]
    # d = [0.1, 0.3, 0.2]: mean 0.2, sum of squares 0.02, sd = 0.1, se = 0.1 / sqrt(3),
    # t_{0.975, 2} = 4.302653: [0.2 - 0.248414, 0.2 + 0.248414]
    interval = row["interval"]
    assert interval["method"] == "paired t" and interval["n"] == 3
    assert interval["estimate"] == pytest.approx(0.2)
    assert interval["high"] == pytest.approx(0.2 + 4.302653 * 0.1 / math.sqrt(3))
    assert row["seeds"] == [0, 1, 2] and row["unpaired"] == [sgt[3].pk]
    assert row["note"] == (
        f"run(s) {sgt[3].pk} have no partner of the same seed: left out of the paired interval"
    )
    assert "does not clearly change" in row["sentence"]  # -0.048 < 0


def test_a_single_shared_seed_falls_back_to_welch(logged_in: Client, alice: User) -> None:
    standalone = make_runs(alice, "standalone", seeds=(0, 1))
    sgt = make_runs(alice, "sgt", seeds=(1, 5))
    for run, value in zip(standalone + sgt, (0.2, 0.4, 0.5, 0.7), strict=True):
        add_series(run, "llama", VAL, (5,), lambda s, v=value: v)
    [row] = significance(logged_in, standalone + sgt).json()["rows"]
    # a: [0.5, 0.7], b: [0.2, 0.4]: 0.3; variances 0.02 each, se^2 = 0.01 + 0.01 = 0.02,
    # df = 0.02^2 / (0.01^2 / 1 + 0.01^2 / 1) = 2, t_{0.975, 2} = 4.302653.
    interval = row["interval"]
    assert interval["method"] == "Welch" and interval["df"] == pytest.approx(2.0)
    assert interval["low"] == pytest.approx(0.3 - 4.302653 * math.sqrt(0.02))
    assert (
        row["note"] == "unpaired: only seed 1 is in both groups, so Welch's interval over all runs"
    )


def test_a_group_without_values_says_so(logged_in: Client, alice: User, runs: list[Run]) -> None:
    extra = make_runs(alice, "prp", seeds=(0, 1))  # no series at all
    reply = significance(logged_in, runs + extra).json()
    prp = row_of(reply, "prp")
    assert prp["interval"] is None and prp["note"] == "no prp run has a value"
    assert (
        prp["sentence"]
        == "prp against standalone on llama's validation reward@1: no prp run has a value."
    )
    assert any(
        f"prp run(s) {extra[0].pk}, {extra[1].pk} have no value" in n for n in reply["notes"]
    )
    assert reply["correction"] == "Holm-Bonferroni over the 2 comparisons shown"


def test_another_baseline(logged_in: Client, runs: list[Run]) -> None:
    reply = significance(logged_in, runs, baseline="sgt").json()
    standalone = row_of(reply, "standalone")["interval"]
    assert standalone["estimate"] == pytest.approx(-0.2)
    assert standalone["low"] == pytest.approx(-PAIRED_HIGH)
    assert row_of(reply, "standalone")["sentence"].startswith(
        "standalone lowers llama's validation reward@1 by 0.20 [0.11, 0.29] over sgt, 5 seeds"
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sig_step": "-1"}, "sig_step: a step"),
        ({"sig_step": "ten"}, "sig_step: a step"),
        ({"sig_step": "1" * 13}, "sig_step: a step"),
        ({"baseline": "nosuch"}, "baseline: no group 'nosuch'"),
        ({"metric": "no spaces"}, "metric: "),
        ({"view": "sig"}, "view: the bar views are"),
        ({"band": "sd"}, "band: must be one of"),
    ],
)
def test_bad_parameters_are_a_json_400(
    logged_in: Client, runs: list[Run], params: dict[str, str], message: str
) -> None:
    for response in (
        significance(logged_in, runs, **params),
        sig_file(logged_in, runs, "csv", **params),
        sig_file(logged_in, runs, "tex", **params),
    ):
        assert response.status_code == 400
        assert response["Content-Type"] == "application/json"
        assert response.json()["error"].startswith(message)


def test_only_one_group_is_empty_not_an_error(logged_in: Client, runs: list[Run]) -> None:
    reply = significance(logged_in, runs[:5]).json()
    assert reply["rows"] == [] and reply["empty"].startswith("Only the group 'standalone'")
    assert sig_file(logged_in, runs[:5], "csv").content.decode().splitlines() == [
        ",".join(SIG_CSV_COLUMNS)
    ]
    assert sig_file(logged_in, runs[:5], "pdf").content.startswith(b"%PDF")


def test_who_may_see_it(client: Client, charlie: User, runs: list[Run]) -> None:
    assert significance(client, runs).status_code == 401
    client.force_login(charlie)
    assert significance(client, runs).status_code == 404
    assert sig_file(client, runs, "csv").status_code == 404


# --------------------------------------------------------------------------- exports


def test_the_csv(logged_in: Client, runs: list[Run]) -> None:
    response = sig_file(logged_in, runs, "csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="bars-significance-regime-15runs-' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert tuple(rows[0]) == SIG_CSV_COLUMNS and len(rows) == 2
    sgt = next(row for row in rows if row["group"] == "sgt")
    assert (sgt["metric"], sgt["policy"], sgt["baseline"], sgt["step"]) == (
        VAL,
        "llama",
        "standalone",
        "final",
    )
    assert sgt["method"] == "paired t" and sgt["n"] == "5" and sgt["n_baseline"] == ""
    assert float(sgt["estimate"]) == pytest.approx(0.2)
    assert float(sgt["low"]) == pytest.approx(PAIRED_LOW)
    assert float(sgt["high"]) == pytest.approx(PAIRED_HIGH)
    assert float(sgt["df"]) == 4 and float(sgt["p"]) == pytest.approx(PAIRED_P, rel=1e-6)
    assert float(sgt["p_holm"]) == pytest.approx(HOLM, rel=1e-6)
    assert sgt["seeds"] == "0 1 2 3 4" and sgt["sentence"].startswith("sgt raises llama's")
    xgrpo = next(row for row in rows if row["group"] == "xgrpo")
    assert xgrpo["method"] == "Welch" and (xgrpo["n"], xgrpo["n_baseline"]) == ("5", "5")
    assert float(xgrpo["df"]) == pytest.approx(8.0)
    assert float(xgrpo["low"]) == pytest.approx(WELCH_LOW)
    at_10 = sig_file(logged_in, runs, "csv", sig_step="10").content.decode()
    assert ",standalone,10,paired t,5,," in at_10


def test_the_latex_table(logged_in: Client, runs: list[Run]) -> None:
    response = sig_file(logged_in, runs, "tex")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/x-tex")
    tex = response.content.decode()
    assert r"\begin{tabular}{lllrrlrrr}" in tex and r"\toprule" in tex
    assert (
        r"Policy & Metric & Group & Difference & 95\% CI & Test & $n$ & $p$ & $p$ (Holm) \\" in tex
    )
    # 3 decimals (three significant digits of 0.303); p 0.0031982 and 0.0020773, Holm 0.0041546
    assert (
        r"llama & Validation reward@1 & sgt & 0.200 & [0.112, 0.288] & paired $t$ & 5 seeds "
        r"& 0.003 & 0.004 \\"
    ) in tex
    assert (
        r"llama & Validation reward@1 & xgrpo & 0.200 & [0.097, 0.303] & Welch & 5 vs 5 runs "
        r"& 0.002 & 0.004 \\"
    ) in tex
    assert "% Significance: val/reward@1, each group minus standalone at the final step." in tex
    assert "Holm-Bonferroni over the 2 comparisons shown" in tex
    assert all(line.startswith("%") or "\\" in line or not line for line in tex.splitlines())


def test_a_hostile_group_label_stays_text_in_the_exports(logged_in: Client, alice: User) -> None:
    runs = make_runs(alice, "standalone", seeds=(0, 1)) + make_runs(alice, "sgt", seeds=(0, 1))
    for run in runs:
        add_series(run, "llama", VAL, (5,), lambda s, r=run: 0.1 * r.seed + (r.regime == "sgt"))
        run.config["name"] = "=HYPERLINK(1)\n\\input{x}" if run.regime == "sgt" else "base"
        run.save()
    params = {"group_by": "name", "baseline": "base"}
    rows = list(
        csv.reader(io.StringIO(sig_file(logged_in, runs, "csv", **params).content.decode()))
    )
    assert rows[1][2] == "'=HYPERLINK(1)\n\\input{x}"  # SafeWriter's leading quote
    tex = sig_file(logged_in, runs, "tex", **params).content.decode()
    assert r"=HYPERLINK(1) \textbackslash{}input\{x\}" in tex and "\\input{x}" not in tex


@pytest.mark.parametrize("fmt", ["pdf", "svg", "png"])
def test_the_forest_plot_renders_and_is_deterministic(
    logged_in: Client, runs: list[Run], fmt: str
) -> None:
    first = sig_file(logged_in, runs, fmt)
    assert first.status_code == 200
    assert first.content[:4] in (b"%PDF", b"\x89PNG", b"<?xm")
    assert sig_file(logged_in, runs, fmt).content == first.content

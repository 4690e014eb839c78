"""The significance view never says more than its numbers (issue 45): the title names the
tests used, a primary endpoint is kept out of Holm's family and says so, one seed links
to a sweep, no spread is no test, the pool mean gives the pool's net effect.

The numbers are test_compare_significance.py's (hand-computed there): paired p =
0.0031982 over seeds 0-4, Welch p = 0.0020773 over seeds 10-14.
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

from tests.webapp.compare.test_compare_significance import (
    DIFFERENCES,
    PAIRED_P,
    STANDALONE,
    WELCH_P,
    XGRPO,
)
from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

VAL = "val/reward@1"
DISCRIMINATION = "val/discrimination/carry"
POOL = [
    {"name": "llama", "model": "zoo:tiny-llama-char"},
    {"name": "qwen-nocarry", "model": "zoo:tiny-qwen-bpe"},
]
PRIMARY = f"qwen-nocarry|{DISCRIMINATION}|sgt"


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def gap_runs(alice: User) -> list[Run]:
    """standalone and sgt seeds 0-4 (sgt = standalone + DIFFERENCES), xgrpo seeds 10-14;
    both policies log the same val/discrimination/carry; the pool mean of val/reward@1
    (``_pool``) is standalone's + 0.1 under sgt, seed by seed."""
    standalone = make_runs(alice, "standalone", seeds=range(5), pool=POOL)
    sgt = make_runs(alice, "sgt", seeds=range(5), pool=POOL)
    xgrpo = make_runs(alice, "xgrpo", seeds=range(10, 15), pool=POOL)
    for run in standalone + sgt + xgrpo:
        if run.regime == "xgrpo":
            final = XGRPO[run.seed - 10]
        else:
            final = STANDALONE[run.seed] + (DIFFERENCES[run.seed] if run.regime == "sgt" else 0)
        for policy in ("llama", "qwen-nocarry"):
            add_series(run, policy, DISCRIMINATION, (0, 20), lambda s, f=final: f * s / 20)
        pool = 0.5 + 0.01 * run.seed + (0.1 + 0.01 * run.seed if run.regime == "sgt" else 0)
        add_series(run, "_pool", VAL, (0, 20), lambda s, f=pool: f * s / 20)
    return standalone + sgt + xgrpo


def ids(runs: list[Run]) -> str:
    return ",".join(str(run.pk) for run in runs)


def significance(client: Client, runs: list[Run], **params: Any) -> Any:
    query = {"runs": ids(runs), "view": "significance", **params}
    return client.get(reverse("compare:bars"), query)


def row_of(reply: dict[str, Any], policy: str, group: str, metric: str = "") -> dict[str, Any]:
    return next(
        row
        for row in reply["rows"]
        if (row["policy"], row["group"]) == (policy, group) and metric in ("", row["metric"])
    )


# --------------------------------------------------------------------------- title


def test_the_title_names_the_tests_used(logged_in: Client, alice: User) -> None:
    standalone = make_runs(alice, "standalone", seeds=range(5))
    sgt = make_runs(alice, "sgt", seeds=range(5))
    xgrpo = make_runs(alice, "xgrpo", seeds=range(10, 15))
    for run in standalone + sgt + xgrpo:
        level = {"standalone": 0.1, "sgt": 0.2, "xgrpo": 0.3}[run.regime] + 0.01 * (run.seed % 3)
        value = level * (1 + 0.1 * (run.seed % 2))  # sgt - standalone: 0.1 or 0.11
        add_series(run, "llama", VAL, (5,), lambda s, v=value: v)

    def title(runs: list[Run]) -> str:
        return significance(logged_in, runs, policy="llama").json()["title"]

    # Welch rows only (no seed shared): not "paired t".
    assert title(standalone + xgrpo) == "Significance (Welch)"
    assert title(standalone + sgt) == "Significance (paired t)"  # one comparison: no Holm
    assert title(standalone + sgt + xgrpo) == "Significance (paired t and Welch, Holm)"
    assert title(standalone[:1] + sgt[:1]) == "Significance"  # one seed: no test at all


# --------------------------------------------------------------------------- primary


def test_the_primary_endpoint_keeps_its_own_p_outside_the_family(
    logged_in: Client, gap_runs: list[Run]
) -> None:
    reply = significance(logged_in, gap_runs, metric=DISCRIMINATION, primary=PRIMARY).json()
    assert reply["primary"] == PRIMARY and reply["spec"].endswith(
        "&primary=qwen-nocarry|val/discrimination/carry|sgt"
    )
    # 2 policies x 2 groups (the pool logs no discrimination: no pool row for it).
    assert len(reply["rows"]) == 4 and not any(row["policy"] == "_pool" for row in reply["rows"])
    primary = row_of(reply, "qwen-nocarry", "sgt")
    assert primary["primary"] is True
    assert primary["interval"]["p"] == pytest.approx(PAIRED_P, rel=1e-6)
    assert primary["interval"]["p_adjusted"] is None
    sentence = primary["sentence"]
    assert sentence.startswith("sgt raises qwen-nocarry's ")
    assert sentence.endswith(
        " by 0.20 [0.11, 0.29] over standalone, 5 seeds (paired t, p = 0.003; the primary "
        "endpoint, outside the Holm family of the 3 other comparisons)."
    )
    # The family: llama's sgt (p 0.0031982) and both xgrpo rows (p 0.0020773): Holm gives
    # 3 x 0.0020773 to the smallest, and the running maximum to the others.
    for policy, group in (("llama", "sgt"), ("llama", "xgrpo"), ("qwen-nocarry", "xgrpo")):
        row = row_of(reply, policy, group)
        assert row["primary"] is False
        assert row["interval"]["p_adjusted"] == pytest.approx(3 * WELCH_P, rel=1e-6)
    assert reply["correction"] == (
        "Holm-Bonferroni over the 3 comparisons shown other than the primary endpoint"
    )
    assert "Primary endpoint: qwen-nocarry · " in reply["method"]
    # Without it, the same row is one of 4 in the family.
    plain = significance(logged_in, gap_runs, metric=DISCRIMINATION).json()
    assert row_of(plain, "qwen-nocarry", "sgt")["interval"]["p_adjusted"] == pytest.approx(
        4 * WELCH_P, rel=1e-6
    )


def test_the_primary_endpoint_in_the_csv_and_latex(logged_in: Client, gap_runs: list[Run]) -> None:
    query = {
        "runs": ids(gap_runs),
        "view": "significance",
        "metric": DISCRIMINATION,
        "primary": PRIMARY,
    }
    text = logged_in.get(reverse("compare:bars_file", args=["csv"]), query).content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    marked = [(row["policy"], row["group"]) for row in rows if row["primary"] == "1"]
    assert marked == [("qwen-nocarry", "sgt")]
    primary = next(row for row in rows if row["primary"] == "1")
    assert primary["p_holm"] == "" and float(primary["p"]) == pytest.approx(PAIRED_P, rel=1e-6)
    tex = logged_in.get(reverse("compare:bars_file", args=["tex"]), query).content.decode()
    line = next(
        line for line in tex.splitlines() if line.startswith("qwen-nocarry") and "sgt" in line
    )
    assert line.endswith(r"& 0.003 & primary \\")


def test_an_unknown_primary_is_a_note_and_a_malformed_one_a_400(
    logged_in: Client, gap_runs: list[Run]
) -> None:
    reply = significance(
        logged_in, gap_runs, metric=DISCRIMINATION, primary=f"gpt2|{DISCRIMINATION}|sgt"
    ).json()
    assert not any(row["primary"] for row in reply["rows"])
    assert reply["correction"] == "Holm-Bonferroni over the 4 comparisons shown"
    assert any(
        note.startswith("primary: no comparison gpt2 · ")
        and "every comparison is in the Holm" in note
        for note in reply["notes"]
    ), reply["notes"]
    for bad in ("qwen-nocarry", f"qwen-nocarry|{DISCRIMINATION}", "no spaces|val/reward@1|sgt"):
        for response in (
            significance(logged_in, gap_runs, primary=bad),
            logged_in.get(
                reverse("compare:bars_file", args=["csv"]),
                {"runs": ids(gap_runs), "view": "significance", "primary": bad},
            ),
        ):
            assert response.status_code == 400
            assert response.json()["error"].startswith("primary: <policy>|<metric>|<group>")


# --------------------------------------------------------------------------- the pool


def test_the_pool_mean_gives_the_net_effect_when_no_policy_is_chosen(
    logged_in: Client, gap_runs: list[Run]
) -> None:
    pair = [run for run in gap_runs if run.regime in ("standalone", "sgt")]
    reply = significance(logged_in, pair, metric=VAL).json()
    pool = row_of(reply, "_pool", "sgt")
    assert (pool["policy"], pool["policy_label"]) == ("_pool", "pool mean")
    # pool mean per seed 0.5 + 0.01 s, under sgt + 0.1 + 0.01 s: d = 0.10 ... 0.14, mean
    # 0.12, sd 0.0158114, se 0.0070711, t_{0.975, 4} = 2.776445: [0.1004, 0.1396]
    assert pool["interval"]["estimate"] == pytest.approx(0.12)
    assert pool["interval"]["low"] == pytest.approx(0.12 - 2.776445 * math.sqrt(0.00025 / 5))
    assert pool["sentence"].startswith(
        "sgt raises the pool's mean validation reward@1 by 0.120 [0.100, 0.140] over standalone"
    )
    # Choosing policies leaves it out; choosing it keeps it.
    chosen = significance(logged_in, pair, metric=VAL, policy="llama").json()
    assert "_pool" not in [row["policy"] for row in chosen["rows"]]
    chosen = significance(logged_in, pair, metric=VAL, policy="_pool").json()
    assert [row["policy"] for row in chosen["rows"]] == ["_pool"]


def test_the_page_offers_the_pool_mean_where_it_is_logged(
    logged_in: Client, gap_runs: list[Run], alice: User
) -> None:
    page = logged_in.get(reverse("compare:page"), {"runs": ids(gap_runs)})
    assert page.context["policies"] == ["llama", "qwen-nocarry", "_pool"]
    assert 'name="policy" value="_pool"' in page.content.decode()
    others = make_runs(alice, "standalone", seeds=(0,))
    add_series(others[0], "llama", VAL, (5,), lambda s: 0.5)
    page = logged_in.get(reverse("compare:page"), {"runs": ids(others)})
    assert "_pool" not in page.context["policies"]


# --------------------------------------------------------------------------- words


def test_one_seed_links_to_a_sweep_and_names_no_welch_interval(
    logged_in: Client, alice: User
) -> None:
    standalone = make_runs(alice, "standalone", seeds=(0,))
    sgt = make_runs(alice, "sgt", seeds=(0,))
    add_series(standalone[0], "llama", VAL, (5,), lambda s: 0.3)
    add_series(sgt[0], "llama", VAL, (5,), lambda s: 0.5)
    reply = significance(logged_in, standalone + sgt, policy="llama").json()
    [row] = reply["rows"]
    assert row["sentence"] == (
        "sgt changes llama's validation reward@1 by +0.20 over standalone, 1 vs 1 run "
        "(one seed: launch a sweep for an interval)."
    )
    assert "Welch's interval" not in row["sentence"]
    assert row["sweep_url"] == reverse("compare:sweep_create", args=[sgt[0].experiment_id])
    assert row["note"] == "one run a group: no interval"
    assert logged_in.get(row["sweep_url"]).status_code == 200  # the sweep form


def test_no_spread_is_no_test_and_not_in_the_family(logged_in: Client, alice: User) -> None:
    standalone = make_runs(alice, "standalone", seeds=(0, 1))
    sgt = make_runs(alice, "sgt", seeds=(0, 1))
    xgrpo = make_runs(alice, "xgrpo", seeds=(0, 1))
    values = {"standalone": (0.50, 0.40), "sgt": (0.51, 0.41), "xgrpo": (0.6, 0.7)}
    for run in standalone + sgt + xgrpo:
        add_series(run, "llama", VAL, (5,), lambda s, v=values[run.regime][run.seed]: v)
    reply = significance(logged_in, standalone + sgt + xgrpo, policy="llama").json()
    flat = row_of(reply, "llama", "sgt")
    assert flat["sentence"] == (
        "sgt against standalone on llama's validation reward@1: every seed moved by exactly "
        "0.010: no spread, no test, 2 seeds."
    )
    assert flat["interval"]["p"] == "NaN" and flat["interval"]["no_spread"] is True
    assert flat["interval"]["p_adjusted"] is None
    # xgrpo is the only comparison tested: no Holm, its own p.
    assert reply["correction"] == "" and reply["title"] == "Significance (paired t)"
    assert row_of(reply, "llama", "xgrpo")["interval"]["p_adjusted"] is None


def test_a_forest_plot_row_label_keeps_its_slice_on_a_second_line() -> None:
    """The gap preset's forest plot cut 'sgt · llama-sum · Discrimination (J) · carry' to
    one line, and its carry and overflow rows read alike; a long row label now wraps to
    two lines before any ellipsis."""
    from types import SimpleNamespace

    from webapp.compare.significance_export import LABEL_CHARS, row_label

    table = SimpleNamespace(
        groups=[SimpleNamespace(label="sgt", name="sgt")],
        options=SimpleNamespace(metrics=["a", "b"]),
    )
    row = SimpleNamespace(
        group="sgt", policy_label="llama-sum", metric_label="Discrimination (J) · overflow"
    )
    label = row_label(row, table)  # type: ignore[arg-type]
    assert label.split("\n")[-1].endswith("overflow")
    assert all(len(line) <= LABEL_CHARS for line in label.split("\n"))
    assert " ".join(label.split("\n")) == "sgt · llama-sum · Discrimination (J) · overflow"

"""The compare page and the exports name metrics and policies from the metric catalogue,
note a 95% CI over n < 3 runs, keep the step-0 evaluation on the tokens axis, and lay
out figure panels without empty slots."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.compare.test_compare_support import add_series, make_runs, spec_of
from webapp.compare import assemble, export, selectors
from webapp.compare.spec import ComparisonSpec
from webapp.runs.models import Run

VAL, TRAIN, STEP_S = "val/reward@1", "train/reward_mean", "perf/step_s"
TOKENS = "perf/response_tokens_total"


def build(runs: list[Run], **params: object) -> assemble.Comparison:
    spec = spec_of(runs=",".join(str(run.pk) for run in runs), **params)
    return selectors.comparison_build(spec=spec, runs=sorted(runs, key=lambda run: run.pk))


def _trace(group: str, n: list[int]) -> assemble.Trace:
    x = np.arange(len(n), dtype=float)
    return assemble.Trace(group, "#000000", "solid", x, x, x - 0.1, x + 0.1, np.array(n), x)


def _comparison(
    policies: tuple[str, ...], metrics: tuple[str, ...], n: list[int], band: str = "ci95"
) -> assemble.Comparison:
    """Without a database: one group "sgt" whose traces have ``n`` runs per point."""
    spec = ComparisonSpec(runs=(1,), metrics=metrics, band=band)
    panels = [
        assemble.Panel(policy, metric, "step", [_trace("sgt", n)])
        for policy in policies
        for metric in metrics
    ]
    note = assemble.small_n_note(panels) if band == "ci95" else None
    groups = [assemble.Group("sgt", "#000000", "solid", [1])]
    return assemble.Comparison(spec, groups, panels, [], "step", [], grid=len(n), ci_note=note)


def _cells(comparison: assemble.Comparison, columns: int) -> tuple[list[tuple[int, range]], int]:
    """Each visible axes' (row, grid columns) and the number of grid columns."""
    figure = export.build_figure(comparison, columns)
    assert all(ax.get_visible() for ax in figure.axes)
    specs = [ax.get_subplotspec() for ax in figure.axes]
    [width] = {spec.get_gridspec().ncols for spec in specs}
    return [(spec.rowspan.start, spec.colspan) for spec in specs], width


# --------------------------------------------------------------------------- names


def test_figure_panels_are_titled_by_policy_label_with_the_metrics_name_and_unit() -> None:
    comparison = _comparison(("_pool", "llama"), (VAL, STEP_S), [3, 3])
    figure = export.build_figure(comparison, 1)
    titles = [(ax.get_title(), ax.get_ylabel()) for ax in figure.axes]
    assert titles == [
        ("pool mean", "Validation reward@1"),
        ("pool max", "Step time (s)"),  # the pool's step time is the slowest policy's
        ("llama", "Validation reward@1"),
        ("llama", "Step time (s)"),
    ]


@pytest.mark.django_db
def test_the_json_and_the_page_carry_display_names(client: Client, alice: User) -> None:
    runs = make_runs(alice, "sgt")
    for run in runs:
        add_series(run, "_pool", VAL, [0, 10], lambda s: 0.5)
    client.force_login(alice)
    ids = ",".join(str(run.pk) for run in runs)
    reply = client.get(reverse("compare:data"), {"runs": ids, "metric": VAL, "policy": "_pool"})
    [panel] = reply.json()["panels"]
    assert (panel["policy"], panel["metric"]) == ("_pool", VAL)  # keys stay keys
    assert panel["policy_label"] == "pool mean"
    assert panel["metric_label"] == panel["y_label"] == "Validation reward@1"
    assert panel["title"] == "pool mean · Validation reward@1"
    summary = client.get(
        reverse("compare:summary"), {"runs": ids, "table_metric": VAL, "policy": "_pool"}
    ).json()
    assert summary["metric_label"] == "Validation reward@1"
    assert summary["rows"][0]["policy_label"] == "pool mean"
    assert summary["policy_labels"] == {"_pool": "pool mean"}

    page = client.get(reverse("compare:page"), {"runs": ids}).content.decode()
    assert 'value="val/reward@1" checked> Validation reward@1</label>' in page
    assert '<option value="val/reward@1" selected>Validation reward@1</option>' in page
    assert "> val/reward@1<" not in page


# --------------------------------------------------------------------------- CI note


@pytest.mark.django_db
def test_a_ci_over_fewer_than_three_runs_is_noted(alice: User) -> None:
    two = make_runs(alice, "sgt")
    three = make_runs(alice, "standalone", seeds=[0, 1, 2])
    for run in two + three:
        steps = [0, 10, 20, 30] if run == three[0] else [0, 10, 20]  # n = 1 at step 30
        add_series(run, "llama", VAL, steps, lambda s: s / 100)
    notes = build(two + three, metric=VAL, policy="llama", band="ci95").notes
    assert notes == [
        "The 95% CI rests on fewer than 3 runs for standalone (n < 3 in places), sgt (n = 2): "
        "with n = 2 it spans ±12.7 standard errors, with n = 1 there is no band."
    ]
    assert build(two + three, metric=VAL, policy="llama", band="std").notes == []
    assert (
        build(three[1:], metric=VAL, policy="llama", band="ci95")
        .notes[0]
        .startswith("The 95% CI rests on fewer than 3 runs for standalone (n = 2):")
    )
    assert build(three, metric=VAL, policy="llama", band="ci95", buckets=10).notes == [
        "The 95% CI rests on fewer than 3 runs for standalone (n < 3 in places): "
        "with n = 2 it spans ±12.7 standard errors, with n = 1 there is no band."
    ]


def test_the_figure_and_the_bundle_note_a_ci_over_fewer_than_three_runs() -> None:
    small = _comparison(("llama",), (VAL,), [2, 2])
    figure = export.build_figure(small, 1)
    assert figure.get_supxlabel() == "95% CI from fewer than 3 runs: sgt (n = 2)"
    readme = export.readme_text(small)
    assert "Note: The 95% CI rests on fewer than 3 runs for sgt (n = 2)" in readme
    assert export.build_figure(_comparison(("llama",), (VAL,), [3, 4]), 1).get_supxlabel() == ""
    unbanded = _comparison(("llama",), (VAL,), [2, 2], band="std")
    assert export.build_figure(unbanded, 1).get_supxlabel() == ""


# --------------------------------------------------------------------------- x = tokens


@pytest.mark.django_db
def test_x_tokens_keeps_the_step_0_evaluation_at_zero_tokens(alice: User) -> None:
    # As the trainer logs: val/reward@1 at step 0 (before any rollout) and every 10
    # steps; the token counter from step 1 on, 100 tokens a step.
    runs = make_runs(alice, "sgt")
    for run in runs:
        add_series(run, "llama", VAL, [0, 10, 20], lambda s: 0.1 + s / 100)
        add_series(run, "llama", TOKENS, range(1, 21), lambda s: 100.0 * s)
    comparison = build(runs, metric=VAL, policy="llama", x="tokens", buckets=21)
    [line] = comparison.panels[0].traces
    np.testing.assert_allclose(line.x, [0.0, 1000.0, 2000.0])
    np.testing.assert_allclose(line.mean, [0.1, 0.2, 0.3])
    assert comparison.panels[0].x_label == "response tokens" and not comparison.notes


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize(
    ("policies", "metrics", "columns", "rows"),
    [
        (3, 2, 2, [2, 2, 2]),  # rows filled evenly: a policy a row, not 4 + 2
        (5, 2, 2, [2, 2, 2, 2, 2]),
        (4, 2, 2, [4, 4]),
        (7, 1, 2, [4, 3]),  # a prime count: only the last row short
        (3, 1, 1, [2, 1]),
        (5, 1, 2, [3, 2]),  # balanced, not 4 + 1
        (3, 2, 1, [2, 2, 2]),
        (1, 5, 2, [3, 2]),
    ],
)
def test_figure_panels_leave_no_empty_slot(
    policies: int, metrics: int, columns: int, rows: list[int]
) -> None:
    names = tuple(f"p{i}" for i in range(policies))
    keys = (VAL, TRAIN, STEP_S, TOKENS, "actor/lr")[:metrics]
    cells, width = _cells(_comparison(names, keys, [3, 3]), columns)
    assert len(cells) == policies * metrics  # one axes per panel, none hidden
    by_row = [[span for r, span in cells if r == row] for row in range(len(rows))]
    assert [len(spans) for spans in by_row] == rows
    assert {len(span) for _row, span in cells} == {2}  # every panel the same width
    assert width == 2 * rows[0]  # the first row fills the width
    for spans in by_row:  # each row centred, its panels side by side
        assert spans[0].start == width - spans[-1].stop
        assert all(a.stop == b.start for a, b in itertools.pairwise(spans))

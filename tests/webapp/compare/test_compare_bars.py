"""The bar views' pure assembly (webapp/compare/bars.py) against hand-computed numbers:
per-task evaluation (Figure 12) and relative improvement over a baseline (Figure 11)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from django.http import QueryDict

from trainer.stats import PAIRED_DELTA, UNPAIRED_DELTA, t_critical
from webapp.compare import bars
from webapp.compare.assemble import Group
from webapp.compare.bars import FinalValue, eval_key
from webapp.compare.spec import ComparisonSpec, SpecError
from webapp.compare.stats import t_975

STANDALONE = Group("standalone", "#000000", "solid", [1, 2])
SGT = Group("sgt", "#009E73", "solid", [3, 4])
PRP = Group("prp", "#E69F00", "solid", [5, 6])
VAL = "val/reward@1"
SUITE, TASKS = "synthetic", ["a", "b"]
SQRT2 = math.sqrt(2.0)


def task_values() -> dict[tuple[int, str, str], FinalValue]:
    """llama's final accuracy at step 10 (base 0.1 on a, 0.3 on b at step 0):
    standalone a = 0.2, 0.4, b = 0.4, 0.6; sgt a = 0.5, 0.7, b = 0.7, 0.9."""
    finals = {
        1: (0.2, 0.4),
        2: (0.4, 0.6),
        3: (0.5, 0.7),
        4: (0.7, 0.9),
    }
    bases = {"a": 0.1, "b": 0.3}
    return {
        (run, "llama", eval_key(SUITE, task)): FinalValue(value, 10, bases[task])
        for run, pair in finals.items()
        for task, value in zip(TASKS, pair, strict=True)
    }


def per_task(values: dict, band: str = "std", notes: list[str] | None = None) -> list:
    return bars.per_task(
        groups=[STANDALONE, SGT],
        policies=["llama"],
        suite=SUITE,
        tasks=TASKS,
        values=values,
        band=band,
        notes=notes,
    )


def test_per_task_bars_are_means_with_bands_over_runs() -> None:
    [panel] = per_task(task_values())
    assert panel.policy == "llama" and panel.title == "llama"
    assert panel.categories == ["a", "b"] and panel.y_label == "accuracy"
    assert panel.x_label == "task (synthetic)"
    standalone, sgt = panel.traces
    assert (standalone.group, sgt.group) == ("standalone", "sgt")
    np.testing.assert_allclose(standalone.mean, [0.3, 0.5])
    np.testing.assert_allclose(sgt.mean, [0.6, 0.8])
    # sample std of (0.2, 0.4) = 0.1 * sqrt(2)
    np.testing.assert_allclose(standalone.std, [0.1 * SQRT2] * 2)
    np.testing.assert_allclose(standalone.lower, [0.3 - 0.1 * SQRT2, 0.5 - 0.1 * SQRT2])
    np.testing.assert_allclose(sgt.upper, [0.6 + 0.1 * SQRT2, 0.8 + 0.1 * SQRT2])
    assert standalone.n.tolist() == [2, 2] and sgt.n.tolist() == [2, 2]
    np.testing.assert_allclose(panel.base, [0.1, 0.3])  # the base model, once per task


@pytest.mark.parametrize(
    ("band", "lower", "upper"),
    [
        ("minmax", 0.2, 0.4),
        ("ci95", 0.3 - t_975(1) * 0.1, 0.3 + t_975(1) * 0.1),  # t * std / sqrt(n) = t * 0.1
        ("none", 0.3, 0.3),
    ],
)
def test_per_task_bands_follow_the_spec(band: str, lower: float, upper: float) -> None:
    [panel] = per_task(task_values(), band=band)
    standalone = panel.traces[0]
    assert standalone.lower[0] == pytest.approx(lower)
    assert standalone.upper[0] == pytest.approx(upper)
    assert t_975(1) * 0.1 == pytest.approx(1.2706205)


def test_a_run_evaluated_only_at_step_0_gives_base_but_no_bar() -> None:
    values = task_values()
    # run 2 has only the base model evaluated on task a (its final is at step 0).
    values[(2, "llama", eval_key(SUITE, "a"))] = FinalValue(0.1, 0, 0.1)
    notes: list[str] = []
    [panel] = per_task(values, notes=notes)
    standalone = panel.traces[0]
    assert standalone.mean[0] == pytest.approx(0.2) and standalone.n.tolist() == [1, 2]
    assert math.isnan(standalone.std[0])  # one run: no spread
    assert panel.base[0] == pytest.approx(0.1)
    assert any("run(s) 2 have only the base model (step 0)" in note for note in notes)


def test_base_is_the_mean_of_the_runs_step_0_values_and_nan_without_any() -> None:
    values = task_values()
    values[(1, "llama", eval_key(SUITE, "b"))] = FinalValue(0.4, 10, 0.5)  # 0.5, 0.3, 0.3, 0.3
    for run in (1, 2, 3, 4):
        old = values[(run, "llama", eval_key(SUITE, "a"))]
        values[(run, "llama", eval_key(SUITE, "a"))] = FinalValue(old.final, 10)
    [panel] = per_task(values)
    assert math.isnan(panel.base[0])
    assert panel.base[1] == pytest.approx((0.5 + 0.3 * 3) / 4)


def test_per_task_notes_runs_without_results_and_different_final_steps() -> None:
    values = {key: v for key, v in task_values().items() if key[0] != 4}
    values[(3, "llama", eval_key(SUITE, "a"))] = FinalValue(0.5, 20, 0.1)
    notes: list[str] = []
    [panel] = per_task(values, notes=notes)
    sgt = panel.traces[1]
    assert sgt.n.tolist() == [1, 1] and sgt.mean.tolist() == pytest.approx([0.5, 0.7])
    assert "llama: no synthetic results in run(s) 4" in notes
    assert "llama: the final checkpoints evaluated are at different steps (10, 20)" in notes


def test_a_policy_without_results_gets_an_empty_panel() -> None:
    notes: list[str] = []
    panels = bars.per_task(
        groups=[STANDALONE, SGT],
        policies=["llama", "qwen"],
        suite=SUITE,
        tasks=TASKS,
        values=task_values(),
        notes=notes,
    )
    assert [p.policy for p in panels] == ["llama", "qwen"] and panels[1].traces == []
    assert "qwen: no synthetic results in any run" in notes
    assert panels[1].message == "no synthetic results" and panels[0].message == ""


def relative_values() -> dict[tuple[int, str, str], FinalValue]:
    """Final val/reward@1: llama standalone 0.4, 0.6 (b = 0.5), sgt 0.6, 0.8, prp 0.5,
    0.45; qwen standalone 0.0, 0.0 (b = 0), sgt 0.3, 0.2."""
    finals = {
        ("llama", 1): 0.4,
        ("llama", 2): 0.6,
        ("llama", 3): 0.6,
        ("llama", 4): 0.8,
        ("llama", 5): 0.5,
        ("llama", 6): 0.45,
        ("qwen", 1): 0.0,
        ("qwen", 2): 0.0,
        ("qwen", 3): 0.3,
        ("qwen", 4): 0.2,
    }
    return {(run, policy, VAL): FinalValue(v, 50) for (policy, run), v in finals.items()}


def test_relative_improvement_is_per_run_over_the_baseline_mean() -> None:
    notes: list[str] = []
    llama, qwen = bars.relative(
        groups=[STANDALONE, PRP, SGT],
        policies=["llama", "qwen"],
        metrics=[VAL],
        baseline="standalone",
        values=relative_values(),
        notes=notes,
    )
    assert llama.y_label == "relative improvement over standalone (%)"
    assert llama.categories == [VAL] and llama.category_labels == ["Validation reward@1"]
    assert [t.group for t in llama.traces] == ["prp", "sgt"]  # the baseline has no bar
    prp, sgt = llama.traces
    # sgt: (0.6 - 0.5) / 0.5 = 20 %, (0.8 - 0.5) / 0.5 = 60 %: mean 40, std 20 sqrt 2
    assert sgt.mean[0] == pytest.approx(40.0) and sgt.n.tolist() == [2]
    assert sgt.std[0] == pytest.approx(20 * SQRT2)
    # No seeds given: the unpaired delta method, both groups' variances. var_x = var_b =
    # 0.02: var(R / 100) = 0.02 / (2 * 0.25) + 0.49 * 0.02 / (2 * 0.0625) = 0.1184,
    # Welch-Satterthwaite df = 0.1184^2 / (0.04^2 + 0.0784^2) = 1.8097.
    half = t_critical(0.1184**2 / (0.04**2 + 0.0784**2)) * math.sqrt(0.1184) * 100
    assert sgt.lower[0] == pytest.approx(40 - half) and sgt.upper[0] == pytest.approx(40 + half)
    assert sgt.upper[0] - sgt.mean[0] > 20 * SQRT2  # wider than the old "± std"
    [interval] = sgt.intervals
    assert interval is not None and interval.method == UNPAIRED_DELTA
    # prp: 0 % and -10 %
    assert prp.mean[0] == pytest.approx(-5.0) and prp.lower[0] < -5 - 5 * SQRT2
    assert llama.base[0] == pytest.approx(0.5)
    # qwen's baseline mean is 0: no bars, and a note that says why.
    assert qwen.traces == [] and qwen.base[0] == 0.0
    assert (
        "qwen · Validation reward@1: the standalone mean is 0, so the relative improvement "
        "is undefined; its bars are left out"
    ) in notes


def test_runs_paired_by_seed_get_the_paired_delta_interval() -> None:
    seed_of = {1: 0, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1}
    [llama] = bars.relative(
        groups=[STANDALONE, PRP, SGT],
        policies=["llama"],
        metrics=[VAL],
        baseline="standalone",
        values=relative_values(),
        seed_of=seed_of,
    )
    _, sgt = llama.traces
    # d = x - b = (0.2, 0.2), b = (0.4, 0.6): R = 40 %, e = d - 0.4 b = (0.04, -0.04),
    # se = sd(e) / sqrt(2) / 0.5 * 100 = 8.0, t_{0.975, 1} = 12.706.
    assert sgt.mean[0] == pytest.approx(40.0)
    assert sgt.lower[0] == pytest.approx(40 - t_975(1) * 8.0)
    assert sgt.upper[0] == pytest.approx(40 + t_975(1) * 8.0)
    assert sgt.intervals[0] is not None and sgt.intervals[0].method == PAIRED_DELTA
    note = bars.interval_note([llama])
    assert note == (
        "Error bars: 95% interval, paired delta method, 2 seeds (the baseline's variance included)."
    )
    # A seed with two runs in a group cannot pair: unpaired, and the note names each kind.
    seed_of[2] = 0
    [mixed] = bars.relative(
        groups=[STANDALONE, PRP, SGT],
        policies=["llama"],
        metrics=[VAL],
        baseline="standalone",
        values=relative_values(),
        seed_of=seed_of,
    )
    assert {t.intervals[0].method for t in mixed.traces} == {UNPAIRED_DELTA}  # type: ignore[union-attr]
    assert bars.interval_note([mixed]).startswith(
        "Error bars: 95% interval, unpaired delta method, 2 vs 2 runs"
    )


def test_one_run_gives_a_bar_without_an_interval_and_the_note_says_so() -> None:
    values = {
        (1, "llama", VAL): FinalValue(0.5, 9),
        (2, "llama", VAL): FinalValue(0.4, 9),
        (3, "llama", VAL): FinalValue(0.6, 9),
    }
    groups = [STANDALONE, Group("sgt", "#009E73", "solid", [3])]
    [panel] = bars.relative(
        groups=groups, policies=["llama"], metrics=[VAL], baseline="standalone", values=values
    )
    [trace] = panel.traces
    assert trace.mean[0] == pytest.approx(100 / 3) and math.isnan(trace.lower[0])
    assert bars.interval_note([panel]) == (
        "Error bars: none; a bar without one rests on too few runs for an interval."
    )


def test_a_negative_baseline_keeps_better_positive() -> None:
    values = {
        (1, "llama", VAL): FinalValue(-0.5, 9),
        (3, "llama", VAL): FinalValue(-0.25, 9),
    }
    groups = [Group("standalone", "#000000", "solid", [1]), Group("sgt", "#009E73", "solid", [3])]
    [panel] = bars.relative(
        groups=groups, policies=["llama"], metrics=[VAL], baseline="standalone", values=values
    )
    assert panel.traces[0].mean[0] == pytest.approx(50.0)  # (-0.25 + 0.5) / 0.5


def test_relative_notes_a_baseline_without_values() -> None:
    values = {key: v for key, v in relative_values().items() if key[0] not in (1, 2)}
    notes: list[str] = []
    [panel] = bars.relative(
        groups=[STANDALONE, SGT],
        policies=["llama"],
        metrics=[VAL],
        baseline="standalone",
        values=values,
        notes=notes,
    )
    assert panel.traces == [] and math.isnan(panel.base[0])
    assert "llama · Validation reward@1: no standalone run has a value, so no bars" in notes


def test_the_baseline_defaults_to_standalone_and_must_be_a_group() -> None:
    groups = [STANDALONE, SGT]
    assert bars.choose_baseline(groups, "", {}) == "standalone"
    assert bars.choose_baseline(groups, "sgt", {}) == "sgt"
    with pytest.raises(SpecError, match=r"^baseline: no group 'xgrpo'"):
        bars.choose_baseline(groups, "xgrpo", {})
    # Grouped by something else: the group whose runs are all standalone runs.
    by_seed = [Group("0", "#0072B2", "solid", [1, 3]), Group("none", "#D55E00", "solid", [2, 4])]
    regimes = {1: "sgt", 2: "standalone", 3: "sgt", 4: "standalone"}
    assert bars.choose_baseline(by_seed, "", regimes) == "none"
    notes: list[str] = []
    assert bars.choose_baseline(by_seed, "", {}, notes) == "0"
    assert notes and notes[0].startswith("no standalone group")


def test_eval_suites_list_tasks_by_name() -> None:
    keys = [
        "eval/synthetic/larger/accuracy",
        "eval/synthetic/arith-addition/accuracy",
        "eval/synthetic/larger/acc_norm",
        "eval/synthetic/larger/n",
        "eval/mmlu/abstract_algebra/accuracy",
        "val/reward@1",
        "eval/bad/accuracy",
    ]
    assert bars.eval_suites(keys) == {
        "mmlu": ["abstract_algebra"],
        "synthetic": ["arith-addition", "larger"],
    }
    assert bars.eval_suites(keys, "acc_norm") == {"synthetic": ["larger"]}


def spec() -> ComparisonSpec:
    return ComparisonSpec(runs=(1, 2))


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("view=curves", "view"),
        ("view=pie", "view"),
        ("suite=no spaces", "suite"),
        ("score=f1", "score"),
        ("baseline=" + "x" * 201, "baseline"),
    ],
)
def test_bad_bar_options_name_the_parameter(query: str, parameter: str) -> None:
    with pytest.raises(SpecError, match=f"^{parameter}: "):
        bars.BarOptions.from_query(QueryDict(query), spec())


def test_bar_options_read_and_write_the_query() -> None:
    options = bars.BarOptions.from_query(QueryDict(""), spec())
    assert options == bars.BarOptions(view="tasks", metrics=(VAL,))
    query = "view=relative&baseline=sgt&metric=train/reward_mean&metric=val/reward@1"
    chosen = ComparisonSpec.from_query(QueryDict("runs=1,2&" + query))
    options = bars.BarOptions.from_query(QueryDict(query), chosen)
    assert options.metrics == ("train/reward_mean", VAL) and options.baseline == "sgt"
    assert bars.full_query(chosen, options).endswith("&view=relative&baseline=sgt")
    tasks = bars.BarOptions.from_query(QueryDict("suite=mmlu&score=acc_norm"), spec())
    assert tasks.query_pairs() == [("view", "tasks"), ("suite", "mmlu"), ("score", "acc_norm")]

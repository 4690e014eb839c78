"""The comparison's pure assembler (webapp.compare.assemble) on arrays made by hand: no
database. Bucketing, the x from a counter, the smoothing, a group's mean and band, and
the summary table, each checked against values computed by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from webapp.compare import assemble
from webapp.compare.assemble import Buckets, Group
from webapp.compare.spec import ComparisonSpec
from webapp.compare.stats import RunSummary, t_975

VAL = "val/reward@1"
POLICY = "llama"


def bucketed(steps: list[int], values: list[float], lo: int, hi: int, size: int) -> Buckets:
    """One series' buckets from :func:`assemble.buckets_of` (wall times not loaded), by
    arithmetic and by the grid's table, which agree."""
    args = (np.array(steps, dtype=np.int64), np.array(values, dtype=float), None, lo, hi, size)
    found = assemble.buckets_of(*args)
    tabled = assemble.buckets_of(*args, table=assemble.bucket_table(lo, hi, size))
    for name in ("present", "step", "value", "wall"):
        np.testing.assert_array_equal(getattr(tabled, name), getattr(found, name))
    return found


def on_grid(values: list[float]) -> Buckets:
    """A series with one point per bucket at step = bucket index (NaN: no point)."""
    value = np.array(values, dtype=float)
    present = ~np.isnan(value)
    step = np.where(present, np.arange(value.size, dtype=float), np.nan)
    return Buckets(present, step, value, np.full(value.size, np.nan), math.nan)


def assembled(
    curves: dict[int, Buckets], grid: int, **spec: object
) -> tuple[assemble.Comparison, assemble.Trace]:
    """The comparison of one group "sgt" of runs 1, 2, ... with ``curves[run]`` as their
    series of val/reward@1 for llama, and its one trace."""
    runs = tuple(sorted(curves))
    options: dict[str, object] = {"metrics": (VAL,), "policies": (POLICY,), **spec}
    comparison = assemble.comparison_assemble(
        spec=ComparisonSpec(runs=runs, **options),
        runs=[],
        groups=[Group("sgt", "#009E73", "solid", list(runs))],
        policies=[POLICY],
        index={(run, POLICY, VAL): 10 + run for run in runs},
        found={10 + run: curve for run, curve in curves.items()},
        grid=grid,
        notes=[],
    )
    [panel] = comparison.panels
    [trace] = panel.traces
    return comparison, trace


# --------------------------------------------------------------------------- buckets


def test_two_runs_on_different_step_grids_share_the_common_buckets() -> None:
    # lo = 0, hi = 9, 5 buckets: b = step * 5 // 10, i.e. steps {0, 1}, {2, 3}, ... .
    # Run 1 logs every step (value = step); run 2 every third step (value = 10 * step):
    # steps 0, 3, 6, 9 land in buckets 0, 1, 3, 4 and bucket 2 stays empty.
    every = bucketed(list(range(10)), [float(s) for s in range(10)], 0, 9, 5)
    third = bucketed([0, 3, 6, 9], [0.0, 30.0, 60.0, 90.0], 0, 9, 5)

    assert every.present.all()
    np.testing.assert_array_equal(every.step, [0.5, 2.5, 4.5, 6.5, 8.5])
    np.testing.assert_array_equal(every.value, [0.5, 2.5, 4.5, 6.5, 8.5])
    np.testing.assert_array_equal(third.present, [True, True, False, True, True])
    np.testing.assert_array_equal(third.step, [0.0, 3.0, np.nan, 6.0, 9.0])
    np.testing.assert_array_equal(third.value, [0.0, 30.0, np.nan, 60.0, 90.0])
    assert np.isnan(every.wall).all() and math.isnan(every.wall_first)

    comparison, trace = assembled({1: every, 2: third}, grid=5)

    assert comparison.grid == 5 and comparison.notes == []
    # x: the mean step of the runs with a point in the bucket; bucket 2 has run 1 only.
    np.testing.assert_allclose(trace.x, [0.25, 2.75, 4.5, 6.25, 8.75])
    np.testing.assert_allclose(trace.mean, [0.25, 16.25, 4.5, 33.25, 49.25])
    np.testing.assert_array_equal(trace.n, [2, 2, 1, 2, 2])
    # std of two values a, b (ddof = 1) is |a - b| / sqrt(2); one run has no spread.
    half = np.array([0.5, 27.5, 0.0, 53.5, 81.5]) / math.sqrt(2)
    np.testing.assert_allclose(trace.lower, trace.mean - half)
    np.testing.assert_allclose(trace.upper, trace.mean + half)
    np.testing.assert_allclose(trace.raw_mean, trace.mean)


def test_the_python_reference_gives_the_same_buckets_with_wall_times() -> None:
    # Steps 2..7 of one series on 3 buckets over [2, 7]: b = (step - 2) * 3 // 6.
    # Wall times 100 + step except at step 5 (unknown); a None value counts as NaN.
    rows = [(7, s, None if s == 6 else s * 2.0, None if s == 5 else 100.0 + s) for s in range(2, 8)]
    [python] = assemble.buckets_from_rows(rows, [7], 2, 7, 3).values()
    numpy = assemble.buckets_of(
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([math.nan if r[2] is None else r[2] for r in rows]),
        np.array([math.nan if r[3] is None else r[3] for r in rows]),
        2,
        7,
        3,
    )

    for found in (python, numpy):
        np.testing.assert_array_equal(found.step, [2.5, 4.5, 6.5])
        np.testing.assert_array_equal(found.value, [5.0, 9.0, np.nan])  # NaN propagates
        np.testing.assert_array_equal(found.wall, [102.5, 104.0, 106.5])  # step 5 left out
        assert found.wall_first == 102.0


# --------------------------------------------------------------------------- x, EMA


def test_a_counter_is_interpolated_at_the_mean_steps_and_extended_only_where_it_is() -> None:
    # The counter's bucket means (1, 10), (3, 30), plus (0, 0) before any rollout: at the
    # curve's steps 0 and 2 it reads 0 and 20. Step 4 is past its last mean: the line
    # through the two nearest gives 40 where the counter has points in that bucket, and
    # no x (NaN) where it has none.
    curve = Buckets(
        np.array([True, True, True]),
        np.array([0.0, 2.0, 4.0]),
        np.array([1.0, 2.0, 3.0]),
        np.full(3, np.nan),
        math.nan,
    )
    with_last = on_grid([10.0, 30.0, 35.0])
    with_last.step[:] = [1.0, 3.0, 3.5]  # (3.5, 35): slope 10 past it, 35 + 0.5 * 10
    without_last = on_grid([10.0, 30.0, math.nan])
    without_last.step[:2] = [1.0, 3.0]

    np.testing.assert_allclose(assemble.counter_x(curve, with_last), [0.0, 20.0, 40.0])
    np.testing.assert_allclose(assemble.counter_x(curve, without_last), [0.0, 20.0, np.nan])


def test_the_smoothing_is_tensorboards_debiased_ema_over_the_points_a_run_has() -> None:
    # Weight 0.5 over the values 2, (no point), 4, 8; s_k = 0.5 s_{k-1} + 0.5 y_k, s_0 = 0,
    # shown as s_k / (1 - 0.5^k) with k counting the points only:
    # s_1 = 1 -> 1 / 0.5 = 2; s_2 = 2.5 -> 2.5 / 0.75 = 10/3; s_3 = 5.25 -> 5.25 / 0.875 = 6.
    _, trace = assembled({1: on_grid([2.0, math.nan, 4.0, 8.0])}, grid=4, smooth=0.5)

    np.testing.assert_array_equal(trace.x, [0.0, 2.0, 3.0])  # the empty bucket is left out
    np.testing.assert_allclose(trace.mean, [2.0, 10.0 / 3.0, 6.0])
    np.testing.assert_array_equal(trace.raw_mean, [2.0, 4.0, 8.0])
    np.testing.assert_allclose(trace.lower, trace.mean)  # one run: no band
    np.testing.assert_array_equal(trace.n, [1, 1, 1])


# --------------------------------------------------------------------------- bands


THREE_RUNS = {1: on_grid([1.0, 4.0]), 2: on_grid([2.0, 6.0]), 3: on_grid([3.0, 11.0])}
# Means 2 and 7; sample stds: bucket 0 sqrt(((-1)^2 + 0 + 1^2) / 2) = 1, bucket 1
# sqrt(((-3)^2 + (-1)^2 + 4^2) / 2) = sqrt(13).
MEAN, STD = np.array([2.0, 7.0]), np.array([1.0, math.sqrt(13.0)])


@pytest.mark.parametrize(
    ("band", "lower", "upper"),
    [
        ("std", MEAN - STD, MEAN + STD),
        ("minmax", [1.0, 4.0], [3.0, 11.0]),
        (
            "ci95",
            MEAN - t_975(2) * STD / math.sqrt(3.0),
            MEAN + t_975(2) * STD / math.sqrt(3.0),
        ),
        ("none", [2.0, 7.0], [2.0, 7.0]),
    ],
)
def test_a_groups_mean_and_band(band: str, lower: list[float], upper: list[float]) -> None:
    comparison, trace = assembled(THREE_RUNS, grid=2, band=band)

    np.testing.assert_allclose(trace.mean, [2.0, 7.0])
    np.testing.assert_allclose(trace.lower, lower)
    np.testing.assert_allclose(trace.upper, upper)
    np.testing.assert_array_equal(trace.n, [3, 3])
    assert t_975(2) == pytest.approx(4.302653)
    assert comparison.ci_note is None and comparison.notes == []  # n = 3: no note


def test_a_95_ci_over_two_runs_is_noted_and_a_missing_run_too() -> None:
    curves = {1: THREE_RUNS[1], 2: THREE_RUNS[2]}
    comparison = assemble.comparison_assemble(
        spec=ComparisonSpec(runs=(1, 2, 3), metrics=(VAL,), policies=(POLICY,), band="ci95"),
        runs=[],
        groups=[Group("sgt", "#009E73", "solid", [1, 2, 3])],
        policies=[POLICY],
        index={(run, POLICY, VAL): 10 + run for run in curves},
        found={10 + run: curve for run, curve in curves.items()},
        grid=2,
        notes=[],
    )

    assert comparison.notes[0] == "llama / Validation reward@1: no data in run(s) 3"
    assert comparison.ci_note is not None and "sgt (n = 2)" in comparison.ci_note
    assert comparison.notes[-1] == comparison.ci_note


def test_no_points_give_empty_panels_and_a_note() -> None:
    comparison = assemble.comparison_assemble(
        spec=ComparisonSpec(runs=(1,), metrics=(VAL,), policies=(POLICY,)),
        runs=[],
        groups=[Group("sgt", "#009E73", "solid", [1])],
        policies=[POLICY],
        index={},
        found={},
        grid=0,
        notes=[],
    )

    assert comparison.grid == 0 and [p.traces for p in comparison.panels] == [[]]
    assert comparison.notes == ["no points of these metrics and policies in these runs"]


# --------------------------------------------------------------------------- summary


def test_the_summary_from_rows_to_the_best_group() -> None:
    # Series 11, 12 (group "a", runs 1, 2) and 13 (group "b", run 3), by step:
    # 11: 0.1, 0.5, 0.3 -> final 0.3, best 0.5, mean 0.3
    # 12: 0.2, 0.4, NaN -> final 0.4, best 0.4, mean 0.3 (NaN skipped)
    # 13: 0.3, 0.6, None -> final 0.6, best 0.6, mean 0.45 (None is NaN)
    rows = [(11, 0.1), (11, 0.5), (11, 0.3), (12, 0.2), (12, 0.4), (12, math.nan)]
    rows += [(13, 0.3), (13, 0.6), (13, None)]
    per_series = assemble.summaries_from_rows(rows, [11, 12, 13], lower_is_better=False)
    assert (per_series[12].final, per_series[12].best) == (0.4, 0.4)
    assert per_series[12].mean == pytest.approx(0.3)
    assert per_series[13] == RunSummary(0.6, 0.6, pytest.approx(0.45))  # type: ignore[arg-type]

    summary = assemble.summary_assemble(
        metric=VAL,
        groups=[Group("a", "#000000", "solid", [1, 2]), Group("b", "#E69F00", "solid", [3])],
        policies=[POLICY],
        index={(1, POLICY): 11, (2, POLICY): 12, (3, POLICY): 13},
        per_series=per_series,
        lower_is_better=False,
        notes=[],
    )

    a, b = summary.rows[0].cells
    assert a.final.mean == pytest.approx(0.35) and a.final.std == pytest.approx(math.sqrt(0.005))
    assert a.best.mean == pytest.approx(0.45) and a.best.n == 2
    assert (b.final.mean, b.final.std, b.final.n) == (pytest.approx(0.6), None, 1)
    assert summary.best == {"final": {POLICY: "b"}, "best": {POLICY: "b"}, "mean": {POLICY: "b"}}
    assert summary.notes == []

"""The comparison's pure parts: EMA, bands, summary statistics, grouping, palette."""

from __future__ import annotations

import math

import numpy as np
import pytest

from webapp.compare import grouping, palette
from webapp.compare.stats import aggregate, ema, mean_std_n, run_summary, t_975

NAN, INF = math.nan, math.inf


def reference_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's debiased EMA, written as the plain loop of its scalar dashboard."""
    out, last, accumulated = [], 0.0, 0
    for value in values:
        if not math.isfinite(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        accumulated += 1
        out.append(last / (1 - weight**accumulated))
    return out


# --------------------------------------------------------------------------- EMA


def test_ema_matches_hand_computed_values() -> None:
    # s = 0.5, 1.25, 2.125; debiased by 1 - 0.5^k = 0.5, 0.75, 0.875
    assert ema([1.0, 2.0, 3.0], 0.5) == pytest.approx([1.0, 1.25 / 0.75, 2.125 / 0.875])


@pytest.mark.parametrize("weight", [0.0, 0.3, 0.6, 0.9, 0.99])
def test_ema_matches_the_reference_loop(weight: float) -> None:
    rng = np.random.default_rng(7)
    values = rng.normal(size=300).tolist()
    for i in (0, 5, 6, 120, 299):
        values[i] = NAN
    values[50], values[51] = INF, -INF
    got = ema(values, weight)
    want = reference_ema(values, weight)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def numpy_loop_ema(curves: np.ndarray, weight: float) -> np.ndarray:
    """The EMA as the product computed it before issue 35: a numpy step per column."""
    out, state, count = curves.copy(), np.zeros(curves.shape[:-1]), np.zeros(curves.shape[:-1])
    for t in range(curves.shape[-1]):
        column = curves[..., t]
        finite = np.isfinite(column)
        state = np.where(
            finite, weight * state + (1.0 - weight) * np.where(finite, column, 0), state
        )
        count = count + finite
        out[..., t] = np.where(finite, state / (1.0 - weight ** np.maximum(count, 1.0)), column)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_ema_gives_the_numpy_loops_bits_for_every_row(seed: int) -> None:
    """The compiled recursion (scipy's lfilter over each row's finite values) gives the
    numbers the numpy loop it replaced gave, bit for bit, gaps, infinities, all-finite
    and all-empty rows included; and the plain loop's to 1e-12 (the debiasing's powers
    come from numpy's pow, not Python's: they may differ in the last bit)."""
    rng = np.random.default_rng(seed)
    rows, width = int(rng.integers(1, 12)), int(rng.integers(1, 400))
    curves = rng.normal(size=(rows, width)) * 10.0 ** int(rng.integers(-4, 7))
    curves[rng.random(curves.shape) < rng.choice([0.0, 0.05, 0.5])] = NAN
    curves[rng.random(curves.shape) < 0.01] = INF
    curves[0] = NAN if seed % 3 == 0 else curves[0]
    weight = float(rng.choice([0.1, 0.6, 0.9, 0.99, 0.999]))
    got = ema(curves, weight)
    np.testing.assert_array_equal(got, numpy_loop_ema(curves, weight))
    want = np.array([reference_ema(row.tolist(), weight) for row in curves])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(ema(curves[:1], weight)[0], ema(curves[0], weight))


def test_ema_skips_non_finite_values_and_passes_them_through() -> None:
    got = ema([NAN, 2.0, NAN, 4.0, INF], 0.5)
    assert math.isnan(got[0]) and math.isnan(got[2]) and got[4] == INF
    # The first finite value is the first output: debiasing counts finite values only.
    assert got[1] == 2.0
    # s = 0.5 * 2 = 1 then 0.5 * 1 + 0.5 * 4 = 2.5, debiased by 1 - 0.5^2
    assert got[3] == pytest.approx(2.5 / 0.75)


def test_ema_of_a_constant_is_the_constant_and_rows_are_independent() -> None:
    curves = np.array([[3.0] * 50, np.linspace(0, 1, 50)])
    got = ema(curves, 0.9)
    np.testing.assert_allclose(got[0], 3.0)
    np.testing.assert_allclose(got[1], reference_ema(curves[1].tolist(), 0.9))


def test_ema_weight_zero_is_the_identity_and_bad_weights_raise() -> None:
    values = [1.0, NAN, 3.0]
    np.testing.assert_array_equal(ema(values, 0.0), np.array(values))
    for weight in (-0.1, 1.0, 2.0):
        with pytest.raises(ValueError, match="weight"):
            ema(values, weight)


# --------------------------------------------------------------------------- bands

CURVES = np.array(
    [
        [1.0, 2.0, NAN, NAN],
        [3.0, 6.0, NAN, INF],
        [5.0, NAN, 4.0, NAN],
    ]
)


def test_std_band_is_mean_plus_minus_sample_std_over_finite_runs() -> None:
    band = aggregate(CURVES, "std")
    assert band.n.tolist() == [3, 2, 1, 0]
    assert band.mean[:3].tolist() == [3.0, 4.0, 4.0]
    # column 0: 1, 3, 5 -> sample std 2; column 1: 2, 6 -> sqrt(8)
    assert band.lower[:3] == pytest.approx([1.0, 4.0 - math.sqrt(8), 4.0])
    assert band.upper[:3] == pytest.approx([5.0, 4.0 + math.sqrt(8), 4.0])
    assert math.isnan(band.mean[3]) and math.isnan(band.lower[3]) and math.isnan(band.upper[3])


def test_minmax_band_spans_the_runs() -> None:
    band = aggregate(CURVES, "minmax")
    assert band.lower[:3].tolist() == [1.0, 2.0, 4.0]
    assert band.upper[:3].tolist() == [5.0, 6.0, 4.0]
    assert math.isnan(band.lower[3])


def test_ci95_band_uses_student_t() -> None:
    band = aggregate(CURVES, "ci95")
    half0 = 4.302653 * 2.0 / math.sqrt(3)  # t_{.975, 2} * s / sqrt(n)
    half1 = 12.706205 * math.sqrt(8) / math.sqrt(2)  # t_{.975, 1}
    assert band.lower[:3] == pytest.approx([3.0 - half0, 4.0 - half1, 4.0], rel=1e-6)
    assert band.upper[:3] == pytest.approx([3.0 + half0, 4.0 + half1, 4.0], rel=1e-6)


def test_no_band_and_a_single_run_collapse_to_the_mean() -> None:
    mean, lower, upper, n = aggregate(CURVES, "none")
    np.testing.assert_array_equal(lower[:3], mean[:3])
    np.testing.assert_array_equal(upper[:3], mean[:3])
    assert n.tolist() == [3, 2, 1, 0]
    single = aggregate(np.array([[1.0, 2.0]]), "std")
    assert single.lower.tolist() == single.upper.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="band"):
        aggregate(CURVES, "iqr")


def t_quantile_numerically(df: int) -> float:
    """Bisection on Student's t CDF, integrated with the trapezoid rule."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 20001)
        return 0.5 + float(np.trapezoid(c * (1 + x * x / df) ** (-(df + 1) / 2), x))

    low, high = 0.0, 20.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < 0.975 else (low, mid)
    return (low + high) / 2


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 29, 30, 31, 40, 60, 200])
def test_t_quantiles_match_a_numerical_inverse(df: int) -> None:
    assert t_975(df) == pytest.approx(t_quantile_numerically(df), abs=2e-5)


# --------------------------------------------------------------------------- summary


def test_run_summary_takes_last_best_and_mean_of_finite_values() -> None:
    values = [NAN, 0.2, 0.5, INF, 0.3, NAN]
    summary = run_summary(values)
    assert (summary.final, summary.best) == (0.3, 0.5)
    assert summary.mean == pytest.approx((0.2 + 0.5 + 0.3) / 3)
    assert run_summary(values, lower_is_better=True).best == 0.2
    empty = run_summary([NAN, NAN])
    assert math.isnan(empty.final) and math.isnan(empty.best) and math.isnan(empty.mean)


def test_mean_std_n_over_runs_uses_sample_std() -> None:
    result = mean_std_n([0.3, 0.5, NAN])
    assert (result.mean, result.n) == (pytest.approx(0.4), 2)
    assert result.std == pytest.approx(math.sqrt(0.02))
    assert mean_std_n([0.3]).std is None
    assert mean_std_n([]).mean is None and mean_std_n([]).n == 0


# --------------------------------------------------------------------------- grouping


def test_group_labels_come_from_dotted_config_paths() -> None:
    config = {
        "regime": "sgt",
        "grpo": {"kl_coef": 0.001},
        "seed": 3,
        "remix": {"enabled": True},
        "pool": [{"name": "llama"}],
    }
    assert grouping.group_label(config, "exp", "regime") == "sgt"
    assert grouping.group_label(config, "exp", "grpo.kl_coef") == "0.001"
    assert grouping.group_label(config, "exp", "seed") == "3"
    assert grouping.group_label(config, "exp", "remix.enabled") == "true"
    assert grouping.group_label(config, "exp", "pool.0.name") == "llama"
    assert grouping.group_label(config, "exp", "grpo.missing") == grouping.MISSING
    assert grouping.group_label(config, "exp-name", "experiment") == "exp-name"


def test_groups_are_ordered_regimes_first_then_numbers_then_text() -> None:
    labels = ["zeta", "sgt", "0.01", grouping.MISSING, "standalone", "0.001", "alpha", "prp"]
    assert grouping.ordered([*labels, "sgt"]) == [
        "standalone",
        "prp",
        "sgt",
        "0.001",
        "0.01",
        "alpha",
        "zeta",
        grouping.MISSING,
    ]


# --------------------------------------------------------------------------- palette


def test_each_regime_always_gets_its_own_colour() -> None:
    alone = palette.styles_for(["sgt"])
    mixed = palette.styles_for(["standalone", "prp", "xgrpo", "sgt", "custom"])
    assert alone["sgt"] == mixed["sgt"] == palette.Style(palette.BLUISH_GREEN)
    assert mixed["standalone"].colour == palette.BLACK
    assert mixed["custom"].colour == palette.BLUE


def test_other_labels_take_free_colours_then_dashes() -> None:
    labels = [f"g{i}" for i in range(10)]
    styles = palette.styles_for(labels)
    firsts = [styles[label].colour for label in labels[:8]]
    assert len(set(firsts)) == 8
    assert all(styles[label].dash == "solid" for label in labels[:8])
    assert styles["g8"].dash != "solid"
    assert len({(s.colour, s.dash) for s in styles.values()}) == 10

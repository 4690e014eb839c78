"""trainer/stats.py against numbers computed by hand (the arithmetic is in each test).

Student t with 4 degrees of freedom has a closed-form distribution function: with
tan(theta) = t / 2, P(|T| > t) = 1 - sin(theta) * (1 + cos(theta)^2 / 2), which is how
the p-values below are computed without scipy.
"""

from __future__ import annotations

import math

import pytest

from trainer import stats
from trainer.stats import (
    NO_BASELINE,
    NO_VALUE,
    PAIRED,
    WELCH,
    ZERO_BASELINE,
    Interval,
    holm,
    paired_t,
    relative_improvement,
    sentence,
    t_critical,
    welch,
)

T_975_4 = 2.776445  # t_{0.975, 4}, from a printed table


def p_two_sided_df4(t: float) -> float:
    """P(|T_4| > |t|) in closed form (see the module docstring)."""
    theta = math.atan(abs(t) / 2.0)
    return 1.0 - math.sin(theta) * (1.0 + math.cos(theta) ** 2 / 2.0)


def test_the_t_quantile_is_the_printed_tables() -> None:
    assert t_critical(4) == pytest.approx(T_975_4, abs=1e-6)
    assert t_critical(1) == pytest.approx(12.706205, abs=1e-6)
    assert t_critical(30) == pytest.approx(2.042272, abs=1e-6)
    assert t_critical(4, level=0.90) == pytest.approx(2.131847, abs=1e-6)  # t_{0.95, 4}
    with pytest.raises(ValueError, match="df must be > 0"):
        t_critical(0)


def test_a_paired_t_interval_by_hand() -> None:
    # d = [0.1, 0.2, 0.3, 0.2, 0.2]: mean 0.2; deviations -0.1, 0, 0.1, 0, 0, so the sum
    # of squares is 0.02, the variance 0.02 / 4 = 0.005, sd = sqrt(0.005) = 0.0707107,
    # se = sd / sqrt(5) = 0.0316228; half-width 2.776445 * 0.0316228 = 0.0877989.
    found = paired_t([0.1, 0.2, 0.3, 0.2, 0.2])
    se = math.sqrt(0.005) / math.sqrt(5)
    assert se == pytest.approx(0.0316228, abs=1e-7)
    assert found.method == PAIRED and found.n == 5 and found.df == 4 and found.n_other == 0
    assert found.estimate == pytest.approx(0.2)
    assert found.low == pytest.approx(0.2 - 0.0877989, abs=1e-6)  # 0.112201
    assert found.high == pytest.approx(0.2 + 0.0877989, abs=1e-6)  # 0.287799
    # t = 0.2 / 0.0316228 = 6.324555 (t^2 = 40): tan(theta) = sqrt(10), sin(theta) =
    # sqrt(10/11), cos(theta)^2 = 1/11, p = 1 - sqrt(10/11) * 23/22 = 0.0031982.
    assert found.p == pytest.approx(1 - math.sqrt(10 / 11) * 23 / 22, rel=1e-6)
    assert found.p == pytest.approx(p_two_sided_df4(0.2 / se), rel=1e-6)
    assert found.p == pytest.approx(0.0031982, abs=1e-7)
    assert found.has_interval and not found.includes_zero and found.p_adjusted is None


def test_one_pair_gives_the_estimate_and_no_interval() -> None:
    found = paired_t([0.3])
    assert found.estimate == pytest.approx(0.3) and found.n == 1 and found.df == 0
    assert math.isnan(found.low) and math.isnan(found.high) and math.isnan(found.p)
    assert not found.has_interval and found.includes_zero


def test_identical_differences_give_a_point_and_no_test() -> None:
    # sd = 0: the interval is the point, and there is no test (a spread of 0 is not
    # certainty): p is NaN, so Holm leaves it out of the family.
    found = paired_t([0.25, 0.25, 0.25])
    assert (found.low, found.high) == (0.25, 0.25) and found.no_spread
    assert math.isnan(found.p) and found.has_interval
    assert math.isnan(paired_t([0.0, 0.0]).p) and paired_t([0.0, 0.0]).no_spread
    # Float rounding of x - b is no spread: 0.51 - 0.50 and 0.41 - 0.40 differ in the
    # 17th digit (the reviewer's "0.010 [0.010, 0.010] (p < 0.001)").
    rounded = paired_t([0.51 - 0.50, 0.41 - 0.40])
    assert 0.51 - 0.50 != 0.41 - 0.40 and rounded.no_spread and math.isnan(rounded.p)
    # Both Welch samples constant: no test either; one of them constant is a test.
    assert welch([0.3, 0.3], [0.1, 0.1]).no_spread
    assert math.isnan(welch([0.3, 0.3], [0.1, 0.1]).p)
    assert not welch([0.3, 0.3], [0.1, 0.2]).no_spread
    assert math.isfinite(welch([0.3, 0.3], [0.1, 0.2]).p)
    # Holm counts only the tested: m = 2 here.
    adjusted = holm([0.01, paired_t([0.2, 0.2]).p, 0.02])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])


def test_non_finite_or_no_values_are_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="finite"):
        paired_t([0.1, math.nan, 0.2])
    with pytest.raises(ValueError, match="no pairs"):
        paired_t([])
    with pytest.raises(ValueError, match="finite"):
        welch([0.1, 0.2], [math.inf, 0.3])
    with pytest.raises(ValueError, match="at least one value"):
        welch([], [0.3])


def test_welch_with_equal_variances_by_hand() -> None:
    # a = [12, 14, 16]: mean 14, variance (4 + 0 + 4) / 2 = 4; b = [1, 3, 5]: mean 3,
    # variance 4. va/na = vb/nb = 4/3, se^2 = 8/3, se = 1.632993; Welch-Satterthwaite
    # df = (8/3)^2 / ((4/3)^2 / 2 + (4/3)^2 / 2) = (64/9) / (16/9) = 4.
    found = welch([12.0, 14.0, 16.0], [1.0, 3.0, 5.0])
    se = math.sqrt(8 / 3)
    assert found.method == WELCH and (found.n, found.n_other) == (3, 3)
    assert found.df == pytest.approx(4.0)
    assert found.estimate == pytest.approx(11.0)
    # half-width 2.776445 * 1.632993 = 4.533916: [6.466084, 15.533916]
    assert found.low == pytest.approx(11.0 - T_975_4 * se, abs=1e-5)
    assert found.low == pytest.approx(6.466084, abs=1e-5)
    assert found.high == pytest.approx(15.533916, abs=1e-5)
    # t = 11 / 1.632993 = 6.736097
    assert found.p == pytest.approx(p_two_sided_df4(11.0 / se), rel=1e-6)


def test_welch_with_unequal_variances_by_hand() -> None:
    # a = [0.5, 0.7, 0.6]: mean 0.6, variance (0.01 + 0.01 + 0) / 2 = 0.01, va/na = 0.01/3;
    # b = [0.2, 0.4]: mean 0.3, variance 0.02 / 1 = 0.02, vb/nb = 0.01.
    # se^2 = 0.01/3 + 0.01 = 0.04/3; df = (0.04/3)^2 / ((0.01/3)^2 / 2 + 0.01^2 / 1)
    #      = (0.0016/9) / (0.0001/18 + 0.0001) = (0.0016/9) / (0.0019/18) = 32/19 = 1.6842.
    found = welch([0.5, 0.7, 0.6], [0.2, 0.4])
    assert found.estimate == pytest.approx(0.3)
    assert found.df == pytest.approx(32 / 19)
    se = math.sqrt(0.04 / 3)
    assert found.high - found.estimate == pytest.approx(t_critical(32 / 19) * se)
    assert found.includes_zero  # t_{0.975, 1.68} is about 5.2, the half-width about 0.6


def test_welch_with_a_group_of_one_run_has_no_interval() -> None:
    found = welch([0.9], [0.2, 0.4])
    assert found.estimate == pytest.approx(0.6) and (found.n, found.n_other) == (1, 2)
    assert not found.has_interval and math.isnan(found.p) and math.isnan(found.df)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 (m = 3): 3 * 0.01 = 0.03, 2 * 0.03 = 0.06, 1 * 0.04 = 0.04,
    # which the running maximum raises to 0.06; back in the given order:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # capped at 1: 2 * 0.5 = 1.0, then max(1.0, 0.6) = 1.0
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    # a NaN passes through and does not count in m: m = 2, 2 * 0.01 = 0.02, 1 * 0.02
    found = holm([0.02, math.nan, 0.01])
    assert found[0] == pytest.approx(0.02) and math.isnan(found[1]) and found[2] == 0.02
    assert holm([]) == [] and holm([0.04]) == [0.04]


def test_holm_is_monotone_in_p_and_never_below_p() -> None:
    p = [0.2, 0.001, 0.04, 0.03, 0.5, 0.011]
    adjusted = holm(p)
    by_p = [adjusted[i] for i in sorted(range(len(p)), key=p.__getitem__)]
    assert by_p == sorted(by_p)
    assert all(a >= q for a, q in zip(adjusted, p, strict=True))
    assert all(a <= 1.0 for a in adjusted)


def test_relative_improvement_keeps_a_seed_whose_baseline_is_zero() -> None:
    # baseline [0.0, 0.5]: mean 0.25, the 0 counts. Per run (0.6 - 0.25) / 0.25 * 100 =
    # 140 and (0.7 - 0.25) / 0.25 * 100 = 180; their mean 160 = (0.65 - 0.25) / 0.25 * 100.
    # (Averaging per-seed ratios and dropping the seed with s = 0 gave 40.)
    found = relative_improvement([0.6, 0.7], [0.0, 0.5])
    assert found.defined and found.undefined == ""
    assert found.estimate == pytest.approx(160.0)
    assert found.per_run == pytest.approx((140.0, 180.0))
    assert (found.n, found.n_baseline, found.baseline_mean) == (2, 2, 0.25)


def test_relative_improvement_over_a_negative_baseline_keeps_the_sign_of_better() -> None:
    # (-1 - (-2)) / |-2| * 100 = +50: higher than the baseline reads as an improvement.
    assert relative_improvement([-1.0], [-2.0]).estimate == pytest.approx(50.0)


def test_a_zero_baseline_mean_is_undefined_not_filtered() -> None:
    found = relative_improvement([0.3, 0.4], [0.2, -0.2])
    assert not found.defined and found.undefined == ZERO_BASELINE
    assert math.isnan(found.estimate) and found.n == 2 and found.n_baseline == 2
    assert all(math.isnan(v) for v in found.per_run) and len(found.per_run) == 2
    assert relative_improvement([0.3], [0.0, 0.0]).undefined == ZERO_BASELINE
    assert relative_improvement([0.3], []).undefined == NO_BASELINE
    assert relative_improvement([math.nan], [0.5]).undefined == NO_VALUE


def test_a_run_without_a_value_is_counted_out_by_position() -> None:
    found = relative_improvement([0.6, math.nan], [0.5])
    assert found.n == 1 and found.estimate == pytest.approx(20.0)
    assert found.per_run[0] == pytest.approx(20.0) and math.isnan(found.per_run[1])


def interval(estimate: float, low: float, high: float, **kwargs: object) -> Interval:
    values: dict[str, object] = {"n": 5, "df": 4.0, "p": 0.001, "method": PAIRED} | kwargs
    return Interval(estimate, low, high, **values)  # type: ignore[arg-type]


WORDS = {"group": "SGT", "baseline": "standalone", "policy": "weak-carry", "metric": "val reward@1"}


def test_sentences() -> None:
    raised = interval(0.19, 0.12, 0.26).adjusted(0.004)
    assert sentence(raised, **WORDS) == (
        "SGT raises weak-carry's val reward@1 by 0.19 [0.12, 0.26] over standalone, "
        "5 seeds (paired t, Holm p = 0.004)"
    )
    lowered = interval(-0.19, -0.26, -0.12, p=0.0002)
    assert sentence(lowered, **WORDS) == (
        "SGT lowers weak-carry's val reward@1 by 0.19 [0.12, 0.26] over standalone, "
        "5 seeds (paired t, p < 0.001)"
    )
    unclear = interval(0.02, -0.05, 0.09, p=0.41, method=WELCH, n=5, n_other=4, df=6.8)
    assert sentence(unclear, **WORDS) == (
        "SGT does not clearly change weak-carry's val reward@1 over standalone (interval "
        "includes 0): +0.02 [-0.05, 0.09], 5 vs 4 runs (Welch, p = 0.41)"
    )


def test_the_verb_follows_holms_p_not_the_unadjusted_interval() -> None:
    # The reviewer's: "prp-no-is lowers gpt2-nohundreds's ... by 0.072 [0.050, 0.094]
    # ... (paired t, Holm p = 0.13)". The unadjusted interval excludes 0, Holm's p does
    # not clear 0.05: not significant after Holm, the interval labelled unadjusted.
    lowered = interval(-0.072, -0.094, -0.050, p=0.011).adjusted(0.13)
    text = sentence(lowered, **WORDS)
    assert "lowers" not in text and "raises" not in text
    assert text == (
        "SGT does not clearly change weak-carry's val reward@1 over standalone (not "
        "significant after Holm): -0.072 [-0.094, -0.050] unadjusted interval, 5 seeds "
        "(paired t, unadjusted p = 0.011, Holm p = 0.13)"
    )
    # Holm's p below 0.05: the verb, with Holm's p.
    assert sentence(interval(-0.072, -0.094, -0.050).adjusted(0.049), **WORDS).startswith(
        "SGT lowers weak-carry's val reward@1 by 0.072 [0.050, 0.094]"
    )


def test_no_spread_is_no_test() -> None:
    # The reviewer's "raises ... by 0.010 [0.010, 0.010], 2 seeds (p < 0.001)".
    # 0.51 - 0.50 and 0.41 - 0.40: a mean of 0.00999999999999998, shown as 0.010
    text = sentence(paired_t([0.51 - 0.50, 0.41 - 0.40]), **WORDS)
    assert text == (
        "SGT against standalone on weak-carry's val reward@1: every seed moved by exactly "
        "0.010: no spread, no test, 2 seeds"
    )
    assert "p =" not in text and "p <" not in text and "raises" not in text
    welch_text = sentence(welch([0.3, 0.3], [0.1, 0.1]), **WORDS)
    assert "differ by exactly 0.20: no spread, no test, 2 vs 2 runs" in welch_text


def test_one_seed_asks_for_a_sweep() -> None:
    one = paired_t([0.3])
    assert sentence(one, **WORDS) == (
        "SGT changes weak-carry's val reward@1 by +0.30 over standalone, 1 seed "
        "(one seed: launch a sweep for an interval)"
    )
    # A group of one run under Welch: no "Welch" named next to no interval.
    text = sentence(welch([0.9], [0.2]), **WORDS)
    assert text.endswith("1 vs 1 run (one seed: launch a sweep for an interval)")
    assert "Welch" not in text


def test_the_primary_endpoint_names_the_family_it_is_kept_out_of() -> None:
    primary = interval(0.19, 0.12, 0.26, p=0.004)
    assert sentence(primary, **WORDS, primary_of=8) == (
        "SGT raises weak-carry's val reward@1 by 0.19 [0.12, 0.26] over standalone, 5 seeds "
        "(paired t, p = 0.004; the primary endpoint, outside the Holm family of the 8 other "
        "comparisons)"
    )
    assert sentence(primary, **WORDS, primary_of=1).endswith(
        "(paired t, p = 0.004; the primary endpoint, its own p)"
    )


def test_decimals_are_never_fewer_than_two() -> None:
    # two significant digits of the width when finer than 2 decimals: 0.0014 -> 4
    assert stats.interval_decimals(interval(0.19, 0.12, 0.26)) == 2
    assert stats.interval_decimals(interval(19.0, 12.0, 26.0)) == 2
    assert stats.interval_decimals(interval(0.0019, 0.0012, 0.0026)) == 4
    # The reviewer's 0.273 shown as +0.3 (a width of 1.5 gave one decimal).
    wide = interval(0.273, -0.5, 1.0, p=0.4)
    assert stats.interval_decimals(wide) == 2
    assert "+0.27 [-0.50, 1.00]" in sentence(wide, **WORDS)
    assert stats.p_text(0.0312) == "p = 0.031" and stats.p_text(0.31, "Holm p") == "Holm p = 0.31"
    assert stats.p_text(math.nan) == ""

"""Figure 11's interval (issue 45): the relative improvement over standalone with an
interval that counts the baseline's variance, by the delta method, paired by seed or
not (trainer.stats.relative_interval*)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from trainer.stats import (
    PAIRED_DELTA,
    UNPAIRED_DELTA,
    ZERO_BASELINE,
    RelativeInterval,
    relative_improvement,
    relative_interval,
    relative_interval_paired,
    relative_interval_unpaired,
    t_critical,
)

T_975_2 = 4.302652729911275  # the printed table's t_{0.975, 2}


def test_a_paired_interval_by_hand() -> None:
    x, b = [0.6, 0.8, 0.7], [0.5, 0.4, 0.6]
    # d = x - b = (0.1, 0.4, 0.1); mean(d) = 0.2, mean(b) = 0.5: R = 40%, r = 0.4.
    # var(d) = 0.03, var(b) = 0.01, cov(d, b) = -0.015 (ddof = 1), so
    # var(e) = 0.03 - 2 * 0.4 * (-0.015) + 0.4^2 * 0.01 = 0.0436;
    # se = sqrt(0.0436) / sqrt(3) / 0.5 * 100 = 24.1109...; t_{0.975, 2} = 4.3027.
    se = math.sqrt(0.0436) / math.sqrt(3) / 0.5 * 100
    found = relative_interval_paired(x, b)
    assert found.method == PAIRED_DELTA and (found.n, found.n_baseline, found.df) == (3, 3, 2)
    assert found.estimate == pytest.approx(40.0)
    assert found.estimate == pytest.approx(relative_improvement(x, b).estimate)
    assert found.low == pytest.approx(40.0 - T_975_2 * se)
    assert found.high == pytest.approx(40.0 + T_975_2 * se)
    assert found.description() == "95% interval, paired delta method, 3 seeds"
    assert found.text() == "+40.0 [-63.7, +143.7]"


def test_an_unpaired_interval_by_hand() -> None:
    x, b = [0.6, 0.8], [0.4, 0.5, 0.6]
    # mean_x = 0.7, mean_b = 0.5: R = 40%. var_x = 0.02, var_b = 0.01:
    # var(R / 100) = 0.02 / (2 * 0.25) + 0.49 * 0.01 / (3 * 0.0625) = 0.04 + 0.026133...
    part_x, part_b = 0.04, 0.49 * 0.01 / 3 / 0.0625
    df = (part_x + part_b) ** 2 / (part_x**2 / 1 + part_b**2 / 2)
    half = t_critical(df) * math.sqrt(part_x + part_b) * 100
    found = relative_interval_unpaired(x, b)
    assert found.method == UNPAIRED_DELTA and (found.n, found.n_baseline) == (2, 3)
    assert found.df == pytest.approx(df) and df == pytest.approx(2.2527, abs=1e-4)
    assert (found.low, found.high) == pytest.approx((40.0 - half, 40.0 + half))
    assert found.count_text() == "2 vs 3 runs"


def test_a_seed_whose_baseline_is_zero_keeps_its_interval() -> None:
    # Per-seed ratios (x - b) / |b| have no value for seed 0; the delta method keeps it.
    found = relative_interval_paired([0.3, 0.6, 0.6], [0.0, 0.5, 0.4])
    assert found.estimate == pytest.approx(200 / 3)  # the figure's estimator, seed 0 in
    assert found.has_interval and found.low < found.estimate < found.high


def test_a_varying_baseline_widens_the_interval() -> None:
    x = [1.1, 1.3, 1.2, 1.4, 1.25]
    constant = [1.0] * 5
    # Same mean, a spread uncorrelated with x (cov(x, b) = 0 by construction).
    varying = [1.0 + v for v in (0.1, -0.1, -0.1, 0.1, 0.0)]
    assert np.cov(x, varying)[0, 1] == pytest.approx(0.0, abs=1e-12)
    for interval in (relative_interval_paired, relative_interval_unpaired):
        flat, wide = interval(x, constant), interval(x, varying)
        assert flat.estimate == pytest.approx(wide.estimate)
        assert wide.high - wide.low > 1.2 * (flat.high - flat.low), interval.__name__
    # With a constant baseline the paired interval is the t interval of the per-run values.
    per_run = relative_improvement(x, constant).per_run
    half = t_critical(4) * float(np.std(per_run, ddof=1)) / math.sqrt(5)
    flat = relative_interval_paired(x, constant)
    assert (flat.low, flat.high) == pytest.approx((flat.estimate - half, flat.estimate + half))


def test_negative_baseline_keeps_the_sign_of_better() -> None:
    found = relative_interval_paired([-1.0, -0.8, -1.2], [-2.0, -1.8, -2.2])
    assert found.estimate == pytest.approx(50.0)
    assert found.low < 50.0 < found.high


def test_too_few_values_and_undefined() -> None:
    one = relative_interval_paired([0.6], [0.5])
    assert one.estimate == pytest.approx(20.0) and not one.has_interval
    assert one.text() == "+20.0"
    lone = relative_interval_unpaired([0.6, 0.7], [0.5])
    assert not lone.has_interval and math.isnan(lone.df)
    zero = relative_interval_paired([0.3, 0.4], [0.2, -0.2])
    assert zero.undefined == ZERO_BASELINE and not zero.defined and zero.text() == "n/a"
    assert math.isnan(zero.estimate)
    with pytest.raises(ValueError, match="2 values but 3"):
        relative_interval_paired([0.1, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="finite"):
        relative_interval_paired([0.1, math.nan], [0.1, 0.2])
    # Unpaired leaves a run without a value out, as the estimator does.
    gap = relative_interval_unpaired([0.6, math.nan, 0.8], [0.5, 0.4, 0.6])
    assert gap.n == 2 and gap.estimate == pytest.approx(40.0)


def test_the_seed_maps_pair_only_when_every_run_pairs() -> None:
    paired = relative_interval({0: 0.6, 1: 0.8, 2: 0.7}, {2: 0.6, 0: 0.5, 1: 0.4})
    assert paired.method == PAIRED_DELTA
    assert paired.low == pytest.approx(
        relative_interval_paired([0.6, 0.8, 0.7], [0.5, 0.4, 0.6]).low
    )
    other_seeds = relative_interval({0: 0.6, 1: 0.8, 3: 0.7}, {0: 0.5, 1: 0.4, 2: 0.6})
    assert other_seeds.method == UNPAIRED_DELTA and other_seeds.n == 3
    missing = relative_interval({0: 0.6, 1: math.nan, 2: 0.7}, {0: 0.5, 1: 0.4, 2: 0.6})
    assert missing.method == UNPAIRED_DELTA and missing.n == 2
    assert relative_interval({0: 0.6}, {0: 0.5}).method == UNPAIRED_DELTA  # one seed


def _coverage(
    draw: Callable[[], tuple[np.ndarray, np.ndarray]],
    interval: Callable[[np.ndarray, np.ndarray], RelativeInterval],
    truth: float,
    trials: int,
) -> float:
    """The share of ``trials`` draws whose interval holds ``truth``."""
    hits = 0
    for _ in range(trials):
        x, b = draw()
        found = interval(x, b)
        hits += found.low <= truth <= found.high
    return hits / trials


def test_the_paired_interval_covers_about_95_percent() -> None:
    """Seeds share luck (x and b correlate), the baseline varies: coverage near 95%."""
    rng = np.random.default_rng(45)
    n = 20

    def draw() -> tuple[np.ndarray, np.ndarray]:
        b = rng.normal(1.0, 0.25, n)
        x = 1.2 + 0.5 * (b - 1.0) + rng.normal(0.0, 0.2, n)
        return x, b

    coverage = _coverage(draw, relative_interval_paired, 20.0, 2000)
    assert 0.93 <= coverage <= 0.97, coverage


def test_the_unpaired_interval_covers_about_95_percent_and_std_would_not() -> None:
    rng = np.random.default_rng(11)

    def draw() -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(0.6, 0.1, 15), rng.normal(0.5, 0.15, 12)

    coverage = _coverage(draw, relative_interval_unpaired, 20.0, 2000)
    assert 0.93 <= coverage <= 0.97, coverage

    # The per-run values' t interval treats mean_b as known: it misses far more often.
    def per_run_only(x: np.ndarray, b: np.ndarray) -> RelativeInterval:
        return relative_interval_unpaired(x, np.full(b.size, b.mean()))

    assert _coverage(draw, per_run_only, 20.0, 1000) < 0.85

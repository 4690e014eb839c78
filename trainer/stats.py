"""Comparing two groups of runs as a paper's reviewer would (SPEC section 10): pure
functions over plain numbers, no Django and no torch (numpy and scipy only).

- :func:`paired_t`: the mean of paired differences (one per seed present in both
  groups) with its two-sided Student t interval, n - 1 degrees of freedom, and the
  two-sided p-value of "the mean difference is 0".
- :func:`welch`: mean(a) - mean(b) for unpaired runs, Welch's interval with the
  Welch-Satterthwaite degrees of freedom, and its p-value.
- :func:`holm`: Holm-Bonferroni adjusted p-values, for several comparisons against one
  baseline.
- :func:`relative_improvement`: Figure 11's one estimator, ``(mean_x - mean_b) / |mean_b|
  * 100``; the compare page's bar view, its exports and ``bench/figures_11_12.py`` call it.
- :func:`relative_interval`: that estimate with an interval that counts the baseline's
  variance (delta method: paired by seed, or unpaired with both groups' variances).
- :func:`sentence`: one comparison in plain words ("sgt raises llama's validation
  reward@1 by 0.19 [0.12, 0.26] over standalone, 5 seeds (paired t, Holm p = 0.004)"),
  which never says more than the numbers: the verb follows the p shown (Holm's when it
  is shown), a zero spread is no test, one seed asks for a sweep.

Inputs are sequences of finite floats: a non-finite value raises :class:`ValueError`
instead of being dropped, so a caller never loses a seed without saying so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

LEVEL = 0.95
PAIRED, WELCH = "paired t", "Welch"
METHODS = (PAIRED, WELCH)
P_FLOOR = 0.001  # p-values below it read "p < 0.001"
SPREAD_TOLERANCE = 1e-12
"""Values closer than this (times max(1, their largest magnitude)) have no spread: float
rounding of x - b, not a measured difference between seeds."""
ONE_SEED = "one seed: launch a sweep for an interval"
NOT_AFTER_HOLM = "not significant after Holm"
# Why a relative improvement is undefined (Relative.undefined).
NO_BASELINE, ZERO_BASELINE, NO_VALUE = "no baseline value", "the baseline mean is 0", "no value"


@dataclass(frozen=True)
class Interval:
    """One comparison: ``estimate`` (the mean paired difference, or mean(a) - mean(b)),
    its two-sided ``level`` interval [``low``, ``high``], the degrees of freedom ``df``
    and the two-sided p-value ``p`` of a zero mean difference.

    ``n``: the pairs (paired t) or the first group's runs (Welch); ``n_other``: the second
    group's runs (Welch; 0 for paired t). Too few values for a spread (one pair, or a
    group of one run under Welch) give the estimate with NaN ``low``, ``high``, ``p`` (and
    ``df`` under Welch). ``no_spread``: every difference the same (paired t) or both
    groups constant (Welch): the interval is the point and there is no test, so ``p`` is
    NaN (and :func:`holm` leaves it out of the family). ``p_adjusted``: the
    multiplicity-adjusted p (:func:`holm`) once set with :meth:`adjusted`; None until
    then."""

    estimate: float
    low: float
    high: float
    n: int
    df: float
    p: float
    method: str
    n_other: int = 0
    p_adjusted: float | None = None
    level: float = LEVEL
    no_spread: bool = False

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def includes_zero(self) -> bool:
        """Whether 0 lies in the interval (True without an interval: nothing excludes 0)."""
        return not self.has_interval or self.low <= 0.0 <= self.high

    def adjusted(self, p_adjusted: float) -> Interval:
        """A copy with ``p_adjusted`` set."""
        return replace(self, p_adjusted=float(p_adjusted))


def _finite(values: Sequence[float], name: str) -> np.ndarray:
    data = np.asarray(values, dtype=float).reshape(-1)
    if not np.isfinite(data).all():
        raise ValueError(f"{name}: every value must be finite (a missing run is left out by name)")
    return data


def _student_t() -> Any:
    """scipy's Student t distribution, imported on first use: scipy.stats takes a second or
    two to import, and the web app's processes import this module whether or not a page
    asks for an interval."""
    from scipy.stats import t

    return t


def t_critical(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom
    (``df`` > 0, not necessarily an integer): ``t_{(1 + level) / 2, df}``; 2.776445 for
    df = 4 at 95%."""
    if not df > 0:
        raise ValueError(f"df must be > 0, not {df}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level}")
    return float(_student_t().ppf(0.5 + level / 2.0, df))


def no_spread(values: np.ndarray) -> bool:
    """Whether ``values`` are all the same, up to :data:`SPREAD_TOLERANCE` (0.51 - 0.50 and
    0.61 - 0.60 differ in the 17th digit: one difference, not a spread)."""
    if values.size < 2:
        return False
    scale = max(1.0, float(np.abs(values).max()))
    return float(np.ptp(values)) <= SPREAD_TOLERANCE * scale


def _t_interval(estimate: float, se: float, df: float, level: float) -> tuple[float, float, float]:
    """(low, high, p) of ``estimate`` with standard error ``se`` on ``df`` degrees of
    freedom. With ``se`` = 0 (every value the same) the interval is the point and there
    is no test: p is NaN (a spread of 0 is no evidence of certainty)."""
    if se == 0.0:
        return estimate, estimate, math.nan
    half = t_critical(df, level) * se
    p = float(2.0 * _student_t().sf(abs(estimate / se), df))
    return estimate - half, estimate + half, min(p, 1.0)


def paired_t(differences: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of the paired ``differences`` (x_seed - baseline_seed, finite) and its
    Student t interval: ``mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)``, sd with ddof = 1,
    and the two-sided p of ``t = mean / (sd / sqrt(n))`` on n - 1 df.

    One difference gives the estimate with NaN bounds and p (df 0): one pair has no
    spread. Every difference the same (:func:`no_spread`): the point, p NaN and
    ``no_spread`` set. Raises :class:`ValueError` for none, or for a non-finite one."""
    d = _finite(differences, "differences")
    n = int(d.size)
    if n == 0:
        raise ValueError("differences: no pairs")
    estimate = float(d.mean())
    if n == 1:
        return Interval(estimate, math.nan, math.nan, 1, 0.0, math.nan, PAIRED, level=level)
    flat = no_spread(d)
    se = 0.0 if flat else float(d.std(ddof=1)) / math.sqrt(n)
    low, high, p = _t_interval(estimate, se, n - 1, level)
    return Interval(estimate, low, high, n, float(n - 1), p, PAIRED, level=level, no_spread=flat)


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """mean(a) - mean(b) for two unpaired samples (finite values), with Welch's interval:
    ``se = sqrt(va/na + vb/nb)`` (sample variances, ddof = 1), ``df = se^4 /
    ((va/na)^2/(na-1) + (vb/nb)^2/(nb-1))`` (Welch-Satterthwaite), ``+- t_{(1+level)/2,
    df} * se``, and the two-sided p of ``t = estimate / se``.

    With fewer than two values in either sample: the estimate, NaN bounds, df and p. Both
    samples constant (:func:`no_spread`): the point, df = na + nb - 2, p NaN and
    ``no_spread`` set. Raises :class:`ValueError` for an empty sample or a non-finite
    value."""
    x, y = _finite(a, "a"), _finite(b, "b")
    na, nb = int(x.size), int(y.size)
    if na == 0 or nb == 0:
        raise ValueError("welch: both samples need at least one value")
    estimate = float(x.mean() - y.mean())
    if na < 2 or nb < 2:
        return Interval(
            estimate, math.nan, math.nan, na, math.nan, math.nan, WELCH, nb, level=level
        )
    flat = no_spread(x) and no_spread(y)
    wa, wb = (0.0, 0.0) if flat else (float(x.var(ddof=1)) / na, float(y.var(ddof=1)) / nb)
    se2 = wa + wb
    # Welch-Satterthwaite; both samples constant: the pooled df (the interval is a point).
    pooled = float(na + nb - 2)
    df = pooled if se2 == 0.0 else se2**2 / (wa**2 / (na - 1) + wb**2 / (nb - 1))
    low, high, p = _t_interval(estimate, math.sqrt(se2), df, level)
    return Interval(estimate, low, high, na, df, p, WELCH, nb, level=level, no_spread=flat)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: with the m finite p sorted
    ascending p_(1) <= ... <= p_(m), ``adj_(i) = min(1, max_{j <= i} (m - j + 1) p_(j))``.
    Monotone in p, capped at 1; a NaN stays NaN and does not count in m. Ties keep their
    given order (they get the same adjusted value)."""
    values = [float(p) for p in p_values]
    order = sorted((i for i, p in enumerate(values) if not math.isnan(p)), key=lambda i: values[i])
    m = len(order)
    adjusted = [math.nan] * len(values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * values[i])
        adjusted[i] = min(1.0, running)
    return adjusted


# --------------------------------------------------------------------------- Figure 11


@dataclass(frozen=True)
class Relative:
    """Figure 11 for one group: ``estimate`` = (mean_x - mean_b) / |mean_b| * 100 (NaN when
    ``undefined`` says why there is none); ``per_run``: per value given, (x - mean_b) /
    |mean_b| * 100 (NaN where x is not finite, or everywhere when undefined), whose mean
    is ``estimate``; ``n`` / ``n_baseline``: the finite values that count."""

    estimate: float
    per_run: tuple[float, ...]
    baseline_mean: float
    n: int
    n_baseline: int
    undefined: str = ""

    @property
    def defined(self) -> bool:
        return not self.undefined


def relative_improvement(values: Sequence[float], baseline: Sequence[float]) -> Relative:
    """THE relative improvement of Figure 11, in %: ``(mean(values) - mean(baseline)) /
    |mean(baseline)| * 100`` over the runs of each group, equivalently the mean over the
    group's runs of ``(x_run - mean_b) / |mean_b| * 100`` (``per_run``, from which a band
    is drawn). ``|mean_b|`` keeps the sign meaning "better" for a negative baseline.

    Every finite value counts, zeros included: a seed whose own baseline run scored 0
    stays in both means. Non-finite entries (a run with no value) are not numbers to
    average; they get NaN in ``per_run`` and are not in ``n`` / ``n_baseline``, so the
    caller can name them. A baseline mean of 0 (or no baseline value, or no value) leaves
    the improvement undefined, with the reason in ``undefined`` (:data:`ZERO_BASELINE`,
    :data:`NO_BASELINE`, :data:`NO_VALUE`); nothing is filtered."""
    x = np.asarray(values, dtype=float).reshape(-1)
    b = np.asarray(baseline, dtype=float).reshape(-1)
    b = b[np.isfinite(b)]
    finite = np.isfinite(x)
    n, n_b = int(finite.sum()), int(b.size)
    nan_runs = tuple(math.nan for _ in x)
    if n_b == 0:
        return Relative(math.nan, nan_runs, math.nan, n, 0, NO_BASELINE)
    mean_b = float(b.mean())
    if mean_b == 0.0:
        return Relative(math.nan, nan_runs, 0.0, n, n_b, ZERO_BASELINE)
    per_run = np.where(finite, (x - mean_b) / abs(mean_b) * 100.0, math.nan)
    if n == 0:
        return Relative(math.nan, tuple(per_run.tolist()), mean_b, 0, n_b, NO_VALUE)
    estimate = float(per_run[finite].mean())
    return Relative(estimate, tuple(float(v) for v in per_run), mean_b, n, n_b)


PAIRED_DELTA, UNPAIRED_DELTA = "paired delta method", "unpaired delta method"
"""How :func:`relative_interval` got its interval (:attr:`RelativeInterval.method`)."""


@dataclass(frozen=True)
class RelativeInterval:
    """Figure 11's relative improvement (in %) with its two-sided ``level`` interval
    [``low``, ``high``], the one the compare page's bar view, its exports and the benches
    show: ``estimate`` is :func:`relative_improvement`'s, ``df`` the Student t degrees of
    freedom, ``method`` :data:`PAIRED_DELTA` or :data:`UNPAIRED_DELTA`.

    ``n``: the seeds paired (paired), or the group's runs (unpaired); ``n_baseline``: the
    baseline's runs (the same seeds when paired). Too few values for a spread (one pair;
    a group or a baseline of one run) give the estimate with NaN ``low``, ``high``,
    ``df``; an undefined improvement (``undefined``, as :class:`Relative` says) gives NaN
    everywhere."""

    estimate: float
    low: float
    high: float
    n: int
    n_baseline: int
    df: float
    method: str
    level: float = LEVEL
    undefined: str = ""

    @property
    def defined(self) -> bool:
        return not self.undefined

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def count_text(self) -> str:
        """ "5 seeds" (paired) or "5 vs 4 runs" (unpaired: the group's, the baseline's)."""
        if self.method == PAIRED_DELTA:
            return f"{self.n} seed{'s' if self.n != 1 else ''}"
        return f"{self.n} vs {self.n_baseline} run{'s' if self.n_baseline != 1 else ''}"

    def description(self) -> str:
        """What the interval is, for a caption: "95% interval, paired delta method, 5
        seeds"."""
        return f"{self.level:.0%} interval, {self.method}, {self.count_text()}"

    def text(self, decimals: int = 1) -> str:
        """ "+12.3 [+4.0, +20.6]" (signed; without an interval the estimate alone, "n/a"
        when undefined)."""
        if not self.defined:
            return "n/a"
        shown = f"{self.estimate:+.{decimals}f}"
        if self.has_interval:
            shown += f" [{self.low:+.{decimals}f}, {self.high:+.{decimals}f}]"
        return shown


def _relative_undefined(
    found: Relative, n: int, n_baseline: int, method: str, level: float
) -> RelativeInterval:
    return RelativeInterval(
        math.nan, math.nan, math.nan, n, n_baseline, math.nan, method, level, found.undefined
    )


def _ratio_bounds(estimate: float, se: float, df: float, level: float) -> tuple[float, float]:
    """(low, high) of ``estimate`` +- t_{(1+level)/2, df} * ``se``; the point for se 0."""
    if se == 0.0:
        return estimate, estimate
    half = t_critical(df, level) * se
    return estimate - half, estimate + half


def relative_interval_paired(
    values: Sequence[float], baseline: Sequence[float], level: float = LEVEL
) -> RelativeInterval:
    """Figure 11's improvement of ``values`` over ``baseline``, paired by seed
    (``values[i]`` and ``baseline[i]`` are the same seed's runs, every one finite), with a
    delta-method interval that counts the baseline's variance.

    With d_i = x_i - b_i, the estimate is ``R = mean(d) / |mean(b)| * 100`` (the same
    number as :func:`relative_improvement`: mean(d) = mean(x) - mean(b)). To first order
    ``R - R_true ~ mean(e) / |mean(b)|`` with the per-seed residual ``e_i = d_i - r s b_i``
    (r = R / 100, s = sign(mean(b))), so its standard error is ``sd(e) / (sqrt(n)
    |mean(b)|) * 100``, sd with ddof = 1; expanded, ``var(e) = var(d) - 2 r s cov(d, b)
    + r^2 var(b)`` from the sample variances and covariance of d and b. The interval is
    ``R +- t_{(1+level)/2, n-1} * se`` (Student t on n - 1 df, as :func:`paired_t`).

    Why the delta method and not a t interval over per-seed ratios (x_i - b_i) / |b_i|:
    a seed whose own baseline run scored 0 (common for a weak policy on validation
    reward) has no ratio, and dropping it biases the estimate; the per-seed ratios also
    average to a different number than the figure's estimator. The delta method needs
    only mean(b) != 0, keeps every seed, and is centred on the figure's estimate. Its
    first-order approximation is good while |mean(b)| is large against its standard
    error; near 0 any ratio's interval is wide, and this one says so.

    A constant baseline gives the t interval of (x - b) / |b| * 100 (no baseline
    variance); a baseline that varies independently of x widens it. One pair: the
    estimate, NaN bounds. Raises :class:`ValueError` for lengths that differ, no pair,
    or a non-finite value."""
    x, b = _finite(values, "values"), _finite(baseline, "baseline")
    if x.size != b.size:
        raise ValueError(f"paired: {x.size} values but {b.size} baseline values")
    n = int(x.size)
    if n == 0:
        raise ValueError("paired: no pairs")
    found = relative_improvement(x, b)
    if not found.defined:
        return _relative_undefined(found, n, n, PAIRED_DELTA, level)
    estimate, mean_b = found.estimate, found.baseline_mean
    if n == 1:
        return RelativeInterval(estimate, math.nan, math.nan, 1, 1, math.nan, PAIRED_DELTA, level)
    residual = (x - b) - (estimate / 100.0) * math.copysign(1.0, mean_b) * b
    se = float(residual.std(ddof=1)) / math.sqrt(n) / abs(mean_b) * 100.0
    low, high = _ratio_bounds(estimate, se, n - 1, level)
    return RelativeInterval(estimate, low, high, n, n, float(n - 1), PAIRED_DELTA, level)


def relative_interval_unpaired(
    values: Sequence[float], baseline: Sequence[float], level: float = LEVEL
) -> RelativeInterval:
    """Figure 11's improvement of ``values`` over ``baseline`` for runs that do not pair
    by seed, with a Welch-like delta-method interval over both groups' variances.

    ``R = (mean(x) - mean(b)) / |mean(b)| * 100`` (:func:`relative_improvement`; its
    non-finite entries are left out the same way, and ``n`` / ``n_baseline`` count the
    finite ones). To first order, with the groups independent, ``var(R / 100) ~
    var_x / (n_x mean_b^2) + mean_x^2 var_b / (n_b mean_b^4)`` (sample variances, ddof =
    1); the interval is ``R +- t_{(1+level)/2, df} * se`` with the Welch-Satterthwaite df
    of those two terms (as :func:`welch`). A group or a baseline of one run: the
    estimate, NaN bounds and df."""
    x = np.asarray(values, dtype=float).reshape(-1)
    b = np.asarray(baseline, dtype=float).reshape(-1)
    x, b = x[np.isfinite(x)], b[np.isfinite(b)]
    n_x, n_b = int(x.size), int(b.size)
    found = relative_improvement(x, b)
    if not found.defined:
        return _relative_undefined(found, n_x, n_b, UNPAIRED_DELTA, level)
    estimate = found.estimate
    if n_x < 2 or n_b < 2:
        return RelativeInterval(
            estimate, math.nan, math.nan, n_x, n_b, math.nan, UNPAIRED_DELTA, level
        )
    mean_x, mean_b = float(x.mean()), found.baseline_mean
    part_x = float(x.var(ddof=1)) / n_x / mean_b**2
    part_b = mean_x**2 * float(b.var(ddof=1)) / n_b / mean_b**4
    variance = part_x + part_b
    df = (
        float(n_x + n_b - 2)
        if variance == 0.0
        else variance**2 / (part_x**2 / (n_x - 1) + part_b**2 / (n_b - 1))
    )
    low, high = _ratio_bounds(estimate, math.sqrt(variance) * 100.0, df, level)
    return RelativeInterval(estimate, low, high, n_x, n_b, df, UNPAIRED_DELTA, level)


def relative_interval(
    values: Mapping[int, float], baseline: Mapping[int, float], level: float = LEVEL
) -> RelativeInterval:
    """Figure 11's improvement with its interval, from seed -> final value maps (one run a
    seed in each group): :func:`relative_interval_paired` when both groups hold the same
    seeds (at least two), each with a finite value; otherwise
    :func:`relative_interval_unpaired` over every finite value. Pairing only when every
    run pairs keeps the interval centred on the figure's estimate over all the runs."""
    x_seeds = {seed for seed, value in values.items() if math.isfinite(value)}
    b_seeds = {seed for seed, value in baseline.items() if math.isfinite(value)}
    complete = x_seeds == set(values) and b_seeds == set(baseline)
    if complete and x_seeds == b_seeds and len(x_seeds) >= 2:
        seeds = sorted(x_seeds)
        return relative_interval_paired(
            [values[s] for s in seeds], [baseline[s] for s in seeds], level
        )
    return relative_interval_unpaired(list(values.values()), list(baseline.values()), level)


# --------------------------------------------------------------------------- words


def interval_decimals(interval: Interval) -> int:
    """Decimals to show an interval's numbers: never fewer than 2 (0.273 reads 0.27, not
    0.3), more where two significant digits of its width need them (0.0019 [0.0012,
    0.0026]), or of the estimate without a width (one seed, or no spread: 0.010); at
    most 6."""
    width = interval.high - interval.low if interval.has_interval else math.nan
    scale = width if math.isfinite(width) and width > 0 else abs(interval.estimate)
    if not math.isfinite(scale) or scale == 0:
        return 2
    scale = float(f"{scale:.12g}")  # 0.00999999999999998 (float rounding) is 0.01
    return max(2, min(6, 1 - math.floor(math.log10(scale))))


def p_number(p: float) -> str:
    """A p-value as a table shows it: "0.004" (three decimals below 0.1), "0.31" (two
    above), "< 0.001", and "" for NaN."""
    if not math.isfinite(p):
        return ""
    if p < P_FLOOR:
        return f"< {P_FLOOR:g}"
    return f"{p:.2f}" if p >= 0.1 else f"{p:.3f}"


def p_text(p: float, name: str = "p") -> str:
    """ "p = 0.004", "Holm p < 0.001", "" for NaN (:func:`p_number` after ``name``)."""
    number = p_number(p)
    if not number:
        return ""
    return f"{name} {number}" if number.startswith("<") else f"{name} = {number}"


def count_text(interval: Interval) -> str:
    """ "5 seeds" (paired t) or "5 vs 4 runs" (Welch)."""
    if interval.method == PAIRED:
        return f"{interval.n} seed{'s' if interval.n != 1 else ''}"
    return f"{interval.n} vs {interval.n_other} run{'s' if interval.n_other != 1 else ''}"


def primary_text(others: int) -> str:
    """What a sentence says of the primary endpoint, kept out of the Holm family of the
    ``others`` comparisons: "the primary endpoint, outside the Holm family of the 8 other
    comparisons" ("its own p" when fewer than two others make no family)."""
    if others < 2:
        return "the primary endpoint, its own p"
    return f"the primary endpoint, outside the Holm family of the {others} other comparisons"


def sentence(
    interval: Interval,
    *,
    group: str,
    baseline: str,
    policy: str,
    metric: str,
    decimals: int | None = None,
    primary_of: int | None = None,
) -> str:
    """The comparison in one plain sentence, e.g. "sgt raises weak-carry's validation
    reward@1 by 0.19 [0.12, 0.26] over standalone, 5 seeds (paired t, Holm p = 0.004)".

    It says no more than the numbers:

    - the verb follows the p shown: with Holm's p set, "raises" / "lowers" (by the
      change and its interval, positive numbers) only when Holm's p is below 1 - level;
      an unadjusted interval that excludes 0 with a Holm p that does not clear it "does
      not clearly change" (:data:`NOT_AFTER_HOLM`), its interval labelled unadjusted and
      both p named; an interval containing 0 "does not clearly change" (the signed
      estimate and interval, "interval includes 0");
    - no spread (``no_spread``): "every seed moved by exactly 0.010: no spread, no test",
      and no p;
    - no interval (one seed, or a group of one run): the signed estimate and
      :data:`ONE_SEED`;
    - ``primary_of`` (the primary endpoint; the number of other comparisons): its own
      p, and :func:`primary_text` names the family it is kept out of.

    Decimals: :func:`interval_decimals` unless ``decimals`` is given."""
    d = interval_decimals(interval) if decimals is None else decimals
    whose = f"{policy}'s {metric}"
    count = count_text(interval)
    primary = "" if primary_of is None else primary_text(primary_of)
    after = f"; {primary}" if primary else ""
    if not interval.has_interval:
        return (
            f"{group} changes {whose} by {interval.estimate:+.{d}f} over {baseline}, {count} "
            f"({ONE_SEED}{after})"
        )
    if interval.no_spread:
        moved = (
            "every seed moved by exactly"
            if interval.method == PAIRED
            else "every run of a group scored the same, the groups differ by exactly"
        )
        return (
            f"{group} against {baseline} on {whose}: {moved} {interval.estimate:.{d}f}: no "
            f"spread, no test, {count}" + (f" ({primary})" if primary else "")
        )
    holm_shown = interval.p_adjusted is not None
    tested = p_text(interval.p_adjusted, "Holm p") if holm_shown else p_text(interval.p)
    method = ", ".join(part for part in (interval.method, tested) if part)
    signed = f"{interval.estimate:+.{d}f} [{interval.low:.{d}f}, {interval.high:.{d}f}]"
    if interval.includes_zero:
        return (
            f"{group} does not clearly change {whose} over {baseline} (interval includes 0): "
            f"{signed}, {count} ({method}{after})"
        )
    if interval.p_adjusted is not None and not interval.p_adjusted < 1.0 - interval.level:
        both = ", ".join((interval.method, p_text(interval.p, "unadjusted p"), tested))
        return (
            f"{group} does not clearly change {whose} over {baseline} ({NOT_AFTER_HOLM}): "
            f"{signed} unadjusted interval, {count} ({both}{after})"
        )
    if interval.estimate > 0:
        verb, est, low, high = "raises", interval.estimate, interval.low, interval.high
    else:
        verb, est, low, high = "lowers", -interval.estimate, -interval.high, -interval.low
    return (
        f"{group} {verb} {whose} by {est:.{d}f} [{low:.{d}f}, {high:.{d}f}] over {baseline}, "
        f"{count} ({method}{after})"
    )

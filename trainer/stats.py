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
- :func:`sentence`: one comparison in plain words ("sgt raises llama's validation
  reward@1 by 0.19 [0.12, 0.26] over standalone, 5 seeds (paired t, Holm p = 0.004)").

Inputs are sequences of finite floats: a non-finite value raises :class:`ValueError`
instead of being dropped, so a caller never loses a seed without saying so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

LEVEL = 0.95
PAIRED, WELCH = "paired t", "Welch"
METHODS = (PAIRED, WELCH)
P_FLOOR = 0.001  # p-values below it read "p < 0.001"
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
    ``df`` under Welch). ``p_adjusted``: the multiplicity-adjusted p (:func:`holm`) once
    set with :meth:`adjusted`; None until then."""

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


def _t_interval(estimate: float, se: float, df: float, level: float) -> tuple[float, float, float]:
    """(low, high, p) of ``estimate`` with standard error ``se`` on ``df`` degrees of
    freedom. With ``se`` = 0 (every value the same) the interval is the point and p is
    0 for a non-zero estimate, 1 for a zero one."""
    if se == 0.0:
        return estimate, estimate, (0.0 if estimate != 0.0 else 1.0)
    half = t_critical(df, level) * se
    p = float(2.0 * _student_t().sf(abs(estimate / se), df))
    return estimate - half, estimate + half, min(p, 1.0)


def paired_t(differences: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of the paired ``differences`` (x_seed - baseline_seed, finite) and its
    Student t interval: ``mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)``, sd with ddof = 1,
    and the two-sided p of ``t = mean / (sd / sqrt(n))`` on n - 1 df.

    One difference gives the estimate with NaN bounds and p (df 0): one pair has no
    spread. Raises :class:`ValueError` for none, or for a non-finite one."""
    d = _finite(differences, "differences")
    n = int(d.size)
    if n == 0:
        raise ValueError("differences: no pairs")
    estimate = float(d.mean())
    if n == 1:
        return Interval(estimate, math.nan, math.nan, 1, 0.0, math.nan, PAIRED, level=level)
    se = float(d.std(ddof=1)) / math.sqrt(n)
    low, high, p = _t_interval(estimate, se, n - 1, level)
    return Interval(estimate, low, high, n, float(n - 1), p, PAIRED, level=level)


def welch(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """mean(a) - mean(b) for two unpaired samples (finite values), with Welch's interval:
    ``se = sqrt(va/na + vb/nb)`` (sample variances, ddof = 1), ``df = se^4 /
    ((va/na)^2/(na-1) + (vb/nb)^2/(nb-1))`` (Welch-Satterthwaite), ``+- t_{(1+level)/2,
    df} * se``, and the two-sided p of ``t = estimate / se``.

    With fewer than two values in either sample: the estimate, NaN bounds, df and p. Both
    samples constant: the point, df = na + nb - 2, p as :func:`paired_t` says. Raises
    :class:`ValueError` for an empty sample or a non-finite value."""
    x, y = _finite(a, "a"), _finite(b, "b")
    na, nb = int(x.size), int(y.size)
    if na == 0 or nb == 0:
        raise ValueError("welch: both samples need at least one value")
    estimate = float(x.mean() - y.mean())
    if na < 2 or nb < 2:
        return Interval(
            estimate, math.nan, math.nan, na, math.nan, math.nan, WELCH, nb, level=level
        )
    wa, wb = float(x.var(ddof=1)) / na, float(y.var(ddof=1)) / nb
    se2 = wa + wb
    # Welch-Satterthwaite; both samples constant: the pooled df (the interval is a point).
    pooled = float(na + nb - 2)
    df = pooled if se2 == 0.0 else se2**2 / (wa**2 / (na - 1) + wb**2 / (nb - 1))
    low, high, p = _t_interval(estimate, math.sqrt(se2), df, level)
    return Interval(estimate, low, high, na, df, p, WELCH, nb, level=level)


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


# --------------------------------------------------------------------------- words


def interval_decimals(interval: Interval) -> int:
    """Decimals to show an interval's numbers: two significant digits of its width
    (0.19 [0.12, 0.26]), or of the estimate without a width; 0 to 6."""
    width = interval.high - interval.low if interval.has_interval else math.nan
    scale = width if math.isfinite(width) and width > 0 else abs(interval.estimate)
    if not math.isfinite(scale) or scale == 0:
        return 2
    return max(0, min(6, 1 - math.floor(math.log10(scale))))


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


def sentence(
    interval: Interval,
    *,
    group: str,
    baseline: str,
    policy: str,
    metric: str,
    decimals: int | None = None,
) -> str:
    """The comparison in one plain sentence, e.g. "sgt raises weak-carry's validation
    reward@1 by 0.19 [0.12, 0.26] over standalone, 5 seeds (paired t, Holm p = 0.004)".

    An interval above 0 "raises", below 0 "lowers" (by the decrease and its interval,
    positive numbers), one containing 0 "does not clearly change" (the signed estimate
    and interval follow, "interval includes 0"); without an interval (one seed, or a
    group of one run) the signed estimate and the reason. The p named is Holm's when set."""
    d = interval_decimals(interval) if decimals is None else decimals
    whose = f"{policy}'s {metric}"
    if interval.p_adjusted is not None:
        p_part = p_text(interval.p_adjusted, "Holm p")
    else:
        p_part = p_text(interval.p)
    method = ", ".join(part for part in (interval.method, p_part) if part)
    count = count_text(interval)
    if not interval.has_interval:
        few = "one pair" if interval.method == PAIRED else "a group of one run"
        return (
            f"{group} changes {whose} by {interval.estimate:+.{d}f} over {baseline}, {count} "
            f"({method}; {few}: too few for an interval)"
        )
    if interval.includes_zero:
        return (
            f"{group} does not clearly change {whose} over {baseline} (interval includes 0): "
            f"{interval.estimate:+.{d}f} [{interval.low:.{d}f}, {interval.high:.{d}f}], "
            f"{count} ({method})"
        )
    if interval.estimate > 0:
        verb, est, low, high = "raises", interval.estimate, interval.low, interval.high
    else:
        verb, est, low, high = "lowers", -interval.estimate, -interval.high, -interval.low
    return (
        f"{group} {verb} {whose} by {est:.{d}f} [{low:.{d}f}, {high:.{d}f}] over {baseline}, "
        f"{count} ({method})"
    )

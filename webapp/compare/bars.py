"""The compare page's bar views, as pure numpy assembly (no Django): per-task evaluation
("Figure 12") and the relative improvement over a baseline group ("Figure 11").

Both read one number per (run, policy, key), its :class:`FinalValue`: the last finite
value of the series (the value at its largest step, as the summary table's "final"), that
step, and the value at step 0. Evaluation results are ordinary series,
``eval/<suite>/<task>/accuracy`` (and ``/acc_norm`` for multiple choice) at the evaluated
checkpoint's step; step 0 holds the base model, evaluated before any update.

- :func:`per_task`: one panel per policy, x = the suite's tasks (by name), one bar per
  group: the mean over the group's runs of their final accuracy, with the spec's band
  (:func:`webapp.compare.stats.aggregate`: std, min-max, 95% CI or none) and n. A run
  whose only evaluation is at step 0 gives no bar value (it has no trained checkpoint
  evaluated): it is noted. Per (policy, task) the base model's value, the mean of the
  runs' step-0 values (one model, so they agree), is drawn as a marker.
- :func:`relative`: one panel per policy, x = the metrics, one bar per non-baseline
  group: Figure 11's one estimator, :func:`trainer.stats.relative_improvement` (also
  ``bench/figures_11_12.py``'s): the bar's height is ``(mean_x - b) / |b| * 100``, x the
  group's final values and b the baseline group's mean final value for that policy and
  metric (every run counts, a baseline run that scored 0 too). ``|b|`` keeps the sign
  meaning "better" for a negative baseline. Its error bar is the 95% interval of
  :func:`trainer.stats.relative_interval`, which counts the baseline's variance too:
  the paired delta method when every run of both groups pairs by seed (one run a seed
  in each), the unpaired one otherwise; not the spec's band (a band over the runs'
  values would treat b as known). :attr:`BarChart.interval_note` says which, with n.
  With b = 0 (or no baseline value) the improvement is undefined: the bar is left out
  and a note says why.

Shapes: a panel has K categories; a :class:`BarTrace` holds ``[K]`` arrays, NaN (n = 0)
where its group has no value. Group order, colours and dashes are the curves' own
(:func:`webapp.compare.assemble.groups_of`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlencode

import numpy as np

from trainer import metrics as m
from trainer.stats import (
    RelativeInterval,
    relative_improvement,
    relative_interval,
    relative_interval_unpaired,
)
from webapp.compare.assemble import Group, ids_text
from webapp.compare.spec import ComparisonSpec, SpecError
from webapp.compare.stats import aggregate, mean_std_n
from webapp.core.digits import ascii_digits

VIEWS = ("curves", "tasks", "relative", "significance")
BAR_VIEWS = ("tasks", "relative", "significance")
"""The views of /api/v1/compare/bars; "significance" is :mod:`webapp.compare.significance`
(a table of intervals, not bars, under the same endpoint, options and exports)."""
VIEW_TITLES = {
    "curves": "Curves",
    "tasks": "Per-task evaluation (Figure 12)",
    "relative": "Relative improvement (Figure 11)",
    "significance": "Significance",  # the view names its tests (Significance.title)
}
SCORES = ("accuracy", "acc_norm")
SCORE_LABELS = {"accuracy": "accuracy", "acc_norm": "accuracy (length-normalised)"}
RELATIVE_DEFAULT_METRIC = m.VAL_REWARD_AT_1
BASELINE_REGIME = "standalone"
MAX_BASELINE = 200
MAX_STEP_DIGITS = 12
NO_EVALUATIONS = "No evaluation results for these runs: evaluate a run from its page."

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
SUITE_PATTERN = re.compile(rf"^{_NAME}$")
EVAL_KEY = re.compile(rf"^eval/(?P<suite>{_NAME})/(?P<task>{_NAME})/(?P<score>accuracy|acc_norm)$")


# --------------------------------------------------------------------------- options


class Query(Protocol):
    def get(self, key: str, default: Any = ...) -> Any: ...
    def getlist(self, key: str) -> list[str]: ...


@dataclass(frozen=True)
class BarOptions:
    """The bar view's own parameters (the spec ignores them, so one query carries both):
    ``view`` (tasks | relative), ``suite`` ("" = the first suite by name), ``score``
    (accuracy | acc_norm), ``baseline`` (a group label; "" = the standalone group), the
    relative and significance views' metrics (``metric``, repeatable; default
    val/reward@1), and the significance view's ``sig_step`` (a step; "" = each run's
    final value)."""

    view: str = "tasks"
    suite: str = ""
    score: str = "accuracy"
    baseline: str = ""
    metrics: tuple[str, ...] = (RELATIVE_DEFAULT_METRIC,)
    sig_step: int | None = None

    @classmethod
    def from_query(cls, query: Query, spec: ComparisonSpec) -> BarOptions:
        """Raises :class:`webapp.compare.spec.SpecError` naming the parameter."""
        view = (query.get("view", "") or "tasks").strip()
        if view not in BAR_VIEWS:
            raise SpecError(f"view: the bar views are {list(BAR_VIEWS)}, not {view[:40]!r}")
        suite = (query.get("suite", "") or "").strip()
        if suite and not SUITE_PATTERN.match(suite):
            raise SpecError(f"suite: {suite[:80]!r} is not a suite name")
        score = (query.get("score", "") or "accuracy").strip()
        if score not in SCORES:
            raise SpecError(f"score: must be one of {list(SCORES)}, not {score[:40]!r}")
        baseline = (query.get("baseline", "") or "").strip()
        if len(baseline) > MAX_BASELINE or "\x00" in baseline:
            raise SpecError(f"baseline: a group label of at most {MAX_BASELINE} characters")
        given = any(value.strip() for value in query.getlist("metric"))
        metrics = spec.metrics if given else (RELATIVE_DEFAULT_METRIC,)
        raw_step = (query.get("sig_step", "") or "").strip()
        sig_step = ascii_digits(raw_step, max_digits=MAX_STEP_DIGITS) if raw_step else None
        if raw_step and sig_step is None:
            raise SpecError(f"sig_step: a step (an integer >= 0), not {raw_step[:40]!r}")
        return cls(
            view=view,
            suite=suite,
            score=score,
            baseline=baseline,
            metrics=metrics,
            sig_step=sig_step,
        )

    def query_pairs(self) -> list[tuple[str, str]]:
        """The options as query pairs (after the spec's), empty ones left out."""
        pairs = [("view", self.view)]
        if self.suite:
            pairs.append(("suite", self.suite))
        if self.score != "accuracy":
            pairs.append(("score", self.score))
        if self.baseline:
            pairs.append(("baseline", self.baseline))
        if self.sig_step is not None:
            pairs.append(("sig_step", str(self.sig_step)))
        return pairs


def full_query(spec: ComparisonSpec, options: BarOptions) -> str:
    """The spec's canonical query with the bar options after it."""
    return spec.to_query() + "&" + urlencode(options.query_pairs(), safe="/@,:")


# --------------------------------------------------------------------------- eval keys


def eval_key(suite: str, task: str, score: str = "accuracy") -> str:
    return f"eval/{suite}/{task}/{score}"


def eval_suites(keys: Iterable[str], score: str = "accuracy") -> dict[str, list[str]]:
    """Suite -> its tasks, both sorted by name, from the ``eval/<suite>/<task>/<score>``
    keys among ``keys``."""
    found: dict[str, set[str]] = {}
    for key in keys:
        match = EVAL_KEY.match(key)
        if match and match["score"] == score:
            found.setdefault(match["suite"], set()).add(match["task"])
    return {suite: sorted(found[suite]) for suite in sorted(found)}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class FinalValue:
    """Of one series: its last finite value (NaN: none) and that value's step (None:
    none), and its value at step 0 (NaN: no point there)."""

    final: float
    step: int | None
    base: float = math.nan


FinalValues = Mapping[tuple[int, str, str], FinalValue]
"""(run id, policy, key) -> the series' final value, for the series that exist."""


@dataclass
class BarTrace:
    """One group's bars in a panel: ``[K]`` arrays over the panel's categories. ``std``
    is the sample std over runs (NaN below two), whatever the band. ``intervals``: in
    the relative view, per category the interval that ``lower`` / ``upper`` hold (None
    where there is no bar); empty in the per-task view (there they are the band)."""

    group: str
    colour: str
    dash: str
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n: np.ndarray
    std: np.ndarray
    intervals: list[RelativeInterval | None] = field(default_factory=list)


@dataclass
class BarPanel:
    """One policy's bars: x = ``categories`` (tasks, or metric keys), shown as
    ``category_labels``. ``base``: ``[K]``, per category the base model's value
    (per-task) or the baseline group's mean (relative), NaN where unknown."""

    policy: str
    title: str
    y_label: str
    x_label: str
    categories: list[str]
    category_labels: list[str]
    base: np.ndarray
    base_label: str
    traces: list[BarTrace] = field(default_factory=list)
    message: str = ""  # why the panel has no bars (drawn in it), "" when it has some


@dataclass
class BarChart:
    view: str
    spec: ComparisonSpec
    options: BarOptions
    groups: list[Group]
    panels: list[BarPanel]
    notes: list[str]
    suites: dict[str, list[str]] = field(default_factory=dict)
    suite: str = ""
    baseline: str = ""
    empty: str | None = None  # why there is nothing to draw, in words
    runs: list[Any] = field(default_factory=list)

    @property
    def zero_line(self) -> bool:
        return self.view == "relative"

    @property
    def interval_note(self) -> str:
        """What the relative view's error bars are (:func:`interval_note`); "" else."""
        return interval_note(self.panels) if self.view == "relative" else ""

    @property
    def query(self) -> str:
        return full_query(self.spec, self.options)


# --------------------------------------------------------------------------- helpers


def _trace(group: Group, rows: list[list[float]], band: str, size: int) -> BarTrace:
    """The bars of ``group`` from ``rows``: ``[R][K]`` per-run values (NaN: none)."""
    data = np.array(rows, dtype=float) if rows else np.full((1, size), np.nan)
    stats = aggregate(data, band)
    std = np.array([_std(data[:, k]) for k in range(size)], dtype=float)
    return BarTrace(
        group=group.label,
        colour=group.colour,
        dash=group.dash,
        mean=stats.mean,
        lower=stats.lower,
        upper=stats.upper,
        n=stats.n.astype(int),
        std=std,
    )


def _interval_trace(
    group: Group, rows: list[list[float]], intervals: list[RelativeInterval | None]
) -> BarTrace:
    """The relative view's bars of ``group``: per category the interval's estimate and
    bounds (NaN where there is none), n its finite runs, std the per-run values'."""
    trace = _trace(group, rows, "none", len(intervals))
    for k, interval in enumerate(intervals):
        found = interval if interval is not None and interval.defined else None
        trace.mean[k] = found.estimate if found else math.nan
        trace.lower[k] = found.low if found else math.nan
        trace.upper[k] = found.high if found else math.nan
    trace.intervals = list(intervals)
    return trace


def _std(values: np.ndarray) -> float:
    found = mean_std_n(values).std
    return math.nan if found is None else found


def _finite(value: float) -> bool:
    return value is not None and math.isfinite(value)


def _finals(runs: Sequence[int], policy: str, metric: str, values: FinalValues) -> list[float]:
    """Per run, its final value of ``metric`` (NaN: no such series)."""
    return [
        values[(run, policy, metric)].final if (run, policy, metric) in values else math.nan
        for run in runs
    ]


def _mean(values: Sequence[float]) -> float:
    found = [v for v in values if _finite(v)]
    return float(np.mean(found)) if found else math.nan


# --------------------------------------------------------------------------- per task


def per_task(
    *,
    groups: Sequence[Group],
    policies: Sequence[str],
    suite: str,
    tasks: Sequence[str],
    values: FinalValues,
    band: str = "std",
    score: str = "accuracy",
    notes: list[str] | None = None,
) -> list[BarPanel]:
    """Figure 12: per policy, per task of ``suite``, one bar per group (mean and band of
    the runs' final ``score``), with the base model's step-0 value per task.

    ``values`` has the series of ``eval/<suite>/<task>/<score>`` that exist; a final at
    step 0 is the base model only and counts for ``base``, not for the bars."""
    notes = [] if notes is None else notes
    keys = [eval_key(suite, task, score) for task in tasks]
    panels = []
    for policy in policies:
        panel = BarPanel(
            policy=policy,
            title=m.policy_label(policy),
            y_label=SCORE_LABELS[score],
            x_label=f"task ({suite})",
            categories=list(tasks),
            category_labels=list(tasks),
            base=np.full(len(tasks), np.nan),
            base_label="base model (step 0)",
        )
        bases: list[list[float]] = [[] for _ in tasks]
        base_only: set[int] = set()
        unevaluated: list[int] = []
        steps: set[int] = set()
        for group in groups:
            rows = []
            for run_id in group.runs:
                row = [math.nan] * len(tasks)
                seen = False
                for k, key in enumerate(keys):
                    value = values.get((run_id, policy, key))
                    if value is None:
                        continue
                    seen = True
                    bases[k].append(value.base)
                    if value.step is None:
                        continue
                    if value.step == 0:
                        base_only.add(run_id)
                        continue
                    row[k] = value.final
                    steps.add(value.step)
                if seen:
                    rows.append(row)
                else:
                    unevaluated.append(run_id)
            if any(_finite(v) for row in rows for v in row):
                panel.traces.append(_trace(group, rows, band, len(tasks)))
        panel.base = np.array([_mean(b) for b in bases], dtype=float)
        if not panel.traces:
            panel.message = f"no {suite} results"
        if base_only:
            notes.append(
                f"{panel.title}: run(s) {ids_text(base_only)} have only the base model "
                f"(step 0) evaluated on {suite} for some tasks; those give no bar"
            )
        if unevaluated and len(unevaluated) < sum(len(g.runs) for g in groups):
            notes.append(f"{panel.title}: no {suite} results in run(s) {ids_text(unevaluated)}")
        elif unevaluated:
            notes.append(f"{panel.title}: no {suite} results in any run")
        if len(steps) > 1:
            shown = ", ".join(str(step) for step in sorted(steps)[:6])
            notes.append(
                f"{panel.title}: the final checkpoints evaluated are at different steps "
                f"({shown}{', ...' if len(steps) > 6 else ''})"
            )
        panels.append(panel)
    return panels


# --------------------------------------------------------------------------- relative


def choose_baseline(
    groups: Sequence[Group],
    requested: str,
    regime_of: Mapping[int, str],
    notes: list[str] | None = None,
) -> str:
    """The baseline group's label: ``requested`` (which must be a group's label), else the
    group labelled ``standalone``, else the first group whose runs are all standalone
    runs, else the first group (with a note). Raises :class:`SpecError` for a
    ``requested`` label no group has."""
    notes = [] if notes is None else notes
    labels = [group.label for group in groups]
    if requested:
        if requested not in labels:
            shown = ", ".join(repr(label) for label in labels[:12])
            raise SpecError(
                f"baseline: no group {requested[:80]!r} in this comparison; its groups: {shown}"
            )
        return requested
    if BASELINE_REGIME in labels:
        return BASELINE_REGIME
    for group in groups:
        if group.runs and all(regime_of.get(run) == BASELINE_REGIME for run in group.runs):
            return group.label
    if not labels:
        return ""
    notes.append(
        f"no standalone group: the improvement is relative to {labels[0]!r} "
        "(choose another with baseline=)"
    )
    return labels[0]


def by_seed(
    runs: Sequence[int], finals: Sequence[float], seed_of: Mapping[int, int]
) -> dict[int, float] | None:
    """seed -> final value of ``runs`` (``finals`` in their order), or None where they
    cannot pair by seed: a run without a known seed, or two runs of one seed."""
    found: dict[int, float] = {}
    for run, value in zip(runs, finals, strict=True):
        seed = seed_of.get(run)
        if seed is None or seed in found:
            return None
        found[seed] = value
    return found


def group_interval(
    runs: Sequence[int],
    finals: Sequence[float],
    base_runs: Sequence[int],
    base_finals: Sequence[float],
    seed_of: Mapping[int, int],
) -> RelativeInterval:
    """The improvement of one group over the baseline group with its interval
    (:func:`trainer.stats.relative_interval`): paired by seed when every run of both
    pairs, unpaired otherwise (a seed with two runs in a group too)."""
    x, b = by_seed(runs, finals, seed_of), by_seed(base_runs, base_finals, seed_of)
    if x is None or b is None:
        return relative_interval_unpaired(finals, base_finals)
    return relative_interval(x, b)


def interval_note(panels: Sequence[BarPanel]) -> str:
    """The relative view's error bars in words, for the caption: "Error bars: 95%
    interval, paired delta method, 5 seeds (the baseline's variance included)", each
    kind once (naming its groups when there are several kinds); "" without intervals."""
    kinds: dict[str, list[str]] = {}
    too_few = False
    for panel in panels:
        for trace in panel.traces:
            for interval in trace.intervals:
                if interval is None or not interval.defined:
                    continue
                if not interval.has_interval:
                    too_few = True
                    continue
                groups = kinds.setdefault(interval.description(), [])
                if trace.group not in groups:
                    groups.append(trace.group)
    if not kinds and not too_few:
        return ""
    if len(kinds) == 1:
        parts = list(kinds)
    else:
        parts = [f"{kind} ({', '.join(groups)})" for kind, groups in kinds.items()]
    text = "Error bars: " + "; ".join(parts) if parts else "Error bars: none"
    text += " (the baseline's variance included)" if parts else ""
    if too_few:
        text += "; a bar without one rests on too few runs for an interval"
    return text + "."


def relative(
    *,
    groups: Sequence[Group],
    policies: Sequence[str],
    metrics: Sequence[str],
    baseline: str,
    values: FinalValues,
    seed_of: Mapping[int, int] | None = None,
    notes: list[str] | None = None,
) -> list[BarPanel]:
    """Figure 11: per policy, per metric, one bar per non-baseline group: ``(mean_x - b)
    / |b| * 100``, b the baseline group's mean final value of that policy and metric
    (:func:`trainer.stats.relative_improvement`), with its 95% interval as the error bar
    (:func:`group_interval`: paired by seed through ``seed_of``, run id -> seed, when
    every run pairs). No bar where b is 0 or unknown (noted)."""
    seed_of = {} if seed_of is None else seed_of
    notes = [] if notes is None else notes
    by_label = {group.label: group for group in groups}
    base_group = by_label.get(baseline)
    others = [group for group in groups if group.label != baseline]
    if base_group is not None and not others:
        notes.append(f"only the baseline group {baseline!r}: nothing to compare with it")
    panels = []
    for policy in policies:
        panel = BarPanel(
            policy=policy,
            title=m.policy_label(policy),
            y_label=f"relative improvement over {baseline} (%)",
            x_label="",
            categories=list(metrics),
            category_labels=[m.label(metric) for metric in metrics],
            base=np.full(len(metrics), np.nan),
            base_label=f"{baseline} mean",
        )
        rows: dict[str, list[list[float]]] = {
            group.label: [[math.nan] * len(metrics) for _ in group.runs] for group in others
        }
        intervals: dict[str, list[RelativeInterval | None]] = {
            group.label: [None] * len(metrics) for group in others
        }
        base_runs = base_group.runs if base_group else []
        for k, metric in enumerate(metrics):
            base_finals = _finals(base_runs, policy, metric, values)
            panel.base[k] = _mean(base_finals)
            for group in others:
                finals = _finals(group.runs, policy, metric, values)
                found = relative_improvement(finals, base_finals)
                for row, value in zip(rows[group.label], found.per_run, strict=True):
                    row[k] = value
                if found.defined:
                    intervals[group.label][k] = group_interval(
                        group.runs, finals, base_runs, base_finals, seed_of
                    )
            # The estimator's reasons (NO_BASELINE, ZERO_BASELINE), said once per metric.
            where = f"{panel.title} · {m.label(metric)}"
            if not math.isfinite(panel.base[k]):
                notes.append(f"{where}: no {baseline} run has a value, so no bars")
            elif panel.base[k] == 0:
                notes.append(
                    f"{where}: the {baseline} mean is 0, so the relative improvement is "
                    "undefined; its bars are left out"
                )
        for group in others:
            group_rows = rows[group.label]
            if any(_finite(v) for row in group_rows for v in row):
                panel.traces.append(_interval_trace(group, group_rows, intervals[group.label]))
        if not panel.traces:
            if (panel.base == 0).any():
                panel.message = f"the {baseline} mean is 0: no relative improvement"
            elif not np.isfinite(panel.base).any():
                panel.message = f"no {baseline} value"
            else:
                panel.message = "no values"
        panels.append(panel)
    return panels

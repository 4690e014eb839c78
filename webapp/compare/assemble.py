"""Assemble a comparison (curves, groups, bands) and its summary table from arrays.

The pure half of the comparison engine: no database, no Django. The reads (which series,
their step range, their points as binary columns or rows) are
:mod:`webapp.compare.selectors`; this module takes what they return, plain numpy
arrays and dicts, and computes everything else, so that it is testable with arrays made
by hand.

The grid: ``lo``/``hi`` are the lowest and highest step of the selected metric series,
``G = min(buckets, hi - lo + 1)`` buckets of equal width, bucket
``b = (step - lo) * G // (hi - lo + 1)`` (integer arithmetic: the same as
``width_bucket(step, lo, hi + 1, G) - 1``, without float rounding at the edges).
:func:`buckets_of` takes per (series, bucket) the mean step, the mean value
(``sum(value) / count``: a NaN or an infinity in the bucket propagates) and, for the
wall-time axis, the mean and minimum of the known wall times; :func:`buckets_from_rows`
is the same in Python over point rows (the portable path, and the reference of the
tests).

Then, per panel (policy, metric) and group (:func:`comparison_assemble`):

- a run's curve is its bucket means (NaN where the bucket is empty);
- x: ``step`` is the bucket's mean step; ``rollouts`` / ``tokens`` is the run's
  ``perf/rollouts_total`` / ``perf/response_tokens_total`` of the same policy, linearly
  interpolated at that mean step from the counter's own bucket means (a metric logged
  every step gets the counter's bucket mean; one logged every 10 steps gets the counter
  at its own steps; the counters are 0 at step 0, before any rollout, so the step-0
  evaluation sits at x = 0; see :func:`counter_x` for the ends); ``wall_time`` is the
  bucket's mean wall time minus the run's first wall time (the earliest of its loaded
  points), in seconds. A policy where a run lacks the counter (``_pool`` has none) or
  every wall time is missing is plotted against step instead, with a note;
- smoothing (:func:`webapp.compare.stats.ema`, TensorBoard's debiased EMA) is applied to
  each run's curve on the grid first, then runs are aggregated
  (:func:`webapp.compare.stats.aggregate`): mean, band and ``n`` at each bucket over the
  runs with a finite value there; ``raw_mean`` is the same mean without smoothing;
- a group's x at a bucket is the mean x of its runs that have a point there; buckets
  where none has one are left out (a bucket whose values are all NaN stays, with mean
  NaN, so that a diverging run shows).

Names people read (panel titles, axis labels, notes) come from the trainer's metric
catalogue (:func:`trainer.metrics.describe`; ``_pool`` reads "pool mean"); the JSON and
the CSV keep the keys. A 95% CI band resting on fewer than :data:`CI_MIN_RUNS` runs
somewhere gets a note (:func:`small_n_note`).

Shapes: ``G`` is the number of buckets of the grid; a :class:`Buckets` holds ``[G]``
arrays; a :class:`Trace` holds ``[K]`` arrays over the ``K <= G`` buckets where its
group has points. Steps are the trainer's step numbers, wall times seconds (Unix time in
the points, seconds since the run's first point on the x-axis).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trainer import metrics as m
from webapp.compare import grouping
from webapp.compare.palette import styles_for
from webapp.compare.spec import MAX_POLICIES, ComparisonSpec
from webapp.compare.stats import (
    MeanStd,
    RunSummary,
    aggregate,
    ema,
    mean_std_n,
    run_summary,
)

if TYPE_CHECKING:
    from webapp.runs.models import Run

X_COUNTERS = {"rollouts": m.ROLLOUTS_TOTAL, "tokens": m.RESPONSE_TOKENS_TOTAL}
X_LABELS = {
    "step": "step",
    "rollouts": "rollouts",
    "tokens": "response tokens",
    "wall_time": "wall time (s)",
}
STATISTICS = ("final", "best", "mean")
COUNTER_NAMES = {"rollouts": "rollout count", "tokens": "response-token count"}
CI_MIN_RUNS = 3
"""A 95% CI over fewer runs than this is noted: with n = 2 it spans +-12.7 standard
errors (Student's t with one degree of freedom), with n = 1 there is none."""

SeriesIndex = dict[tuple[int, str, str], int]
"""(run id, policy, metric key) -> series id, for the series a comparison loaded."""


# --------------------------------------------------------------------------- results


@dataclass
class Group:
    """A group of runs: ``label`` its value at the grouping key (the key of the JSON and
    CSV files), ``name`` what people read (:func:`webapp.compare.grouping.group_name`,
    "sgt.lambda_sgt = 0.05"; the label when not given)."""

    label: str
    colour: str
    dash: str
    runs: list[int]
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.label


@dataclass
class Trace:
    """One group's line in a panel: ``[K]`` arrays over the K buckets it has points in."""

    group: str
    colour: str
    dash: str
    x: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    n: np.ndarray
    raw_mean: np.ndarray


class PolicyMetricLabels:
    """The names people read of a ``policy`` and ``metric`` (a panel's, a significance
    row's), from the metric catalogue."""

    policy: str
    metric: str

    @property
    def policy_label(self) -> str:
        """The policy as people read it ("pool mean" for ``_pool``)."""
        return m.policy_label(self.policy, self.metric)

    @property
    def metric_label(self) -> str:
        """The metric's display name: "Validation reward@1"."""
        return m.label(self.metric)


@dataclass
class Panel(PolicyMetricLabels):
    policy: str
    metric: str
    x_label: str
    traces: list[Trace] = field(default_factory=list)

    @property
    def y_label(self) -> str:
        """The metric's display name with its unit, for the y-axis: "Step time (s)"."""
        return m.axis_label(self.metric)

    @property
    def title(self) -> str:
        return f"{self.policy_label} · {self.metric_label}"

    @property
    def name(self) -> str:
        """The panel in a note: "pool mean / Validation reward@1"."""
        return f"{self.policy_label} / {self.metric_label}"


@dataclass
class Comparison:
    spec: ComparisonSpec
    groups: list[Group]
    panels: list[Panel]
    notes: list[str]
    x_label: str
    runs: list[Run]
    grid: int = 0  # number of buckets of the common grid (0: no points at all)
    ci_note: str | None = None  # the 95% CI rests on n < 3 runs somewhere (also a note)


# --------------------------------------------------------------------------- selection


def groups_of(runs: Sequence[Run], group_by: str) -> list[Group]:
    """Runs grouped by their label at ``group_by``, in display order, with their style.

    Reads ``run.config``, ``run.experiment.name`` and ``run.pk`` only (select the
    experiment with the runs)."""
    members: dict[str, list[int]] = defaultdict(list)
    for run in runs:
        label = grouping.group_label(run.config, run.experiment.name, group_by)
        members[label].append(run.pk)
    labels = grouping.ordered(members)
    styles = styles_for(labels)
    return [
        Group(
            label,
            styles[label].colour,
            styles[label].dash,
            sorted(members[label]),
            grouping.group_name(group_by, label),
        )
        for label in labels
    ]


def policies_of(runs: Sequence[Run], spec: ComparisonSpec, notes: list[str]) -> list[str]:
    """The spec's policies, or every pool policy of the runs: the first run's pool order,
    then the others as they appear (at most :data:`MAX_POLICIES`)."""
    if spec.policies:
        return list(spec.policies)
    names: list[str] = []
    for run in runs:
        names += [name for name in run.policy_names if name not in names and name != m.POOL]
    if len(names) > MAX_POLICIES:
        notes.append(
            f"{len(names)} policies in these runs; showing the first {MAX_POLICIES} "
            "(choose policies to see others)"
        )
    return names[:MAX_POLICIES]


# --------------------------------------------------------------------------- buckets


@dataclass
class Buckets:
    """One series on the grid: ``[G]`` arrays, NaN where ``present`` is False.

    ``present`` (bool): the bucket has points; ``step``: their mean step; ``value``:
    their mean value; ``wall``: the mean of their known wall times (s, Unix time);
    ``wall_first``: the series' earliest known wall time (NaN without one)."""

    present: np.ndarray
    step: np.ndarray
    value: np.ndarray
    wall: np.ndarray
    wall_first: float


def empty_buckets(size: int) -> Buckets:
    """A series with no points on a grid of ``size`` buckets."""
    nan = np.full(size, np.nan)
    return Buckets(np.zeros(size, dtype=bool), nan.copy(), nan.copy(), nan.copy(), math.nan)


def bucket_of(step: int, lo: int, hi: int, size: int) -> int:
    """The bucket of ``step`` on the grid of ``size`` buckets over [lo, hi]."""
    return (step - lo) * size // (hi - lo + 1)


BUCKET_TABLE_MAX_SPAN = 1 << 21
"""The longest step range whose bucket of each step :func:`bucket_table` lists (8 MiB of
int32); a longer one is bucketed by arithmetic."""


def bucket_table(lo: int, hi: int, size: int) -> np.ndarray | None:
    """The bucket of every step of [lo, hi] on the grid of ``size`` buckets (``[hi - lo +
    1]``, indexed by ``step - lo``), or None when the range is longer than
    :data:`BUCKET_TABLE_MAX_SPAN`. One table serves every series of a comparison: a
    lookup per point instead of an integer multiply and floor division (about a third
    of :func:`buckets_of`'s time)."""
    span = hi - lo + 1
    if span > BUCKET_TABLE_MAX_SPAN:
        return None
    return (np.arange(span, dtype=np.int64) * size // span).astype(np.intp)


def buckets_of(
    steps: np.ndarray,
    values: np.ndarray,
    walls: np.ndarray | None,
    lo: int,
    hi: int,
    size: int,
    *,
    table: np.ndarray | None = None,
) -> Buckets:
    """One series' ``[size]`` buckets from its points: per bucket the mean step, the mean
    value (a NaN or an infinity propagates) and the mean of the known wall times, and
    the series' first known wall time.

    ``steps`` (integers), ``values`` (float64) and ``walls`` (float64 seconds, NaN where
    unknown; None: not loaded) are ``[N]`` arrays of its N points (any byte order);
    points outside [lo, hi] are left out. ``table`` is :func:`bucket_table` of the grid,
    where the caller buckets many series on it."""
    offsets = steps.astype(np.intp) - lo
    inside = (offsets >= 0) & (offsets <= hi - lo)
    if not inside.all():
        offsets, values = offsets[inside], values[inside]
        walls = None if walls is None else walls[inside]
    bucket = table[offsets] if table is not None else offsets * size // (hi - lo + 1)
    count = np.bincount(bucket, minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        # an empty bucket's 0 / 0 is its NaN
        step = np.bincount(bucket, weights=offsets + lo, minlength=size) / count
        value = np.bincount(bucket, weights=values, minlength=size) / count
    found = Buckets(count > 0, step, value, np.full(size, np.nan), math.nan)
    if walls is None:
        return found
    known = ~np.isnan(walls)
    if not known.any():
        return found
    wall_count = np.bincount(bucket[known], minlength=size)
    wall_sums = np.bincount(bucket[known], weights=walls[known], minlength=size)
    with_wall = wall_count > 0
    found.wall[with_wall] = wall_sums[with_wall] / wall_count[with_wall]
    found.wall_first = float(walls[known].min())
    return found


def buckets_of_many(
    steps: Sequence[bytes],
    values: Sequence[bytes],
    lo: int,
    hi: int,
    size: int,
    *,
    table: np.ndarray | None = None,
) -> list[Buckets]:
    """:func:`buckets_of` without wall times for many series at once, equal to it bit for
    bit: ``steps[i]`` / ``values[i]`` are series i's packed columns (big-endian int4
    steps and float8 values, aligned; points outside [lo, hi] are left out).

    Why: a comparison buckets 2,000 series of about 1,000 points. Called per series,
    :func:`buckets_of`'s dozen numpy calls cost more in their fixed overhead than in
    their work; here one ``bincount`` per quantity covers every series, keyed by
    ``series * size + bucket``. ``bincount`` adds a key's weights in input order, which
    is each series' own order, so the sums (and the means) are those of
    :func:`buckets_of`."""
    n = len(steps)
    if n == 0:
        return []
    lengths = np.fromiter((len(column) // 4 for column in steps), np.intp, n)
    step_all = np.frombuffer(b"".join(steps), dtype=">i4")
    value_all = np.frombuffer(b"".join(values), dtype=">f8")
    offsets = step_all.astype(np.intp) - lo
    owner = np.repeat(np.arange(n, dtype=np.intp) * size, lengths)
    inside = (offsets >= 0) & (offsets <= hi - lo)
    if not inside.all():
        offsets, value_all, owner = offsets[inside], value_all[inside], owner[inside]
    bucket = table[offsets] if table is not None else offsets * size // (hi - lo + 1)
    key = owner + bucket
    count = np.bincount(key, minlength=n * size).reshape(n, size)
    with np.errstate(invalid="ignore", divide="ignore"):
        # an empty bucket's 0 / 0 is its NaN
        step = np.bincount(key, weights=offsets + lo, minlength=n * size).reshape(n, size) / count
        value = np.bincount(key, weights=value_all, minlength=n * size).reshape(n, size) / count
    present = count > 0
    wall = np.full((n, size), np.nan)
    return [Buckets(present[i], step[i], value[i], wall[i], math.nan) for i in range(n)]


@dataclass
class _BucketSums:
    """The points of one (series, bucket) so far (:func:`buckets_from_rows`)."""

    count: int = 0
    step_sum: float = 0.0
    values: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)


def buckets_from_rows(
    rows: Iterable[tuple[int, int, float | None, float | None]],
    series_ids: Sequence[int],
    lo: int,
    hi: int,
    size: int,
) -> dict[int, Buckets]:
    """:func:`buckets_of` in Python, over point rows ``(series id, step, value, wall
    time)`` with steps in [lo, hi], ordered by series and step: per series of
    ``series_ids``, its ``[size]`` buckets.

    A None value (SQLite's NaN) counts as NaN; None wall times are ignored, as SQL's
    ``avg``/``min`` ignore NULLs.
    """
    sums: dict[tuple[int, int], _BucketSums] = {}
    for series_id, step, value, wall in rows:
        key = (series_id, bucket_of(step, lo, hi, size))
        entry = sums.setdefault(key, _BucketSums())
        entry.count += 1
        entry.step_sum += step
        entry.values.append(math.nan if value is None else value)
        if wall is not None:
            entry.walls.append(wall)
    found = {pk: empty_buckets(size) for pk in series_ids}
    for (series_id, bucket), entry in sums.items():
        target = found[series_id]
        target.present[bucket] = True
        target.step[bucket] = entry.step_sum / entry.count
        with np.errstate(invalid="ignore"):
            target.value[bucket] = float(np.mean(entry.values))
        target.wall[bucket] = float(np.mean(entry.walls)) if entry.walls else math.nan
        if entry.walls:
            first = min(entry.walls)
            if math.isnan(target.wall_first) or first < target.wall_first:
                target.wall_first = first
    return found


# --------------------------------------------------------------------------- x-axis


def run_wall_first(index: SeriesIndex, found: Mapping[int, Buckets]) -> dict[int, float]:
    """Per run, its earliest wall time (s) over the loaded series (runs without one:
    absent)."""
    first: dict[int, float] = {}
    for (run_id, _policy, _key), series_id in index.items():
        value = found[series_id].wall_first
        if math.isfinite(value) and value < first.get(run_id, math.inf):
            first[run_id] = value
    return first


def counter_x(curve: Buckets, counter: Buckets) -> np.ndarray:
    """The counter at the curve's mean steps (``[G]``, NaN where the curve has no point
    or the counter is unknown there), linearly interpolated between the counter's own
    bucket means (step, value).

    A consumption counter is 0 at step 0 (the trainer logs it from step 1, after the
    first rollouts), so (0, 0) is one of its known points when it has none at step 0:
    the step-0 evaluation is at x = 0. After its last bucket mean the line through the
    two nearest is extended, but only within a bucket where the counter has points;
    further out the x is unknown (NaN)."""
    usable = counter.present & np.isfinite(counter.value) & np.isfinite(counter.step)
    x = np.full(curve.step.shape, np.nan)
    if not usable.any():
        return x
    positions = np.flatnonzero(curve.present)
    steps = curve.step[positions]
    known_steps, known = counter.step[usable], counter.value[usable]
    if known_steps[0] > 0:
        known_steps, known = np.r_[0.0, known_steps], np.r_[0.0, known]
    values = np.interp(steps, known_steps, known)
    if known.size >= 2:
        for outside, (a, b) in (
            (steps < known_steps[0], (0, 1)),
            (steps > known_steps[-1], (-2, -1)),
        ):
            slope = (known[b] - known[a]) / (known_steps[b] - known_steps[a])
            values[outside] = known[a] + (steps[outside] - known_steps[a]) * slope
    beyond = (steps < known_steps[0]) | (steps > known_steps[-1])
    values[beyond & ~usable[positions]] = np.nan
    x[positions] = values
    return x


def x_mode(
    spec: ComparisonSpec,
    policy: str,
    index: SeriesIndex,
    wall_first: Mapping[int, float],
    notes: list[str],
) -> str:
    """The x-axis of ``policy``'s panels: the spec's, or step when some run lacks it
    (with a note)."""
    with_data = {r for (r, p, key) in index if p == policy and key in spec.metrics}
    counter_key = X_COUNTERS.get(spec.x)
    if counter_key:
        lacking = [r for r in sorted(with_data) if (r, policy, counter_key) not in index]
        if lacking:
            notes.append(
                f"{m.policy_label(policy)}: no {COUNTER_NAMES[spec.x]} ({counter_key}) "
                f"in run(s) {ids_text(lacking)}; its panels are plotted against step"
            )
            return "step"
    elif spec.x == "wall_time":
        lacking = [r for r in sorted(with_data) if r not in wall_first]
        if lacking:
            notes.append(
                f"{m.policy_label(policy)}: no wall times in run(s) {ids_text(lacking)}; "
                f"its panels are plotted against step"
            )
            return "step"
    return spec.x


def x_of(
    mode: str,
    curve: Buckets,
    run_id: int,
    policy: str,
    index: SeriesIndex,
    found: Mapping[int, Buckets],
    wall_first: Mapping[int, float],
) -> np.ndarray:
    """The ``[G]`` x of ``curve`` (run ``run_id``, ``policy``) on axis ``mode``: its mean
    steps, its wall times in seconds since the run's first, or the run's counter there."""
    if mode == "step":
        return curve.step
    if mode == "wall_time":
        return curve.wall - wall_first[run_id]
    return counter_x(curve, found[index[(run_id, policy, X_COUNTERS[mode])]])


def ids_text(ids: Iterable[int]) -> str:
    """Run ids for a note: "1, 2, 3", the first ten and how many more."""
    ordered = sorted(set(ids))
    shown = ", ".join(str(pk) for pk in ordered[:10])
    return shown + (f" and {len(ordered) - 10} more" if len(ordered) > 10 else "")


# --------------------------------------------------------------------------- build


def comparison_assemble(
    *,
    spec: ComparisonSpec,
    runs: Sequence[Run],
    groups: list[Group],
    policies: list[str],
    index: SeriesIndex,
    found: Mapping[int, Buckets],
    grid: int,
    notes: list[str],
) -> Comparison:
    """The comparison of ``runs`` (grouped as ``groups``, each run in one) from their
    loaded series.

    ``index`` names the loaded series (the spec's metrics, and the x-axis counter when
    the spec's x is one); ``found`` has each one's buckets on the common grid of
    ``grid`` buckets (``[grid]`` arrays; ``grid`` 0: the metric series have no points,
    and every panel is empty). ``notes`` (the selection's so far) gets the comparison's
    own appended, and becomes :attr:`Comparison.notes`."""
    run_count = sum(len(group.runs) for group in groups)  # every run is in one group
    comparison = Comparison(
        spec=spec,
        groups=groups,
        panels=[],
        notes=notes,
        x_label=X_LABELS[spec.x],
        runs=list(runs),
    )
    if grid == 0:
        notes.append("no points of these metrics and policies in these runs")
        comparison.panels = [
            Panel(policy, metric, X_LABELS[spec.x])
            for policy in policies
            for metric in spec.metrics
        ]
        return comparison
    comparison.grid = grid
    wall_first = run_wall_first(index, found)

    # Every (panel, group, run) curve with its x; smoothed all at once below.
    panels: list[Panel] = []
    slots: list[tuple[int, int]] = []  # (panel index, group index) of each curve
    presents: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    xs: list[np.ndarray] = []
    for policy in policies:
        mode = x_mode(spec, policy, index, wall_first, notes)
        for metric in spec.metrics:
            panel = Panel(policy, metric, X_LABELS[mode])
            lacking = []
            for g, group in enumerate(groups):
                for run_id in group.runs:
                    series_id = index.get((run_id, policy, metric))
                    if series_id is None:
                        lacking.append(run_id)
                        continue
                    curve = found[series_id]
                    presents.append(curve.present)
                    ys.append(curve.value)
                    xs.append(x_of(mode, curve, run_id, policy, index, found, wall_first))
                    slots.append((len(panels), g))
            if lacking:
                notes.append(
                    f"{panel.name}: no data in run(s) {ids_text(lacking)}"
                    if len(lacking) < run_count
                    else f"{panel.name}: no data in any run"
                )
            panels.append(panel)
    # A curve's point: its bucket has points and a finite x (NaN elsewhere, in both).
    present = np.array(presents) & np.isfinite(xs) if xs else np.zeros((0, grid), dtype=bool)
    raw = np.where(present, ys, np.nan) if ys else np.zeros((0, grid))
    smoothed = ema(raw, spec.smooth) if spec.smooth > 0 else raw
    present_x = np.where(present, xs, np.nan) if xs else np.zeros((0, grid))

    rows_of: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, slot in enumerate(slots):
        rows_of[slot].append(row)
    for (p, g), rows in sorted(rows_of.items()):
        group = groups[g]
        x_rows = present_x[rows]
        has_point = np.isfinite(x_rows)
        keep = has_point.any(axis=0)
        if not keep.any():
            continue
        count = np.maximum(has_point.sum(axis=0), 1)
        x = np.where(has_point, x_rows, 0.0).sum(axis=0) / count
        band = aggregate(smoothed[rows], spec.band)
        raw_mean = aggregate(raw[rows], "none").mean
        panels[p].traces.append(
            Trace(
                group=group.label,
                colour=group.colour,
                dash=group.dash,
                x=x[keep],
                mean=band.mean[keep],
                lower=band.lower[keep],
                upper=band.upper[keep],
                n=band.n[keep],
                raw_mean=raw_mean[keep],
            )
        )
    if spec.log_y:
        for panel in panels:
            if any(np.any(trace.lower <= 0) or np.any(trace.mean <= 0) for trace in panel.traces):
                notes.append(f"{panel.name}: values <= 0 are not shown on a log scale")
    comparison.panels = panels
    if spec.band == "ci95":
        comparison.ci_note = small_n_note(panels)
        if comparison.ci_note:
            notes.append(comparison.ci_note)
    return comparison


def small_n_runs(panels: Sequence[Panel]) -> dict[str, int | None]:
    """Per group whose 95% CI rests somewhere on fewer than :data:`CI_MIN_RUNS` runs: its
    largest ``n`` when that is below the minimum everywhere, else None (only in places),
    in the order the groups first appear."""
    found: dict[str, int | None] = {}
    for panel in panels:
        for trace in panel.traces:
            n = np.asarray(trace.n)
            shown = n[n > 0]
            if shown.size == 0 or shown.min() >= CI_MIN_RUNS:
                continue
            largest = int(shown.max())
            previous = found.get(trace.group, 0)
            if largest >= CI_MIN_RUNS or previous is None:
                found[trace.group] = None
            else:
                found[trace.group] = max(previous, largest)
    return found


def small_n_note(panels: Sequence[Panel]) -> str | None:
    """The note that a 95% CI rests on n < 3 runs, naming the groups; None if none."""
    found = small_n_runs(panels)
    if not found:
        return None
    groups = ", ".join(
        f"{group} (n = {n})" if n is not None else f"{group} (n < {CI_MIN_RUNS} in places)"
        for group, n in found.items()
    )
    return (
        f"The 95% CI rests on fewer than {CI_MIN_RUNS} runs for {groups}: "
        "with n = 2 it spans ±12.7 standard errors, with n = 1 there is no band."
    )


# --------------------------------------------------------------------------- summary


@dataclass
class Cell:
    group: str
    final: MeanStd
    best: MeanStd
    mean: MeanStd

    def stat(self, name: str) -> MeanStd:
        return getattr(self, name)


@dataclass
class SummaryRow:
    policy: str
    cells: list[Cell]


@dataclass
class Summary:
    """Per policy x group: final, best and mean value per run, then mean +- std over the
    group's runs. ``best[statistic][policy]`` is the group with the highest mean (the
    lowest with ``lower_is_better``), None when no group has a value."""

    metric: str
    groups: list[Group]
    policies: list[str]
    rows: list[SummaryRow]
    best: dict[str, dict[str, str | None]]
    lower_is_better: bool
    notes: list[str]
    group_by: str = "regime"  # the grouping key (the LaTeX table's group column names it)


def summaries_from_rows(
    rows: Iterable[tuple[int, float | None]],
    series_ids: Sequence[int],
    *,
    lower_is_better: bool,
) -> dict[int, RunSummary]:
    """Per series of ``series_ids``: :class:`webapp.compare.stats.RunSummary` of its
    points, given as rows ``(series id, value)`` ordered by series and step (a None value
    counts as NaN)."""
    values: dict[int, list[float]] = {pk: [] for pk in series_ids}
    for series_id, value in rows:
        values[series_id].append(math.nan if value is None else value)
    return {
        pk: run_summary(points, lower_is_better=lower_is_better) for pk, points in values.items()
    }


def summary_assemble(
    *,
    metric: str,
    groups: list[Group],
    policies: list[str],
    index: Mapping[tuple[int, str], int],
    per_series: Mapping[int, RunSummary],
    lower_is_better: bool,
    notes: list[str],
) -> Summary:
    """The summary table of ``metric``: ``index`` maps (run id, policy) to the series of
    ``metric`` and ``per_series`` each series to its run summary; per policy x group the
    mean +- std of the runs' final, best and mean values, and the best group of each."""
    rows = []
    best: dict[str, dict[str, str | None]] = {name: {} for name in STATISTICS}
    for policy in policies:
        cells = []
        for group in groups:
            summaries = [
                per_series[index[(run_id, policy)]]
                for run_id in group.runs
                if (run_id, policy) in index
            ]
            cells.append(
                Cell(
                    group=group.label,
                    final=mean_std_n([s.final for s in summaries]),
                    best=mean_std_n([s.best for s in summaries]),
                    mean=mean_std_n([s.mean for s in summaries]),
                )
            )
        for name in STATISTICS:
            best[name][policy] = best_group(cells, name, lower_is_better)
        rows.append(SummaryRow(policy, cells))
    if not index:
        notes.append(f"no run has {m.label(metric)} for these policies")
    return Summary(metric, groups, policies, rows, best, lower_is_better, notes)


def best_group(cells: Sequence[Cell], name: str, lower_is_better: bool) -> str | None:
    """The group whose mean of statistic ``name`` is best; the first one on a tie."""
    chosen: Cell | None = None
    for cell in cells:
        value = cell.stat(name).mean
        if value is None:
            continue
        if chosen is None:
            chosen = cell
            continue
        current = chosen.stat(name).mean
        assert current is not None
        if (value < current) if lower_is_better else (value > current):
            chosen = cell
    return None if chosen is None else chosen.group

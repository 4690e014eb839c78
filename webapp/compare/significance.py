"""The compare page's significance view, as pure assembly (no Django): per metric, policy
and non-baseline group, the difference to the baseline group at the final step (or at a
chosen step) with its 95% interval, n, p and Holm's adjusted p, and one sentence
(SPEC section 10; the statistics are :mod:`trainer.stats`).

One number per (run, policy, metric): its :class:`webapp.compare.bars.FinalValue` (the
last finite value, at or before the chosen step when there is one). Then per comparison
(group x vs baseline b):

- **paired t** when at least two seeds pair: runs are paired by seed, a seed pairing
  when it has exactly one run with a value in each group; the estimate is the mean of
  the differences x_seed - b_seed and the interval :func:`trainer.stats.paired_t` (n =
  pairs, df = n - 1). Runs with a value but no partner are named in the row's note,
  left out of the paired interval.
- **Welch** otherwise (fewer than two pairs: different seeds, or a seed with several
  runs in a group): mean(x) - mean(b) over every run with a value,
  :func:`trainer.stats.welch`; the row's note says why.

With several comparisons shown, their p-values are adjusted together by Holm-Bonferroni
(:func:`trainer.stats.holm`): the family is every comparison on the page (metrics x
policies x groups) with a p-value, and :attr:`Significance.correction` names it. A
comparison named the primary endpoint (``primary=<policy>|<metric>|<group>``,
:class:`Primary`) is kept out of that family: it keeps its own p, is marked in the table,
and its sentence names the family (``bench/regimes.py`` does the same, so the same
endpoint has the same p in both). A comparison without a spread (every seed moved by the
same amount) or with one seed has no p: it is not tested and not in the family; one
with one seed links to the sweep form of its experiment. The title names the tests
actually used (:attr:`Significance.title`). With no policy chosen, the pool mean
(``_pool``) is compared too on the metrics it is logged for (val/reward@1): the pool's
net effect. A run without a value is named in a note, never dropped silently.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from trainer import metrics as m
from trainer.stats import LEVEL, METHODS, PAIRED, Interval, holm, paired_t, sentence, welch
from webapp.compare.assemble import Group, PolicyMetricLabels, ids_text
from webapp.compare.bars import MAX_BASELINE, BarOptions, FinalValues, Query, full_query
from webapp.compare.spec import METRIC_PATTERN, POLICY_PATTERN, ComparisonSpec, SpecError

TITLE = "Significance"
"""The view's title before any test is known; :attr:`Significance.title` adds the tests."""
NO_PAIRS = "no seed is in both groups"
MAX_SEEDS_SHOWN = 12
PRIMARY_PARAM = "primary"
PRIMARY_SEPARATOR = "|"


@dataclass(frozen=True)
class Primary:
    """The comparison named the primary endpoint: ``policy``'s ``metric``, ``group``
    against the baseline. Kept out of the Holm family (its own p)."""

    policy: str
    metric: str
    group: str

    @classmethod
    def from_query(cls, query: Query) -> Primary | None:
        """``primary=<policy>|<metric>|<group>`` (the group may contain "|"), None when
        absent or empty; :class:`webapp.compare.spec.SpecError` naming the parameter for
        a malformed one. Whether such a comparison is on the page is said by
        :func:`significance_rows` (a note), not here."""
        raw = (query.get(PRIMARY_PARAM, "") or "").strip()
        if not raw:
            return None
        parts = raw.split(PRIMARY_SEPARATOR, 2)
        usage = f"{PRIMARY_PARAM}: <policy>|<metric>|<group> (e.g. qwen|val/reward@1|sgt)"
        if len(parts) != 3:
            raise SpecError(f"{usage}, not {raw[:80]!r}")
        policy, metric, group = (part.strip() for part in parts)
        if not POLICY_PATTERN.match(policy):
            raise SpecError(f"{usage}: {policy[:80]!r} is not a policy name")
        if not METRIC_PATTERN.match(metric):
            raise SpecError(f"{usage}: {metric[:80]!r} is not a metric name")
        if not group or len(group) > MAX_BASELINE or "\x00" in group:
            raise SpecError(f"{usage}: the group is a label of 1 to {MAX_BASELINE} characters")
        return cls(policy, metric, group)

    @property
    def text(self) -> str:
        """The parameter's value: "qwen|val/reward@1|sgt"."""
        return PRIMARY_SEPARATOR.join((self.policy, self.metric, self.group))

    @property
    def label(self) -> str:
        """As people read it: "qwen · Validation reward@1 · sgt"."""
        policy = m.policy_label(self.policy, self.metric)
        return f"{policy} · {m.label(self.metric)} · {self.group}"

    def names_parts(self, policy: str, metric: str, group: str) -> bool:
        """Whether this is ``group``'s comparison on ``policy``'s ``metric``."""
        return (policy, metric, group) == (self.policy, self.metric, self.group)


@dataclass(frozen=True)
class SigRow(PolicyMetricLabels):
    """One comparison: ``group`` against the baseline on ``metric`` of ``policy``.

    ``interval`` is None when either group has no value (``note`` says which);
    ``seeds``: the paired seeds (paired t) or every seed with a value (Welch);
    ``unpaired``: the runs with a value left out of the pairing; ``steps``: the steps of
    the values compared; ``primary``: the primary endpoint (out of the Holm family);
    ``sweep_url``: where to launch a sweep for an interval (a comparison with one seed,
    "" otherwise)."""

    policy: str
    metric: str
    group: str
    colour: str
    interval: Interval | None
    group_mean: float
    baseline_mean: float
    seeds: tuple[int, ...] = ()
    unpaired: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    note: str = ""
    sentence: str = ""
    primary: bool = False
    sweep_url: str = ""


@dataclass
class Significance:
    """The significance view of a comparison: its rows in order (metric, policy, group),
    the baseline group, the step (None: each run's final value), the correction applied
    (named, "" for a single comparison), the primary endpoint asked for (None: none) and
    the notes."""

    spec: ComparisonSpec
    options: BarOptions
    groups: list[Group]
    baseline: str
    step: int | None
    rows: list[SigRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    correction: str = ""
    empty: str | None = None
    level: float = LEVEL
    primary: Primary | None = None

    @property
    def view(self) -> str:
        return "significance"

    @property
    def query(self) -> str:
        """The spec and options, with the primary endpoint when one is asked for."""
        query = full_query(self.spec, self.options)
        if self.primary is not None:
            query += "&" + urlencode({PRIMARY_PARAM: self.primary.text}, safe="/@,:|")
        return query

    @property
    def title(self) -> str:
        """ "Significance (paired t, Holm)", "(Welch)", "(paired t and Welch, Holm)": the
        tests that gave a p on this page, and Holm when it adjusted them."""
        used = [
            method
            for method in METHODS
            if any(
                row.interval is not None
                and row.interval.method == method
                and math.isfinite(row.interval.p)
                for row in self.rows
            )
        ]
        named = " and ".join(used)
        if self.correction:
            named = f"{named}, Holm" if named else "Holm"
        return f"{TITLE} ({named})" if named else TITLE

    @property
    def method_text(self) -> str:
        """What the numbers are, in words (the page's note, the LaTeX table's comment)."""
        text = (
            f"{self.level:.0%} intervals of the difference to {self.baseline} at {self.where}. "
            "Paired t: runs paired by seed (the same seed in both groups), the mean of the "
            "differences and its Student t interval on n - 1 df (n = pairs). Welch: where "
            "fewer than two seeds pair, the difference of the means over all runs and "
            "Welch's interval (Welch-Satterthwaite df). p: two-sided, of a zero difference. "
            "No spread (every seed moved by the same amount) or one seed: no test, no p."
        )
        if self.correction:
            text += f" Multiplicity: {self.correction} (Holm p)."
        primary = next((row for row in self.rows if row.primary), None)
        if primary is not None and self.primary is not None:
            text += f" Primary endpoint: {self.primary.label}, its own p."
        return text

    @property
    def where(self) -> str:
        """ "the final step" or "step 40"."""
        return "the final step" if self.step is None else f"step {self.step}"


def metric_words(metric: str) -> str:
    """A metric's label as it reads inside a sentence: "validation reward@1" (the first
    letter lowered unless the first word is an acronym, "KL loss")."""
    label = m.label(metric)
    first = label.split(" ", 1)[0]
    if len(first) > 1 and first[0].isupper() and first[1:2].islower():
        return label[0].lower() + label[1:]
    return label


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def compare_groups(
    x: Mapping[int, float], b: Mapping[int, float], seed_of: Mapping[int, int]
) -> tuple[Interval | None, tuple[int, ...], tuple[int, ...], str]:
    """(interval, seeds, unpaired runs, note) of group x against baseline b, each a run
    id -> finite value map. Paired t over the seeds with exactly one run in each group when
    there are at least two; else Welch over all runs (the note says why); None without a
    value on one side."""
    if not x or not b:
        return None, (), (), ""
    x_by_seed: dict[int, list[int]] = defaultdict(list)
    b_by_seed: dict[int, list[int]] = defaultdict(list)
    for run in x:
        x_by_seed[seed_of[run]].append(run)
    for run in b:
        b_by_seed[seed_of[run]].append(run)
    pairs = sorted(
        seed
        for seed in x_by_seed.keys() & b_by_seed.keys()
        if len(x_by_seed[seed]) == 1 and len(b_by_seed[seed]) == 1
    )
    if len(pairs) >= 2:
        differences = [x[x_by_seed[s][0]] - b[b_by_seed[s][0]] for s in pairs]
        paired = {x_by_seed[s][0] for s in pairs} | {b_by_seed[s][0] for s in pairs}
        unpaired = tuple(sorted((x.keys() | b.keys()) - paired))
        note = ""
        if unpaired:
            note = (
                f"run(s) {ids_text(unpaired)} have no partner of the same seed: left out of "
                "the paired interval"
            )
        return paired_t(differences), tuple(pairs), unpaired, note
    shared = sorted(x_by_seed.keys() & b_by_seed.keys())
    if not shared:
        why = NO_PAIRS
    elif not pairs:
        why = (
            f"seed(s) {', '.join(map(str, shared[:MAX_SEEDS_SHOWN]))} have several runs in a group"
        )
    else:
        why = f"only seed {pairs[0]} is in both groups"
    seeds = tuple(sorted({seed_of[run] for run in (*x, *b)}))
    interval = welch(list(x.values()), list(b.values()))
    if interval.has_interval:
        note = f"unpaired: {why}, so Welch's interval over all runs"
    elif len(x) == 1 and len(b) == 1:
        note = "one run a group: no interval"
    else:
        note = f"unpaired: {why}; a group of one run has no interval"
    return interval, seeds, (), note


def significance_rows(
    *,
    groups: Sequence[Group],
    policies: Sequence[str],
    metrics: Sequence[str],
    baseline: str,
    values: FinalValues,
    seed_of: Mapping[int, int],
    notes: list[str],
    primary: Primary | None = None,
    sweep_url_of: Callable[[int], str] | None = None,
) -> tuple[list[SigRow], str]:
    """The comparisons (metric, policy, group order) with Holm's adjusted p set where
    more than one has a p-value, and the correction's name ("" for none).

    ``primary``: the comparison kept out of the Holm family (marked, its own p); a note
    says so when no comparison here matches it. The pool mean (``_pool`` in
    ``policies``) gives rows only on the metrics some run has its series for.
    ``sweep_url_of``: run id -> the sweep form of its experiment, linked from a
    comparison with one seed (from the side with fewer runs)."""
    by_label = {group.label: group for group in groups}
    base = by_label.get(baseline)
    others = [group for group in groups if group.label != baseline]
    rows: list[SigRow] = []
    for metric in metrics:
        for policy in policies:
            if policy == m.POOL and not _logged(values, policy, metric):
                continue  # the pool's mean is logged for a few keys only (val/reward@1)
            where = f"{m.policy_label(policy, metric)} · {m.label(metric)}"
            b, b_steps, b_missing = _values(base.runs if base else [], policy, metric, values)
            if b_missing and others:
                notes.append(f"{where}: {baseline} run(s) {ids_text(b_missing)} have no value")
            for group in others:
                x, x_steps, x_missing = _values(group.runs, policy, metric, values)
                if x_missing:
                    notes.append(
                        f"{where}: {group.label} run(s) {ids_text(x_missing)} have no value"
                    )
                interval, seeds, unpaired, note = compare_groups(x, b, seed_of)
                if interval is None:
                    side = baseline if not b else group.label
                    note = f"no {side} run has a value"
                sweep_url = ""
                if interval is not None and not interval.has_interval and sweep_url_of:
                    fewer = x if len(x) <= len(b) else b
                    sweep_url = sweep_url_of(min(fewer))
                rows.append(
                    SigRow(
                        policy=policy,
                        metric=metric,
                        group=group.label,
                        colour=group.colour,
                        interval=interval,
                        group_mean=_mean(list(x.values())),
                        baseline_mean=_mean(list(b.values())),
                        seeds=seeds,
                        unpaired=unpaired,
                        steps=tuple(sorted(set(x_steps) | set(b_steps))),
                        note=note,
                        primary=primary is not None
                        and primary.names_parts(policy, metric, group.label),
                        sweep_url=sweep_url,
                    )
                )
    if primary is not None and not any(row.primary for row in rows):
        notes.append(
            f"primary: no comparison {primary.label} against {baseline} here; every "
            "comparison is in the Holm family"
        )
    family = [
        (i, row.interval)
        for i, row in enumerate(rows)
        if row.interval is not None and math.isfinite(row.interval.p) and not row.primary
    ]
    correction = ""
    if len(family) > 1:
        adjusted = holm([interval.p for _, interval in family])
        for (i, interval), p in zip(family, adjusted, strict=True):
            rows[i] = replace(rows[i], interval=interval.adjusted(p))
        correction = f"Holm-Bonferroni over the {len(family)} comparisons shown"
        if any(row.primary for row in rows):
            correction += " other than the primary endpoint"
    return [
        replace(row, sentence=_sentence(row, baseline, len(family) if row.primary else None))
        for row in rows
    ], correction


def _logged(values: FinalValues, policy: str, metric: str) -> bool:
    """Whether some run has a value of ``policy``'s ``metric``."""
    return any(key[1:] == (policy, metric) for key in values)


def _values(
    runs: Sequence[int], policy: str, metric: str, values: FinalValues
) -> tuple[dict[int, float], list[int], list[int]]:
    """(run -> finite value, their steps, the runs without a value)."""
    found: dict[int, float] = {}
    steps: list[int] = []
    missing: list[int] = []
    for run in runs:
        value = values.get((run, policy, metric))
        if value is None or value.step is None or not math.isfinite(value.final):
            missing.append(run)
            continue
        found[run] = value.final
        steps.append(value.step)
    return found, steps, missing


def _sentence(row: SigRow, baseline: str, primary_of: int | None = None) -> str:
    """The row's sentence (:func:`trainer.stats.sentence`); the pool mean reads "the pool's
    mean validation reward@1"; Welch's note follows its interval (not a point, not none)."""
    metric = metric_words(row.metric)
    policy = row.policy_label
    if row.policy == m.POOL:
        policy, metric = "the pool", f"mean {metric}"
    if row.interval is None:
        return f"{row.group} against {baseline} on {policy}'s {metric}: {row.note}."
    text = sentence(
        row.interval,
        group=row.group,
        baseline=baseline,
        policy=policy,
        metric=metric,
        primary_of=primary_of,
    )
    shown = row.interval.has_interval and not row.interval.no_spread
    if row.interval.method != PAIRED and shown and row.note:
        text += f"; {row.note}"
    return text + "."


def step_notes(rows: Sequence[SigRow], step: int | None) -> list[str]:
    """Where the values compared come from different steps (runs of different lengths,
    or a chosen step some run logged no value at): one note per metric and policy."""
    notes = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        key = (row.policy, row.metric)
        if key in seen:
            continue
        steps = sorted({s for r in rows if (r.policy, r.metric) == key for s in r.steps})
        seen.add(key)
        if len(steps) > 1 or (step is not None and steps and steps != [step]):
            shown = ", ".join(str(s) for s in steps[:6]) + (", ..." if len(steps) > 6 else "")
            where = f"{m.policy_label(row.policy, row.metric)} · {m.label(row.metric)}"
            what = (
                "the final values" if step is None else f"the last values at or before step {step}"
            )
            notes.append(f"{where}: {what} are at step(s) {shown}")
    return notes

"""The sharing regimes on one tiny 3-policy pool, several seeds, on CPU.

    PYTHONPATH=. .venv/bin/python bench/regimes.py [--seeds 0 1 2] [--steps 30]
    PYTHONPATH=. .venv/bin/python bench/regimes.py --pool complementary \\
        [--seeds 0 1 2 3 4] [--steps 60] [--prompts 16]

Runs ``python -m trainer run`` for each regime x seed with a reduced schedule.

``--pool identical`` (the default) is the pool of ``examples/prp.json``: three policies,
three tokenizers, all warm-started on the same arithmetic. It prints a markdown table of
final and mean ``val/reward@1`` per policy per regime (mean +- std over seeds) and each
regime's wall time.

``--pool complementary`` is the pool of ``examples/complementary.json``: the same three
families, each warm-started on one skill only (addition, subtraction, multiplication;
``python -m trainer zoo build --recipe complementary``, which this script runs first), on
the mixed task. Its regimes are standalone, PRP with and without the truncated IS
correction (``prp.is_correction``), XGRPO and SGT. Per policy and skill it prints the final
``val/reward@1/<skill>`` (mean +- std over seeds) and, for each sharing regime, the mean
difference to standalone with a 95% paired bootstrap confidence interval (the seed fixes
the validation set and the train stream, so regime and standalone runs of one seed pair
up); then each PRP variant's mean ``prp/is_weight_mean``, overall and per skill of the
prompt (``prp/is_weight_mean/<skill>``: a peer's answer the learner finds unlikely, as on
its foreign skills, gets a truncated weight near 0).

``--pool gap`` (``examples/gap.json``) adds, per policy, the discrimination of each gap
slice computed from the per-seed slice values (``val/discrimination/carry`` =
reward@1/carry + reward@1/no_carry - 1, likewise overflow: 0 for a policy that answers
every prompt alike) and the pool's net effect (``_pool``, "pool mean": per seed the mean
over policies of val/reward@1, then paired). One comparison, the primary endpoint
(``--primary POLICY:METRIC``, sgt against standalone; default qwen-nocarry's
val/reward@1/carry), is kept out of the Holm family of the others, as the compare page's
significance view does with ``primary=`` (both use :mod:`trainer.stats`, so the same
endpoint gets the same p).

A small-scale check of the Mutual RL paper's claim, not a tuning target: report whatever
ordering it shows. ``--seeds 0 --steps 2`` is a smoke test of the whole pipeline.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.metrics import POOL
from trainer.stats import Interval, holm, p_number, paired_t, relative_interval

REPO = Path(__file__).resolve().parents[1]
REGIMES = ("standalone", "prp", "xgrpo", "sgt")
VAL = "val/reward@1"
DISCRIMINATION = "val/discrimination"
"""``val/discrimination/<slice>``: reward@1 on the slice + reward@1 on no_carry - 1."""
DISCRIMINATED = ("carry", "overflow")
NO_CARRY = "no_carry"
IS_WEIGHT = "prp/is_weight_mean"
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class Variant:
    """One column of the benchmark: a regime and the config overrides that make it."""

    name: str
    regime: str
    overrides: dict[str, Any]


COMPLEMENTARY_VARIANTS = (
    Variant("standalone", "standalone", {}),
    Variant("prp", "prp", {"prp": {"k_peer": 4, "is_correction": True, "c_bar": 1.0}}),
    Variant("prp-no-is", "prp", {"prp": {"k_peer": 4, "is_correction": False, "c_bar": 1.0}}),
    Variant("xgrpo", "xgrpo", {}),
    Variant("sgt", "sgt", {"sgt": {"lambda_sgt": 0.1, "k_sgt": 1}}),
)
IDENTICAL_VARIANTS = tuple(Variant(regime, regime, {}) for regime in REGIMES)
SEQUENTIAL_SFT = {"sft_steps": 15, "sft_epochs": 2}
"""The paper's sequential peer SFT: the full RL schedule, then 15 SFT steps on the buffer."""
GAP_VARIANTS = (
    *COMPLEMENTARY_VARIANTS,
    Variant("sequential_sft", "sequential_sft", {"sequential_sft": SEQUENTIAL_SFT}),
    Variant(
        "sequential_sft-base",
        "sequential_sft",
        {"sequential_sft": {**SEQUENTIAL_SFT, "sft_from": "base"}},
    ),
)
PRIMARY = ("sgt", "qwen-nocarry", VAL + "/carry")
"""The gap pool's primary endpoint (bench/RESULTS.md, stated before the runs): weak A's
final carry-slice accuracy under SGT minus under standalone (``--primary`` names another
policy and metric, still sgt against standalone)."""
Comparison = tuple[str, str, str]
"""(variant, policy, key): one variant's paired difference to standalone."""


@dataclass
class RunResult:
    """One run's curves: ``curves[policy][key][step]``, and its wall time."""

    curves: dict[str, dict[str, dict[int, float]]]
    wall_s: float

    def final(self, policy: str, key: str) -> float:
        """The value at the run's last logged step (derived keys: :meth:`value`)."""
        return self.value(policy, key, last=True)

    def start(self, policy: str, key: str) -> float:
        """The value at the run's first logged step (step 0: the warm-started policy)."""
        return self.value(policy, key, last=False)

    def value(self, policy: str, key: str, *, last: bool) -> float:
        """``key``'s last (or first) value for ``policy``. Two are derived from the
        logged ones: ``val/discrimination/<slice>`` = reward@1 on the slice + on
        no_carry - 1, and the pool mean (policy ``_pool``): the mean over the pool's
        policies of their values."""
        if policy == POOL:
            return statistics.fmean(
                self.value(name, key, last=last) for name in sorted(self.curves)
            )
        if key.startswith(DISCRIMINATION + "/"):
            part = key[len(DISCRIMINATION) + 1 :]
            on_slice = self.value(policy, f"{VAL}/{part}", last=last)
            return on_slice + self.value(policy, f"{VAL}/{NO_CARRY}", last=last) - 1.0
        curve = self.curves[policy][key]
        return curve[max(curve) if last else min(curve)]


def base_config(pool: str, regime: str) -> dict[str, Any]:
    """The example config a run of ``regime`` on ``pool`` starts from."""
    if pool == "identical":
        return json.loads(
            (REPO / f"examples/{'prp' if regime == 'standalone' else regime}.json").read_text()
        )
    return json.loads((REPO / f"examples/{pool}.json").read_text())


def run_one(
    pool: str, variant: Variant, seed: int, steps: int, prompts: int, work: Path
) -> RunResult:
    config = base_config(pool, variant.regime)
    config |= {
        "regime": variant.regime, "seed": seed, "steps": steps, "prompts_per_step": prompts,
        "val_every": max(steps // (6 if pool == "gap" else 3), 1), "checkpoint_every": steps,
        "name": f"{config['name']}-{variant.name}",
    }  # fmt: skip
    config |= variant.overrides
    config_path = work / f"{variant.name}-{seed}.json"
    config_path.write_text(json.dumps(config))
    run_dir = work / f"{variant.name}-{seed}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config_path),
         "--run-dir", str(run_dir)],
        cwd=REPO, check=True, capture_output=True, env=os.environ.copy(),
    )  # fmt: skip
    wall = time.perf_counter() - started
    curves: dict[str, dict[str, dict[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        point = json.loads(line)
        key = point["key"]
        if key.startswith((VAL, IS_WEIGHT)) and not point["policy"].startswith("_"):
            curves.setdefault(point["policy"], {}).setdefault(key, {})[point["step"]] = float(
                point["value"]
            )
    return RunResult(curves, wall)


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def bootstrap_ci(
    differences: list[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``differences`` (paired by seed)."""
    if len(differences) == 1:
        return differences[0], differences[0]
    rng = random.Random(seed)
    n = len(differences)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def run_all(
    pool: str, variants: tuple[Variant, ...], seeds: list[int], steps: int, prompts: int
) -> dict[str, list[RunResult]]:
    """Every variant x seed, in order; one line per run on stderr."""
    results: dict[str, list[RunResult]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            for seed in seeds:
                result = run_one(pool, variant, seed, steps, prompts, Path(tmp))
                results.setdefault(variant.name, []).append(result)
                print(f"{variant.name} seed {seed}: {result.wall_s:.0f}s", file=sys.stderr)
    return results


def report_identical(results: dict[str, list[RunResult]]) -> None:
    print("| regime | policy | final val/reward@1 | mean val/reward@1 | wall s / run |")
    print("| --- | --- | --- | --- | --- |")
    for regime, runs in results.items():
        for policy in sorted(runs[0].curves):
            finals = [run.final(policy, VAL) for run in runs]
            means = [
                statistics.mean(v for step, v in run.curves[policy][VAL].items() if step > 0)
                for run in runs
            ]
            wall = statistics.mean(run.wall_s for run in runs)
            print(f"| {regime} | {policy} | {_fmt(finals)} | {_fmt(means)} | {wall:.0f} |")


def paired(values: list[float], base: list[float]) -> Interval:
    """The paired difference ``values - base`` (by seed) and its 95% t-interval."""
    return paired_t([a - b for a, b in zip(values, base, strict=True)])


def _interval(interval: Interval, p: float | None = None) -> str:
    """ "+0.190 [+0.120, +0.260]", with the (Holm) p when given and finite; without a
    spread or an interval, what there is instead (no test, so no p)."""
    if not interval.has_interval:
        return f"{interval.estimate:+.3f}, one seed: no interval"
    if interval.no_spread:
        return f"{interval.estimate:+.3f} on every seed: no spread, no test"
    text = f"{interval.estimate:+.3f} [{interval.low:+.3f}, {interval.high:+.3f}]"
    return f"{text}, p {p_number(p)}" if p is not None and math.isfinite(p) else text


def part_name(key: str) -> str:
    """A row's name in the sliced tables: "carry" (val/reward@1/carry), "all"
    (val/reward@1), "discrimination/carry" (val/discrimination/carry)."""
    if key == VAL:
        return "all"
    if key.startswith(VAL + "/"):
        return key[len(VAL) + 1 :]
    return key.removeprefix("val/")


def policy_name(policy: str) -> str:
    """ "pool mean" for the pool (``_pool``), else the policy."""
    return "pool mean" if policy == POOL else policy


def endpoint_rows(run: RunResult, pool: str) -> list[tuple[str, str]]:
    """The sliced tables' (policy, key) rows, from one run's curves: per policy its
    skills or slices and the overall val/reward@1; on the gap pool also each gap slice's
    discrimination (where the slice and no_carry are logged), then the pool mean's
    val/reward@1 (the pool's net effect, with two policies or more)."""
    rows: list[tuple[str, str]] = []
    policies = sorted(run.curves)
    for policy in policies:
        logged = run.curves[policy]
        keys = sorted(key for key in logged if key.startswith(VAL + "/"))
        derived = []
        if pool == "gap" and f"{VAL}/{NO_CARRY}" in logged:
            derived = [f"{DISCRIMINATION}/{s}" for s in DISCRIMINATED if f"{VAL}/{s}" in logged]
        rows += [(policy, key) for key in (*keys, VAL, *derived)]
    if pool == "gap" and len(policies) > 1:
        rows.append((POOL, VAL))
    return rows


@dataclass
class SlicedComparisons:
    """The numbers of a sliced table: its ``rows`` ((policy, key), in table order),
    every variant's paired difference to standalone on each (``comparisons``), Holm's p
    over the family (``adjusted``: every comparison but the primary; NaN for one without a
    p: no spread, or one seed) and the ``primary`` endpoint (None: none)."""

    rows: list[tuple[str, str]]
    comparisons: dict[Comparison, Interval]
    adjusted: dict[Comparison, float]
    primary: Comparison | None

    @property
    def family(self) -> int:
        """How many comparisons Holm adjusted together (the others have no p)."""
        return sum(1 for p in self.adjusted.values() if math.isfinite(p))


def sliced_comparisons(
    results: dict[str, list[RunResult]], pool: str, primary: Comparison | None = None
) -> SlicedComparisons:
    """Every variant's paired difference to standalone (by seed: the i-th run of each
    variant is the same seed) on each of :func:`endpoint_rows`, with
    :func:`trainer.stats.paired_t`, and Holm (:func:`trainer.stats.holm`) over all but
    ``primary`` (default on the gap pool: :data:`PRIMARY`), which keeps its own p; a
    primary that is not in the table is None. The compare page's significance view with
    ``primary=`` computes the same numbers from the same values."""
    standalone = results["standalone"]
    sharing = [name for name in results if name != "standalone"]
    rows = endpoint_rows(standalone[0], pool)
    comparisons = {
        (name, policy, key): paired(
            [run.final(policy, key) for run in results[name]],
            [run.final(policy, key) for run in standalone],
        )
        for name in sharing
        for policy, key in rows
    }
    if primary is None and pool == "gap":
        primary = PRIMARY
    if primary not in comparisons:
        primary = None
    family = [c for c in comparisons if c != primary]
    adjusted = dict(zip(family, holm([comparisons[c].p for c in family]), strict=True))
    return SlicedComparisons(rows, comparisons, adjusted, primary)


def _p_words(p: float) -> str:
    """ "p = 0.004", or why there is none."""
    return f"p = {p_number(p)}" if math.isfinite(p) else "no p (no spread, or one seed)"


def report_sliced(
    results: dict[str, list[RunResult]],
    pool: str,
    out: Path | None,
    primary: Comparison | None = None,
) -> None:
    """The complementary or gap table: per policy and skill/slice (and on the gap pool
    each slice's discrimination and the pool mean), step 0 and the final value of every
    variant (mean ± std over seeds), each variant's paired difference to standalone with
    its 95% t-interval and Holm-adjusted p (one family: every comparison but the
    primary, :func:`sliced_comparisons`); the primary endpoint on its own, with a
    bootstrap interval as a labelled secondary check; then the PRP weights and the wall
    times."""
    standalone = results["standalone"]
    policies = sorted(standalone[0].curves)
    sharing = [name for name in results if name != "standalone"]
    seeds = len(standalone)
    found = sliced_comparisons(results, pool, primary)
    asked = primary or (PRIMARY if pool == "gap" else None)
    if asked is not None and found.primary is None:
        name, policy, key = asked
        print(f"Primary endpoint {policy_name(policy)}'s {key} ({name}): not in this table;")
        print("every comparison is in the Holm family.\n")
    if found.primary is not None:
        interval = found.comparisons[found.primary]
        name, policy, key = found.primary
        differences = [
            a.final(policy, key) - b.final(policy, key)
            for a, b in zip(results[name], standalone, strict=True)
        ]
        low, high = bootstrap_ci(differences)
        print(
            f"Primary endpoint: {policy_name(policy)}'s final {key}, {name} minus standalone, "
            "paired by"
        )
        print(f"seed, {interval.n} seeds: {_interval(interval)} (95% paired t-interval),")
        print(f"{_p_words(interval.p)}; as a secondary check, the 95% percentile bootstrap")
        print(f"interval of the same differences: [{low:+.3f}, {high:+.3f}].\n")
    print(f"Per policy and {'slice' if pool == 'gap' else 'skill'}: val/reward@1 at step 0 and")
    print("at the end (mean ± std over seeds); per variant, the final value and the paired")
    print("difference to standalone with its 95% t-interval and Holm-adjusted p (Holm over")
    print(f"the {found.family} comparisons other than the primary endpoint), {seeds} seeds.\n")
    if pool == "gap":
        print("discrimination/<slice>: per seed, reward@1 on the slice + reward@1 on no_carry")
        print("- 1 (0 for a policy that answers every prompt alike); pool mean: per seed, the")
        print("mean over the policies of val/reward@1 (the pool's net effect).\n")
    header = ["policy", "slice" if pool == "gap" else "skill", "step 0", "standalone"]
    header += [f"{name} (Δ [95% CI], Holm p)" for name in sharing]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for policy, key in found.rows:
        start = [run.start(policy, key) for run in standalone]
        base = [run.final(policy, key) for run in standalone]
        cells = [policy_name(policy), part_name(key), _fmt(start), _fmt(base)]
        for name in sharing:
            values = [run.final(policy, key) for run in results[name]]
            comparison = (name, policy, key)
            is_primary = comparison == found.primary
            p = None if is_primary else found.adjusted[comparison]
            mark = " **primary**" if is_primary else ""
            cells.append(f"{_fmt(values)} ({_interval(found.comparisons[comparison], p)}){mark}")
        print("| " + " | ".join(cells) + " |")
    if pool == "gap":
        _report_figure_11(results, policies)
    _report_is_weights(results, sharing, policies)
    _report_walls(results)
    if out is not None:
        out.write_text(json.dumps(_numbers(results, found), indent=1))


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _numbers(results: dict[str, list[RunResult]], found: SlicedComparisons) -> dict[str, Any]:
    """Every run's curves and every comparison, for ``--out`` (null for a number that
    does not exist: no interval, no p)."""
    return {
        "runs": {
            name: [{"curves": run.curves, "wall_s": run.wall_s} for run in runs]
            for name, runs in results.items()
        },
        "comparisons": [
            {
                "variant": name,
                "policy": policy,
                "key": key,
                "estimate": interval.estimate,
                "low": _finite_or_none(interval.low),
                "high": _finite_or_none(interval.high),
                "p": _finite_or_none(interval.p),
                "holm_p": _finite_or_none(found.adjusted.get((name, policy, key))),
                "primary": (name, policy, key) == found.primary,
            }
            for (name, policy, key), interval in found.comparisons.items()
        ],
    }


def _report_is_weights(
    results: dict[str, list[RunResult]], sharing: list[str], policies: list[str]
) -> None:
    """Each PRP variant's mean ``prp/is_weight_mean`` over steps: all peer tokens, the
    answer's digit tokens, and per skill/slice of the prompt."""
    is_keys = sorted(
        {
            key
            for name in sharing
            for run in results[name]
            for curves in run.curves.values()
            for key in curves
            if key.startswith(IS_WEIGHT + "/")
        }
    )
    if not is_keys and not any(
        IS_WEIGHT in c for r in results.values() for run in r for c in run.curves.values()
    ):
        return
    parts = [key[len(IS_WEIGHT) + 1 :] for key in is_keys]
    print(f"\nMean {IS_WEIGHT} over steps: over all peer tokens, over the answer's digit")
    print("tokens (answer), and per skill/slice of the prompt (mean ± std over seeds; a")
    print("column is empty where no step logged it).\n")
    header = ["regime", "policy", "all", *parts]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for name in sharing:
        for policy in policies:
            cells = []
            for key in (IS_WEIGHT, *is_keys):
                weights = [
                    statistics.mean(run.curves[policy][key].values())
                    for run in results[name]
                    if key in run.curves.get(policy, {})
                ]
                cells.append(_fmt(weights) if weights else "")
            if cells[0]:
                print(f"| {name} | {policy} | " + " | ".join(cells) + " |")


FIGURE_11_VARIANTS = ("sgt", "sequential_sft", "sequential_sft-base")


def _report_figure_11(results: dict[str, list[RunResult]], policies: list[str]) -> None:
    """Figure 11 on this pool: the relative improvement of the final val/reward@1 over
    standalone, the app's bar view's estimate and error bar
    (:func:`trainer.stats.relative_interval`), printed "estimate [low, high]": the 95%
    interval by the paired delta method (every variant runs the same seeds, in order),
    standalone's variance included."""
    shown = [name for name in FIGURE_11_VARIANTS if name in results]
    if not shown:
        return
    print("\nFigure 11: relative improvement of the final val/reward@1 over standalone, %:")
    print("(mean_x - mean_s) / |mean_s| [95% interval, paired delta method over the seeds,")
    print("standalone's variance included]; every seed counted.\n")
    print("| policy | standalone | " + " | ".join(shown) + " |")
    print("|" + " --- |" * (len(shown) + 2))
    for policy in policies:
        base = [run.final(policy, VAL) for run in results["standalone"]]
        cells = [policy, _fmt(base)]
        for name in shown:
            values = [run.final(policy, VAL) for run in results[name]]
            # Seeds pair by position: run_all runs every variant over the same seeds.
            found = relative_interval(dict(enumerate(values)), dict(enumerate(base)))
            if not found.defined:
                cells.append(f"n/a ({found.undefined})")
                continue
            cells.append(found.text())
        print("| " + " | ".join(cells) + " |")


def _report_walls(results: dict[str, list[RunResult]]) -> None:
    print("\n| regime | wall s / run |")
    print("| --- | --- |")
    for name, runs in results.items():
        print(f"| {name} | {statistics.mean(run.wall_s for run in runs):.0f} |")


def primary_endpoint(text: str) -> Comparison:
    """``--primary POLICY:METRIC`` as the comparison it names: sgt's POLICY's METRIC
    against standalone (a policy has no ":"; the pool mean is ``_pool``)."""
    policy, colon, metric = text.partition(":")
    if not colon or not policy or not metric:
        raise argparse.ArgumentTypeError(f"POLICY:METRIC, e.g. {PRIMARY[1]}:{PRIMARY[2]}")
    return (PRIMARY[0], policy, metric)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pool", choices=("identical", "complementary", "gap"), default="identical"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="default: 0 1 2 (identical), 0-4 (the others)"
    )
    parser.add_argument("--steps", type=int, help="default: 30 (identical), 60 (the others)")
    parser.add_argument("--out", type=Path, help="write every run's curves and comparison")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument(
        "--regimes",
        nargs="+",
        help="a subset of the pool's regimes (standalone is always run: the differences "
        "are to it); default: all",
    )
    parser.add_argument(
        "--primary",
        type=primary_endpoint,
        metavar="POLICY:METRIC",
        help="the primary endpoint, sgt against standalone, kept out of the Holm family "
        "(e.g. qwen-nocarry:val/discrimination/carry, _pool:val/reward@1); default on the "
        "gap pool: qwen-nocarry:val/reward@1/carry",
    )
    parser.add_argument(
        "--lambda-sgt",
        type=float,
        help="SGT's lambda_sgt for the sgt variant (default: 0.1, the example's)",
    )
    args = parser.parse_args()
    sliced = args.pool in ("complementary", "gap")
    seeds = args.seeds or ([0, 1, 2, 3, 4] if sliced else [0, 1, 2])
    steps = args.steps or (60 if sliced else 30)

    started = time.perf_counter()
    if sliced:
        from trainer.zoo import ZOO_RECIPES, build_zoo, default_zoo_dir

        zoo_log = lambda line: print(line, file=sys.stderr)  # noqa: E731
        build_zoo(default_zoo_dir(), ids=ZOO_RECIPES[args.pool], log=zoo_log)
    variants = {
        "identical": IDENTICAL_VARIANTS,
        "complementary": COMPLEMENTARY_VARIANTS,
        "gap": GAP_VARIANTS,
    }[args.pool]
    if args.regimes:
        unknown = sorted(set(args.regimes) - {v.name for v in variants})
        if unknown:
            parser.error(f"unknown regimes {unknown}; use {[v.name for v in variants]}")
        variants = tuple(v for v in variants if v.name in {"standalone", *args.regimes})
    if args.lambda_sgt is not None:
        variants = tuple(
            Variant(
                v.name, v.regime, v.overrides | {"sgt": {"lambda_sgt": args.lambda_sgt, "k_sgt": 1}}
            )
            if v.regime == "sgt"
            else v
            for v in variants
        )
    results = run_all(args.pool, variants, seeds, steps, args.prompts)
    print(f"pool {args.pool}, seeds {seeds}, {steps} steps x {args.prompts} prompts x G=8\n")
    if sliced:
        report_sliced(results, args.pool, args.out, args.primary)
    else:
        report_identical(results)
    print(f"\ntotal {time.perf_counter() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()

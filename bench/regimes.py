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

A small-scale check of the Mutual RL paper's claim, not a tuning target: report whatever
ordering it shows. ``--seeds 0 --steps 2`` is a smoke test of the whole pipeline.
"""

from __future__ import annotations

import argparse
import json
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

REPO = Path(__file__).resolve().parents[1]
REGIMES = ("standalone", "prp", "xgrpo", "sgt")
VAL = "val/reward@1"
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


@dataclass
class RunResult:
    """One run's curves: ``curves[policy][key][step]``, and its wall time."""

    curves: dict[str, dict[str, dict[int, float]]]
    wall_s: float

    def final(self, policy: str, key: str) -> float:
        curve = self.curves[policy][key]
        return curve[max(curve)]


def base_config(pool: str, regime: str) -> dict[str, Any]:
    """The example config a run of ``regime`` on ``pool`` starts from."""
    if pool == "complementary":
        name = "complementary"
    else:
        name = "prp" if regime == "standalone" else regime
    return json.loads((REPO / f"examples/{name}.json").read_text())


def run_one(
    pool: str, variant: Variant, seed: int, steps: int, prompts: int, work: Path
) -> RunResult:
    config = base_config(pool, variant.regime)
    config |= {
        "regime": variant.regime, "seed": seed, "steps": steps, "prompts_per_step": prompts,
        "val_every": max(steps // 3, 1), "checkpoint_every": steps,
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


def _difference(regime: list[float], standalone: list[float]) -> str:
    differences = [a - b for a, b in zip(regime, standalone, strict=True)]
    low, high = bootstrap_ci(differences)
    return f"{statistics.mean(differences):+.3f} [{low:+.3f}, {high:+.3f}]"


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


def report_complementary(results: dict[str, list[RunResult]]) -> None:
    standalone = results["standalone"]
    policies = sorted(standalone[0].curves)
    sharing = [name for name in results if name != "standalone"]
    header = ["policy", "skill", "standalone", *(f"{name} (Δ [95% CI])" for name in sharing)]
    print("Final val/reward@1 per policy and skill: mean ± std over seeds; per sharing")
    print("regime, its mean and the difference to standalone with a 95% paired bootstrap CI.\n")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for policy in policies:
        keys = sorted(key for key in standalone[0].curves[policy] if key.startswith(VAL + "/"))
        for key in (*keys, VAL):
            skill = key[len(VAL) + 1 :] or "all"
            base = [run.final(policy, key) for run in standalone]
            cells = [policy, skill, _fmt(base)]
            for name in sharing:
                values = [run.final(policy, key) for run in results[name]]
                cells.append(f"{_fmt(values)} ({_difference(values, base)})")
            print("| " + " | ".join(cells) + " |")
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
    skills = [key[len(IS_WEIGHT) + 1 :] for key in is_keys]
    print(f"\nMean {IS_WEIGHT} over steps, over all peer tokens and per skill of the prompt")
    print("(mean ± std over seeds; a skill's column is empty where no step logged it).\n")
    header = ["regime", "policy", "all", *skills]
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
    print("\n| regime | wall s / run |")
    print("| --- | --- |")
    for name, runs in results.items():
        print(f"| {name} | {statistics.mean(run.wall_s for run in runs):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool", choices=("identical", "complementary"), default="identical")
    parser.add_argument(
        "--seeds", type=int, nargs="+", help="default: 0 1 2 (identical), 0-4 (complementary)"
    )
    parser.add_argument("--steps", type=int, help="default: 30 (identical), 60 (complementary)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument(
        "--regimes",
        nargs="+",
        help="a subset of the pool's regimes (standalone is always run: the differences "
        "are to it); default: all",
    )
    args = parser.parse_args()
    complementary = args.pool == "complementary"
    seeds = args.seeds or ([0, 1, 2, 3, 4] if complementary else [0, 1, 2])
    steps = args.steps or (60 if complementary else 30)

    started = time.perf_counter()
    if complementary:
        from trainer.zoo import COMPLEMENTARY_IDS, build_zoo, default_zoo_dir

        zoo_log = lambda line: print(line, file=sys.stderr)  # noqa: E731
        build_zoo(default_zoo_dir(), ids=COMPLEMENTARY_IDS, log=zoo_log)
    variants = COMPLEMENTARY_VARIANTS if complementary else IDENTICAL_VARIANTS
    if args.regimes:
        unknown = sorted(set(args.regimes) - {v.name for v in variants})
        if unknown:
            parser.error(f"unknown regimes {unknown}; use {[v.name for v in variants]}")
        variants = tuple(v for v in variants if v.name in {"standalone", *args.regimes})
    results = run_all(args.pool, variants, seeds, steps, args.prompts)
    print(f"pool {args.pool}, seeds {seeds}, {steps} steps x {args.prompts} prompts x G=8\n")
    if complementary:
        report_complementary(results)
    else:
        report_identical(results)
    print(f"\ntotal {time.perf_counter() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()

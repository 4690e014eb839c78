"""The Mutual RL paper's Figures 11 and 12 at small scale, on the complementary pool, on CPU.

    PYTHONPATH=. .venv/bin/python bench/figures_11_12.py [--seeds 0 1 2] [--steps 60] \\
        [--prompts 16] [--sft-steps 15] [--sft-epochs 2] [--eval-size 32] \\
        [--out figures_11_12.json] [--work DIR]

The pool is ``--pool complementary`` of bench/regimes.py (examples/complementary.json:
three families, each warm-started on one skill; the zoo is built first), and each run is
bench/regimes.py's (:func:`bench.regimes.run_one`: ``python -m trainer run`` with the
reduced schedule). Regimes: standalone GRPO, SGT and sequential peer SFT as the paper
ran it (``sequential_sft``: the full ``--steps`` of standalone GRPO collecting the peers'
successes, then ``--sft-steps`` extra steps fine-tuning on them: the same RL steps as
standalone), from the RL-trained policy and, as ``sequential_sft-base``, from the base
model; ``--seeds`` each. (The gap pool's Figure 11 is printed by ``bench/regimes.py --pool
gap``, from the same estimator.)

* **Figure 11**, per policy: the relative improvement of the final ``val/reward@1`` of
  SGT and of each sequential SFT over standalone, ``(mean_x - mean_s) / |mean_s|`` in %
  (:func:`trainer.stats.relative_improvement`, the compare page's estimator), printed
  "estimate [low, high]" with its 95% interval by the paired delta method
  (:func:`trainer.stats.relative_interval`: the seeds pair, and the interval counts
  standalone's variance too, as the compare page's error bars do). Every seed counts,
  one where standalone scored 0 too; "n/a" where standalone's mean is 0.
* **Figure 12**, per policy and task of the trainer's synthetic evaluation suite
  (:func:`trainer.evals.synthetic.write_synthetic_suite`, scored with
  :func:`trainer.evals.evaluate.evaluate_suite`): the base model's accuracy, then each
  regime's final checkpoint, mean ± std over the seeds.

``--out`` writes every number (per run, per seed) as JSON. ``--work DIR`` keeps the run
directories (default: a temporary directory, removed at the end); it must not hold
these runs already (the trainer refuses to start over a run directory).
``--seeds 0 --steps 3 --sft-steps 1 --prompts 4 --eval-size 4`` is a smoke test of the
whole pipeline. A small-scale check, not a tuning target: report whatever it shows.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.regimes import (
    COMPLEMENTARY_VARIANTS,
    VAL,
    RunResult,
    Variant,
    _fmt,
    run_one,
)
from trainer.stats import relative_improvement, relative_interval, relative_interval_unpaired

POOL = "complementary"
REGIMES = ("standalone", "sgt", "sequential_sft", "sequential_sft-base")
"""The columns, in order; standalone first (the improvements are over it)."""


def variants(sft_steps: int, sft_epochs: int) -> tuple[Variant, ...]:
    """Standalone and SGT as bench/regimes.py runs them, and sequential peer SFT as the
    paper ran it: the full standalone RL schedule, then ``sft_steps`` extra SFT steps, from
    the RL-trained policy and (``-base``) from the base model."""
    by_name = {variant.name: variant for variant in COMPLEMENTARY_VARIANTS}
    sft = {"sft_steps": sft_steps, "sft_epochs": sft_epochs, "lambda_sft": 1.0}
    sft |= {"max_buffer": 4096}
    return (
        by_name["standalone"],
        by_name["sgt"],
        Variant("sequential_sft", "sequential_sft", {"sequential_sft": sft | {"sft_from": "rl"}}),
        Variant(
            "sequential_sft-base",
            "sequential_sft",
            {"sequential_sft": sft | {"sft_from": "base"}},
        ),
    )


# --- Figure 12: the evaluation suite ---------------------------------------------------------


class Evaluator:
    """The synthetic suite written once, and each model's accuracy on its tasks."""

    def __init__(self, directory: Path, *, size: int, seed: int, batch_size: int) -> None:
        from trainer.evals.evaluate import load_suite, load_suite_items
        from trainer.evals.synthetic import write_synthetic_suite

        self.suite = load_suite(write_synthetic_suite(directory, seed=seed, size=size))
        self.items = load_suite_items(self.suite)
        self.batch_size = batch_size

    @property
    def tasks(self) -> list[str]:
        return [task.name for task in self.suite.tasks]

    def accuracy(self, model: Any, tokenizer: Any, policy: Any) -> dict[str, float]:
        """Accuracy per task of ``model`` as ``policy`` (its PolicyConfig) prompts it."""
        from trainer.evals.evaluate import evaluate_suite

        results = evaluate_suite(
            model,
            tokenizer,
            self.suite,
            self.items,
            chat_template=policy.chat_template,
            max_new_tokens=policy.max_new_tokens,
            batch_size=self.batch_size,
        )
        return {name: float(result.metrics["accuracy"]) for name, result in results.items()}

    def final_checkpoint(self, run_dir: Path, zoo_dir: Path) -> tuple[int, dict[str, Any]]:
        """The run's last checkpoint: its step and each policy's accuracy per task."""
        from trainer.checkpoint import checkpoint_dir, latest_checkpoint
        from trainer.evals.evaluate import load_policy_model, open_checkpoint

        latest = latest_checkpoint(run_dir)
        if latest is None:
            raise SystemExit(f"{run_dir} holds no complete checkpoint")
        checkpoint = open_checkpoint(checkpoint_dir(run_dir, latest.step))
        scores = {}
        for policy in checkpoint.policies:
            model, tokenizer = load_policy_model(checkpoint, policy, zoo_dir=zoo_dir)
            scores[policy] = self.accuracy(model, tokenizer, checkpoint.policy_config(policy))
        return checkpoint.step, scores

    def base_models(self, run_dir: Path, zoo_dir: Path) -> dict[str, dict[str, float]]:
        """Each pool policy's base model (the run config's, before any update)."""
        from trainer.config import RunConfig
        from trainer.models import load_causal_lm, load_tokenizer
        from trainer.run import CONFIG_FILE, policy_sources

        scores = {}
        for policy in RunConfig.from_file(run_dir / CONFIG_FILE).pool:
            model_dir, tokenizer_dir = policy_sources(policy, zoo_dir)
            model = load_causal_lm(model_dir, policy.dtype).eval()
            scores[policy.name] = self.accuracy(model, load_tokenizer(tokenizer_dir), policy)
        return scores


# --- the numbers -------------------------------------------------------------------------------


def relative_improvements(
    regime: list[float], standalone: list[float], seeds: list[int] | None = None
) -> dict[str, Any]:
    """Figure 11's one estimator, :func:`trainer.stats.relative_improvement` (the app's bar
    view and its exports call it too): ``(mean_x - mean_s) / |mean_s|`` in %, every seed
    counted (one where standalone scored 0 too), with its 95% interval ``low`` / ``high``
    (:func:`trainer.stats.relative_interval`: paired by ``seeds``, the seed of each value
    in both lists, when given; ``method`` says which). ``per_seed``: ``(x - mean_s) /
    |mean_s|`` per seed, whose mean is ``mean`` and whose std is ``std``; ``mean``,
    ``low``, ``high`` None, and ``undefined`` the reason, when standalone's mean is 0 (or
    there is no value)."""
    found = relative_improvement(regime, standalone)
    if seeds is None or len(set(seeds)) != len(seeds):
        interval = relative_interval_unpaired(regime, standalone)
    else:
        interval = relative_interval(
            dict(zip(seeds, regime, strict=True)), dict(zip(seeds, standalone, strict=True))
        )
    per_seed = [value if math.isfinite(value) else None for value in found.per_run]
    kept = [value for value in per_seed if value is not None]
    bounded = found.defined and interval.has_interval
    return {
        "per_seed": per_seed,
        "mean": found.estimate if found.defined else None,
        "low": interval.low if bounded else None,
        "high": interval.high if bounded else None,
        "method": interval.description() if bounded else "",
        "std": statistics.stdev(kept) if found.defined and len(kept) > 1 else None,
        "seeds": found.n,
        "undefined": found.undefined,
        "standalone_mean": statistics.mean(standalone),
        "regime_mean": statistics.mean(regime),
    }


def _relative_cell(entry: dict[str, Any], seeds: int) -> str:
    """ "+12.3% [+4.0, +20.6]": the estimate and its 95% interval ("n/a" undefined)."""
    if entry["mean"] is None:
        return "n/a"
    cell = f"{entry['mean']:+.1f}%"
    if entry["low"] is not None:
        cell += f" [{entry['low']:+.1f}, {entry['high']:+.1f}]"
    if entry["seeds"] < seeds:
        cell += f" ({entry['seeds']} of {seeds} seeds have a value)"
    return cell


def figure_11(results: dict[str, list[RunResult]], seeds: list[int]) -> dict[str, Any]:
    """Per policy, per sharing regime: the relative improvement over standalone."""
    policies = sorted(results["standalone"][0].curves)
    report: dict[str, Any] = {}
    for policy in policies:
        base = [run.final(policy, VAL) for run in results["standalone"]]
        report[policy] = {
            name: relative_improvements([run.final(policy, VAL) for run in runs], base, seeds)
            for name, runs in results.items()
            if name != "standalone"
        }
    print("Figure 11: relative improvement of the final val/reward@1 over standalone,")
    print("(mean_x - mean_s) / |mean_s| in %, [95% interval: paired delta method over the")
    print("seeds, standalone's variance included] (n/a: standalone's mean is 0).\n")
    sharing = [name for name in results if name != "standalone"]
    header = ["policy", "standalone", *sharing, *(f"{name} vs standalone" for name in sharing)]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for policy in policies:
        cells = [policy, _fmt([run.final(policy, VAL) for run in results["standalone"]])]
        cells += [_fmt([run.final(policy, VAL) for run in results[name]]) for name in sharing]
        cells += [_relative_cell(report[policy][name], len(seeds)) for name in sharing]
        print("| " + " | ".join(cells) + " |")
    return report


def figure_12(
    base: dict[str, dict[str, float]],
    evals: dict[str, list[dict[str, dict[str, float]]]],
    tasks: list[str],
) -> dict[str, Any]:
    """Per policy and task: the base model's accuracy and each regime's final one."""
    report: dict[str, Any] = {}
    print("\nFigure 12: accuracy on the synthetic evaluation suite, the base model and each")
    print("regime's final checkpoint (mean ± std over seeds).\n")
    header = ["policy", "task", "base", *evals]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for policy in base:
        report[policy] = {}
        for task in tasks:
            entry: dict[str, Any] = {"base": base[policy][task]}
            cells = [policy, task, f"{base[policy][task]:.3f}"]
            for name, runs in evals.items():
                values = [run[policy][task] for run in runs]
                entry[name] = {
                    "values": values,
                    "mean": statistics.mean(values),
                    "std": statistics.stdev(values) if len(values) > 1 else None,
                }
                cells.append(_fmt(values))
            report[policy][task] = entry
            print("| " + " | ".join(cells) + " |")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=60, help="every regime's steps (>= 2)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument(
        "--sft-steps",
        type=int,
        help="sequential SFT's SFT steps, after the RL steps (default: steps // 4)",
    )
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--eval-size", type=int, default=32, help="items per suite task")
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--eval-batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, help="write every number to this JSON file")
    parser.add_argument("--work", type=Path, help="keep the runs here (default: a temp dir)")
    args = parser.parse_args()
    sft_steps = args.sft_steps if args.sft_steps is not None else max(1, args.steps // 4)
    if sft_steps < 1:
        parser.error(f"--sft-steps must be >= 1; got {sft_steps}")

    from trainer.zoo import COMPLEMENTARY_IDS, build_zoo, default_zoo_dir

    started = time.perf_counter()
    zoo_dir = default_zoo_dir()
    build_zoo(zoo_dir, ids=COMPLEMENTARY_IDS, log=lambda line: print(line, file=sys.stderr))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        evaluator = Evaluator(
            work / "suite",
            size=args.eval_size,
            seed=args.eval_seed,
            batch_size=args.eval_batch_size,
        )
        results: dict[str, list[RunResult]] = {}
        evals: dict[str, list[dict[str, dict[str, float]]]] = {}
        runs: dict[str, dict[str, Any]] = {}
        base: dict[str, dict[str, float]] | None = None
        for variant in variants(sft_steps, args.sft_epochs):
            for seed in args.seeds:
                result = run_one(POOL, variant, seed, args.steps, args.prompts, work)
                run_dir = work / f"{variant.name}-{seed}"
                evaluated = time.perf_counter()
                step, scores = evaluator.final_checkpoint(run_dir, zoo_dir)
                if base is None:
                    base = evaluator.base_models(run_dir, zoo_dir)
                eval_s = time.perf_counter() - evaluated
                print(
                    f"{variant.name} seed {seed}: {result.wall_s:.0f}s, eval {eval_s:.0f}s",
                    file=sys.stderr,
                )
                results.setdefault(variant.name, []).append(result)
                evals.setdefault(variant.name, []).append(scores)
                runs.setdefault(variant.name, {})[str(seed)] = {
                    "wall_s": result.wall_s,
                    "final": {
                        policy: {key: result.final(policy, key) for key in sorted(curves)}
                        for policy, curves in sorted(result.curves.items())
                    },
                    "eval_step": step,
                    "eval": scores,
                }
        assert base is not None
        print(
            f"pool {POOL}, seeds {args.seeds}, {args.steps} steps x {args.prompts} prompts x "
            f"G=8; sequential SFT: {args.steps} RL steps, then {sft_steps} SFT steps, "
            f"{args.sft_epochs} epochs, from the RL policy and from the base model; "
            f"suite: {args.eval_size} items a task\n"
        )
        fig11 = figure_11(results, args.seeds)
        fig12 = figure_12(base, evals, evaluator.tasks)
    total = time.perf_counter() - started
    print(f"\ntotal {total:.0f}s", file=sys.stderr)
    if args.out:
        document = {
            "settings": {
                "pool": POOL, "seeds": args.seeds, "steps": args.steps,
                "prompts": args.prompts, "sft_steps": sft_steps, "sft_epochs": args.sft_epochs,
                "eval_size": args.eval_size, "eval_seed": args.eval_seed,
                "regimes": list(REGIMES),
            },
            "runs": runs,
            "base_eval": base,
            "figure_11": fig11,
            "figure_12": fig12,
            "total_s": total,
        }  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""GRPO vs ReMix-GRPO on the same tiny policy and task: rollouts and tokens to a target.

    PYTHONPATH=. .venv/bin/python bench/remix_efficiency.py [--seeds 0 1 2] [--steps 60]
        [--target 0.55] [--policy tiny-gpt2-unigram] [--write-json bench/out/remix.json]

Runs ``python -m trainer run`` for each method x seed on a one-policy pool (standalone
regime; ReMix with the SPEC defaults: N=2, p=0.4, m=2, c_bar=1, lambda(t) from step 50,
reincarnation at T=50), then prints markdown tables: per method, the rollouts, response
tokens and steps consumed until ``val/reward@1`` first reaches ``--target`` (measured
every ``--val-every`` steps on ``--val-size`` held-out prompts; at one point, and as a
3-point running mean), the final and best ``val/reward@1`` and its value at an equal
rollout budget; and curves of ``val/reward@1``, response length and self-reflection
rate against rollouts consumed. Builds the tiny zoo first if needed (cached).
``--from-json`` re-prints the tables of a ``--write-json`` dump without running.

The claim under test (ReMix paper): fewer rollouts and tokens for the same accuracy.
A small-scale check, not a tuning target: report whatever it shows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainer.zoo import build_zoo, default_zoo_dir

REPO = Path(__file__).resolve().parents[1]
METHODS = ("grpo", "remix-grpo")
KEYS = (
    "val/reward@1",
    "perf/rollouts_total",
    "perf/response_tokens_total",
    "response/length_mean",
    "response/self_reflection_rate",
    "remix/offpolicy_frac",
    "remix/is_ratio_mean",
)


def run_config(method: str, seed: int, args: argparse.Namespace) -> dict:
    config: dict = {
        "name": f"bench-{method}-{seed}",
        "pool": [
            {
                "name": "policy", "model": f"zoo:{args.policy}", "lr": args.lr,
                "group_size": 8, "max_new_tokens": 12,
            }
        ],
        "regime": "standalone",
        "off_policy": "remix" if method == "remix-grpo" else "none",
        "task": {"kind": "arithmetic", "levels": [1, 2, 3], "val_size": args.val_size},
        "steps": args.steps, "prompts_per_step": args.prompts, "val_every": args.val_every,
        "checkpoint_every": args.steps, "seed": seed,
    }  # fmt: skip
    return config


Curves = dict[str, dict[int, float]]
"""Per metric key, ``{step: value}`` of the run's one policy."""


def run_one(method: str, seed: int, args: argparse.Namespace, work: Path) -> tuple[Curves, float]:
    """Per key, ``{step: value}`` for the policy; and the run's wall time."""
    config_path = work / f"{method}-{seed}.json"
    config_path.write_text(json.dumps(run_config(method, seed, args)))
    run_dir = work / f"{method}-{seed}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config_path),
         "--run-dir", str(run_dir)],
        cwd=REPO, check=True, capture_output=True, env=os.environ.copy(),
    )  # fmt: skip
    wall = time.perf_counter() - started
    curves: Curves = {key: {} for key in KEYS}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        point = json.loads(line)
        if point["policy"] == "policy" and point["key"] in curves:
            curves[point["key"]][point["step"]] = float(point["value"])
    return curves, wall


def first_reach(curves: Curves, target: float, window: int = 1) -> int | None:
    """The first step at which the mean of the last ``window`` ``val/reward@1`` points is
    >= target (step 0 = before training); ``window=1``: the raw first crossing."""
    points = sorted(curves["val/reward@1"].items())
    for index in range(window - 1, len(points)):
        recent = [value for _, value in points[index - window + 1 : index + 1]]
        if sum(recent) / window >= target:
            return points[index][0]
    return None


def consumed(curves: Curves, key: str, step: int) -> float:
    return 0.0 if step == 0 else curves[key][step]


def val_at_budget(curves: Curves, rollouts: float) -> float:
    """``val/reward@1`` at the last validation point within ``rollouts`` consumed."""
    points = [
        (step, value)
        for step, value in sorted(curves["val/reward@1"].items())
        if consumed(curves, "perf/rollouts_total", step) <= rollouts
    ]
    return points[-1][1]


def _fmt(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return f"{statistics.mean(values):,.{digits}f} ± {statistics.stdev(values):,.{digits}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def report(runs: dict[str, list[Curves]], walls: dict[str, list[float]], args: Any) -> str:
    """The markdown tables of RESULTS.md."""
    lines = [
        f"{args.policy}, seeds {args.seeds}, {args.steps} steps x {args.prompts} prompts x G=8, "
        f"lr {args.lr}, val/reward@1 on {args.val_size} prompts every {args.val_every} "
        f"steps, target {args.target}",
        "",
        "Consumption until val/reward@1 first reaches the target: at one validation point "
        "(raw), and with the mean of 3 consecutive points (6 steps; less sensitive to one "
        "lucky evaluation). Mean ± std over the seeds that reached it.",
        "",
        _row(["method", "criterion", "seeds reaching", "rollouts to target",
              "response tokens to target", "steps to target"]),
        _row(["---"] * 6),
    ]  # fmt: skip
    for method in METHODS:
        for label, window in (("raw", 1), ("3-point mean", 3)):
            reached = [
                (c, step)
                for c in runs[method]
                if (step := first_reach(c, args.target, window)) is not None
            ]
            lines.append(
                _row([
                    method, label, f"{len(reached)}/{len(runs[method])}",
                    _fmt([consumed(c, "perf/rollouts_total", s) for c, s in reached], 0),
                    _fmt([consumed(c, "perf/response_tokens_total", s) for c, s in reached], 0),
                    _fmt([float(s) for _, s in reached], 1),
                ])
            )  # fmt: skip
    budget = min(c["perf/rollouts_total"][args.steps] for cs in runs.values() for c in cs)
    lines += [
        "",
        f"Final values, and val/reward@1 at an equal budget of {budget:,.0f} rollouts (the "
        "smaller method's total; the last validation point within it). "
        "Wall time is machine-load dependent.",
        "",
        _row(["method", "final val/reward@1", "best val/reward@1",
              f"val/reward@1 at {budget:,.0f} rollouts", "rollouts total",
              "response tokens total", "wall s / run"]),
        _row(["---"] * 7),
    ]  # fmt: skip
    for method in METHODS:
        curves = runs[method]
        lines.append(
            _row([
                method,
                _fmt([c["val/reward@1"][max(c["val/reward@1"])] for c in curves]),
                _fmt([max(c["val/reward@1"].values()) for c in curves]),
                _fmt([val_at_budget(c, budget) for c in curves]),
                _fmt([c["perf/rollouts_total"][args.steps] for c in curves], 0),
                _fmt([c["perf/response_tokens_total"][args.steps] for c in curves], 0),
                f"{statistics.mean(walls[method]):.0f}",
            ])
        )  # fmt: skip
    lines += [
        "",
        "Curves (mean ± std over seeds): val/reward@1, mean response length (tokens), "
        "self-reflection rate, consumption so far, ReMix's off-policy share of the batch.",
        "",
        _row(["step", "method", "val/reward@1", "response length", "self-reflection",
              "rollouts", "response tokens", "offpolicy frac"]),
        _row(["---"] * 8),
    ]  # fmt: skip
    for step in sorted({0, *range(10, args.steps + 1, 10), args.steps}):
        for method in METHODS:

            def at(key: str, step: int = step, method: str = method) -> list[float]:
                return [c[key][step] for c in runs[method] if step in c[key]]

            lines.append(
                _row([
                    str(step), method, _fmt(at("val/reward@1")),
                    _fmt(at("response/length_mean"), 2),
                    _fmt(at("response/self_reflection_rate")),
                    _fmt(at("perf/rollouts_total") or [0.0], 0),
                    _fmt(at("perf/response_tokens_total") or [0.0], 0),
                    _fmt(at("remix/offpolicy_frac"), 3),
                ])
            )  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--val-every", type=int, default=2)
    parser.add_argument("--val-size", type=int, default=128)
    parser.add_argument("--target", type=float, default=0.55)
    parser.add_argument("--policy", default="tiny-gpt2-unigram")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--write-json", type=Path, help="also dump every curve here")
    parser.add_argument(
        "--from-json", type=Path, help="print the tables of a --write-json dump (no runs)"
    )
    args = parser.parse_args()

    if args.from_json:
        dump = json.loads(args.from_json.read_text())
        stored = argparse.Namespace(**dump["args"])
        runs = {
            method: [{k: {int(s): v for s, v in c.items()} for k, c in run.items()} for run in rs]
            for method, rs in dump["runs"].items()
        }
        stored.target = args.target
        walls = dump.get("walls") or {method: [math.nan] for method in METHODS}
        print(report(runs, walls, stored))
        return

    zoo_dir = default_zoo_dir()
    build_zoo(zoo_dir, ids=[args.policy], log=lambda line: print(line, file=sys.stderr))
    os.environ["MRL_ZOO_DIR"] = str(zoo_dir)

    runs: dict[str, list[Curves]] = {method: [] for method in METHODS}
    walls: dict[str, list[float]] = {method: [] for method in METHODS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for method in METHODS:
                curves, wall = run_one(method, seed, args, Path(tmp))
                runs[method].append(curves)
                walls[method].append(wall)
                print(f"{method} seed {seed}: {wall:.0f}s", file=sys.stderr)
    if args.write_json:
        args.write_json.parent.mkdir(parents=True, exist_ok=True)
        stored_args = {k: v for k, v in vars(args).items() if k not in ("write_json", "from_json")}
        args.write_json.write_text(
            json.dumps({"args": stored_args, "runs": runs, "walls": walls}, indent=1)
        )
    print(report(runs, walls, args))


if __name__ == "__main__":
    main()

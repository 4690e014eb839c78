"""All four sharing regimes on the same tiny 3-policy pool, several seeds, on CPU.

    PYTHONPATH=. .venv/bin/python bench/regimes.py [--seeds 0 1 2] [--steps 30]

Runs ``python -m trainer run`` for each regime x seed on the pool of
``examples/prp.json`` (three policies, three tokenizers) with a reduced schedule, then
prints a markdown table of final and mean ``val/reward@1`` per policy per regime (mean
+- std over seeds) and each regime's wall time. A small-scale check of the Mutual RL
paper's claim, not a tuning target: report whatever ordering it shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGIMES = ("standalone", "prp", "xgrpo", "sgt")


def run_one(regime: str, seed: int, steps: int, prompts: int, work: Path) -> tuple[dict, float]:
    config = json.loads(
        (REPO / f"examples/{'prp' if regime == 'standalone' else regime}.json").read_text()
    )
    config |= {
        "regime": regime, "seed": seed, "steps": steps, "prompts_per_step": prompts,
        "val_every": max(steps // 3, 1), "checkpoint_every": steps,
    }  # fmt: skip
    config_path = work / f"{regime}-{seed}.json"
    config_path.write_text(json.dumps(config))
    run_dir = work / f"{regime}-{seed}"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config_path),
         "--run-dir", str(run_dir)],
        cwd=REPO, check=True, capture_output=True, env=os.environ.copy(),
    )  # fmt: skip
    wall = time.perf_counter() - started
    curves: dict[str, dict[int, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        point = json.loads(line)
        if point["key"] == "val/reward@1" and not point["policy"].startswith("_"):
            curves.setdefault(point["policy"], {})[point["step"]] = float(point["value"])
    return curves, wall


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=16)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for regime in REGIMES:
            finals: dict[str, list[float]] = {}
            means: dict[str, list[float]] = {}
            walls = []
            for seed in args.seeds:
                curves, wall = run_one(regime, seed, args.steps, args.prompts, Path(tmp))
                walls.append(wall)
                for policy, curve in curves.items():
                    trained = [v for step, v in curve.items() if step > 0]
                    finals.setdefault(policy, []).append(curve[max(curve)])
                    means.setdefault(policy, []).append(statistics.mean(trained))
                print(f"{regime} seed {seed}: {wall:.0f}s", file=sys.stderr)
            for policy in sorted(finals):
                rows.append((regime, policy, _fmt(finals[policy]), _fmt(means[policy]),
                             f"{statistics.mean(walls):.0f}"))  # fmt: skip
    print(f"seeds {args.seeds}, {args.steps} steps x {args.prompts} prompts x G=8\n")
    print("| regime | policy | final val/reward@1 | mean val/reward@1 | wall s / run |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()

"""Evaluation throughput: items per second of each task type on the tiny zoo, on CPU.

    PYTHONPATH=. .venv/bin/python bench/eval_throughput.py [--size 256] [--batch-size 16]

Writes the synthetic suite (trainer/evals/synthetic.py) with ``--size`` items per task
into a temporary directory, then for each default zoo policy (untrained SFT weights,
built if needed) scores every task the way ``python -m trainer eval`` does
(trainer.evals.evaluate.evaluate_suite: the policy's chat template for generated
answers, 16 new tokens) and reports items/s per task type: the median of ``--repeats``
timed passes after one warm-up pass.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from trainer.evals.evaluate import evaluate_suite, load_suite, load_suite_items
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from trainer.models import load_causal_lm, load_tokenizer
from trainer.zoo import ZOO_IDS, build_zoo, default_zoo_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256, help="items per task")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    zoo = build_zoo(default_zoo_dir(), ids=list(ZOO_IDS))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        suite_path = write_synthetic_suite(Path(scratch), seed=0, size=args.size)
        suite = load_suite(suite_path)
        items = load_suite_items(suite)
        for zoo_id, model_dir in zoo.items():
            model = load_causal_lm(model_dir)
            tokenizer = load_tokenizer(model_dir)
            evaluate_suite(model, tokenizer, suite, items, batch_size=args.batch_size)
            seconds: dict[str, list[float]] = defaultdict(list)
            counts: dict[str, int] = defaultdict(int)
            for task in suite.tasks:
                counts[task.type] += len(items[task.name])
            for _ in range(args.repeats):
                for task in suite.tasks:
                    one = SuiteConfig(name=suite.name, tasks=[task])
                    started = time.perf_counter()
                    evaluate_suite(model, tokenizer, one, items, batch_size=args.batch_size)
                    seconds[task.type].append(time.perf_counter() - started)
            for kind, count in counts.items():
                per_pass = sum(seconds[kind]) / args.repeats
                runs = [count / s for s in _passes(seconds[kind], args.repeats)]
                rows.append(
                    {
                        "policy": zoo_id,
                        "task type": kind,
                        "items": count,
                        "items/s": round(statistics.median(runs), 1),
                        "s per pass": round(per_pass, 3),
                    }
                )
    print("| policy | task type | items | items/s | s per pass |")
    print("| --- | --- | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {' | '.join(str(value) for value in row.values())} |")
    print(
        json.dumps(
            {
                "size": args.size,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "threads": args.threads,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                f"torch {torch.__version__}",
            }
        )
    )


def _passes(times: list[float], repeats: int) -> list[float]:
    """Per timed pass, the seconds of all of one task type's tasks (``times`` holds one
    entry per task and pass, pass by pass)."""
    per_pass = len(times) // repeats
    return [sum(times[i * per_pass : (i + 1) * per_pass]) for i in range(repeats)]


if __name__ == "__main__":
    main()

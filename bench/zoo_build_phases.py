"""Where a zoo model's build time goes: each phase of ``make_policy``, one thread.

    PYTHONPATH=. .venv/bin/python bench/zoo_build_phases.py tiny-llama-char-sum

Prints seconds for: tokenizer training, model construction, the validation set, the
held-out set, the SFT data (problems and encoding), 100 SFT steps, greedy accuracy on the
validation set. Results: bench/RESULTS.md, "The first ten minutes of make demo".
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import torch

from trainer.zoo import build, sft


def main(zoo_id: str) -> None:
    recipe = build.RECIPES[zoo_id]
    torch.set_num_threads(1)  # as the build runs
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        print(f"{name}: {now - clock:.2f} s", flush=True)
        clock = now

    tokenizer = build.make_tokenizer(recipe, 0)
    phase("tokenizer")
    model = build.build_model(recipe.family, tokenizer, recipe.size, 0)
    phase("model")
    validation = build.validation_problems(recipe, 0)
    phase(f"validation set ({len(validation)} problems)")
    held_out = sft.held_out_expressions(0, recipe.sft.held_out_levels)
    phase("held-out set")
    sft.encode_examples(tokenizer, sft.sft_problems(recipe.sft, 0, held_out))
    phase("SFT data")
    sft.train_sft(model, tokenizer, replace(recipe.sft, steps=100), 0)
    phase("100 SFT steps")
    sft.greedy_accuracy(model, tokenizer, validation)
    phase("greedy accuracy")


if __name__ == "__main__":
    main(sys.argv[1])

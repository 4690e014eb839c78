"""bench/vs_trl.py's pure helpers (issue 33): the per-model schedules (the tiny default
unchanged), the fixed batch's stand-in rewards, the medians and the report tables. The
comparison itself needs TRL's own venv and minutes of CPU; it is run by hand
(bench/RESULTS.md)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from trainer.chat import PromptContext
from trainer.config import TaskConfig

BENCH = Path(__file__).resolve().parents[3] / "bench" / "vs_trl.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_vs_trl", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()
UNSET = {
    "prompts": None,
    "group": None,
    "max_new_tokens": None,
    "steps": None,
    "warmup": None,
    "lr": None,
    "fixed_prompts": None,
    "gen_repeats": None,
    "dtype": None,
}


def _args(model: str, **overrides: object) -> argparse.Namespace:
    return bench.resolve(argparse.Namespace(model=model, **(UNSET | overrides)))


def test_the_tiny_default_is_the_schedule_of_before() -> None:
    args = _args("tiny")
    assert (args.prompts, args.group, args.max_new_tokens) == (16, 8, 12)
    assert (args.steps, args.warmup, args.fixed_prompts, args.gen_repeats) == (8, 2, 16, 0)
    assert args.dtype == ["float32"] and args.lr == 1e-4
    assert args.preset.zoo_id == "tiny-gpt2-unigram" and args.preset.perturb_std == 0.02
    assert args.preset.checks == ("equal", "mixed", "mixed+position_ids")
    # The one-turn prompt of levels 1-3, as before: no system prompt, no examples.
    assert bench.task_config(args) == TaskConfig(levels=[1, 2, 3])
    assert bench._context(args) == PromptContext()


def test_smollm2_takes_the_issue_schedule_and_few_shot_prompts() -> None:
    args = _args("smollm2", dtype=["float32", "bfloat16", "float32"])
    assert (args.prompts, args.group, args.max_new_tokens) == (4, 4, 32)
    assert args.fixed_prompts == 2 and args.gen_repeats == 3 and args.lr == 1e-6
    assert args.dtype == ["float32", "bfloat16"]  # once each, in order
    config = bench.task_config(args)
    assert config.few_shot == 3 and "\\boxed{}" in config.system_prompt
    context = bench._context(args)
    assert len(context.examples) == 3
    assert all(answer.startswith("\\boxed{") for _, answer in context.examples)


def test_the_command_line_overrides_the_preset() -> None:
    args = _args("smollm2", prompts=2, steps=1, fixed_prompts=1, gen_repeats=0)
    assert (args.prompts, args.steps, args.fixed_prompts, args.gen_repeats) == (2, 1, 1, 0)
    assert args.group == 4
    assert _args("tiny", prompts=4).fixed_prompts == 4  # follows --prompts when unset


@pytest.mark.parametrize(("groups", "size"), [(1, 2), (3, 4), (5, 8)])
def test_stand_in_rewards_mix_every_group(groups: int, size: int) -> None:
    rewards = bench.stand_in_rewards(groups, size)
    assert rewards.shape == (groups * size,)
    grouped = rewards.view(groups, size)
    assert set(rewards.tolist()) <= {0.0, 1.0}
    assert bool((grouped.std(1) > 0).all())
    assert torch.equal(rewards, bench.stand_in_rewards(groups, size))  # deterministic


def test_stand_in_rewards_need_two_samples() -> None:
    with pytest.raises(ValueError, match="G >= 2"):
        bench.stand_in_rewards(2, 1)


def test_summary_takes_medians() -> None:
    result = bench.summary([2.0, 4.0, 3.0], [1.0, 1.0, 2.0], [10, 20, 30], [4.0, 8.0, 6.0])
    assert result["step_s"] == 3.0 and result["generate_s"] == 1.0
    assert result["train_s"] == 1.0  # median of 1, 3, 1
    assert result["tokens_per_s"] == pytest.approx(5.0)  # median of 5, 5, 10
    assert result["generate_tokens_per_s"] == pytest.approx(15.0)  # of 10, 20, 15
    assert result["tokens_per_step"] == 20 and result["steps"] == 3
    assert result["step_cpu_s"] == 6.0
    assert "step_cpu_s" not in bench.summary([1.0], [0.5], [4])


def _side(step: float, generate: float, tokens: float) -> dict:
    return bench.summary([step], [generate], [tokens], [2 * step])


def test_the_tables() -> None:
    timing = {
        "float32": {"ours": _side(2.0, 1.0, 40), "trl": _side(4.0, 2.0, 40)},
        "bfloat16": {"ours": _side(1.0, 0.5, 40), "trl": _side(2.0, 1.0, 40)},
    }
    table = bench.timing_table(timing).splitlines()
    assert len(table) == 2 + 3 * 2
    assert table[4].startswith("| float32 | ours / TRL | **0.50** | 0.50 | 0.50 | 0.50 |")
    rates = {
        "float32": {
            "off": {"generate_s": 2.0, "tokens": 40, "tokens_per_s": 20.0},
            "on": {"generate_s": 1.0, "tokens": 40, "tokens_per_s": 40.0},
            "trl": {"generate_s": 2.2, "tokens": 40, "tokens_per_s": 18.2},
        }
    }
    generation = bench.generation_table(rates, timing).splitlines()
    assert [line.split(" | ")[1] for line in generation[2:]] == [
        "ours, prefix reuse off",
        "ours, prefix reuse on",
        "TRL `_generate_single_turn`",
        "ours, in its timed steps",
        "TRL, in its timed steps",
    ]
    assert generation[4] == "| float32 | TRL `_generate_single_turn` | 2.200 | 40 | 18.2 |"
    check = {
        "dtype": "bfloat16",
        "prompts": "mixed lengths",
        "padded_prompt_rows": 3,
        "rewards": "stand-in (no sampled group had mixed rewards)",
        "ours_loss": -0.00133214,
        "trl_loss": -0.00133215,
        "loss_diff": 1e-8,
        "ours_grad_norm": 0.551561,
        "trl_grad_norm": 0.551562,
        "grad_diff": 1e-6,
        "trl_grad_norm_bias_correction_kl": 0.551959,
    }
    rows = bench.equivalence_table([check]).splitlines()
    assert rows[2].startswith(
        "| mixed lengths (3 left-padded rows, stand-in rewards) | bfloat16 | -0.00133214 |"
    )

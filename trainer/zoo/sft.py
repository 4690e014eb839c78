"""A short supervised warm-start on arithmetic, so that RL starts with signal.

A random-init policy never writes ``\\boxed{...}``, so every GRPO group would be all
zeros and learn nothing. A few hundred teacher-forced steps on (prompt, boxed answer)
pairs teach the format and part of the arithmetic; the zoo stops there on purpose, so
greedy validation accuracy is partial and RL (and peers) still have room to help.

Demonstrations may also carry a *systematic slip*: a share of the additions whose ones
digits carry are shown with the carry dropped (``47+38 -> 75``), as flawed human or
model-written demonstrations do. The policy then puts real probability on both answers,
so greedy decoding is often wrong where sampling is often right: exactly the situation in
which RL with a verifier improves a model quickly, and where a peer without the same
slip can rescue it.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.chat import format_prompt
from trainer.tasks.addition_slices import dropped_hundreds
from trainer.tasks.arithmetic import (
    ADDITIVE_LEVELS,
    ArithmeticTask,
    boxed,
    make_expression,
    prompt_for,
)
from trainer.tasks.base import Problem
from trainer.tasks.split import is_validation_expression

IGNORE_INDEX = -100
ADDITION = re.compile(r"(\d+)\+(\d+)")


@dataclass(frozen=True)
class SFTConfig:
    """How long and on what a zoo policy is warm-started.

    ``level_weights`` gives the share of each arithmetic level in the SFT data, and
    ``carry_slip`` the share of carrying additions of ``slip_levels`` demonstrated with
    the carry dropped; policies trained on different mixtures and slips fail on different
    prompts. ``held_out_levels`` lists the level sets whose validation problems (of the
    build seed) SFT never trains on: a recipe for another task adds that task's levels.
    """

    steps: int
    level_weights: tuple[tuple[int, float], ...]
    carry_slip: float = 0.0
    slip_levels: tuple[int, ...] = ()
    batch_size: int = 32
    lr: float = 3e-3
    adam_beta2: float = 0.98
    warmup_steps: int = 20
    pool_size: int = 4096
    held_out_levels: tuple[tuple[int, ...], ...] = ((1, 2, 3), ADDITIVE_LEVELS)
    slip: str = "carry"
    """What a slipped demonstration gets wrong: ``"carry"`` drops the carry out of the
    ones digits (``47+38 -> 75``), ``"hundreds"`` the carry into the hundreds (``63+52 ->
    15``); see :data:`SLIPS`."""
    hold_out_split: bool = False
    """Never train on the validation part of the hash split (:mod:`trainer.tasks.split`):
    every seed's validation set of the addition_slices task and of an arithmetic task
    with ``split="hash"``."""


@dataclass(frozen=True)
class Example:
    """One tokenized SFT example; the loss covers ``ids[prompt_length:]``."""

    ids: tuple[int, ...]
    prompt_length: int

    @property
    def completion_length(self) -> int:
        return len(self.ids) - self.prompt_length


def held_out_expressions(
    seed: int, level_sets: Sequence[Sequence[int]] = ((1, 2, 3), ADDITIVE_LEVELS)
) -> frozenset[str]:
    """Validation prompts of the arithmetic tasks of ``seed`` over each of ``level_sets``;
    SFT never trains on them."""
    expressions: set[str] = set()
    for levels in level_sets:
        for problem in ArithmeticTask(seed=seed, levels=tuple(levels)).validation():
            expressions.add(problem.prompt)
    return frozenset(expressions)


def sft_problems(config: SFTConfig, seed: int, held_out: Collection[str]) -> list[Problem]:
    """``config.pool_size`` demonstrations drawn with the configured mixture and slips."""
    if config.slip not in SLIPS:
        raise ValueError(f"unknown slip {config.slip!r}; use one of {', '.join(SLIPS)}")
    rng = random.Random(f"zoo-sft-{seed}")
    levels = [level for level, _ in config.level_weights]
    weights = [weight for _, weight in config.level_weights]
    problems: list[Problem] = []
    while len(problems) < config.pool_size:
        (level,) = rng.choices(levels, weights)
        expression, value = make_expression(rng, level)
        prompt = prompt_for(expression)
        if prompt in held_out or (config.hold_out_split and is_validation_expression(expression)):
            continue
        slips = level in config.slip_levels and rng.random() < config.carry_slip
        answer = SLIPS[config.slip](expression, value) if slips else value
        problems.append(Problem(f"sft-{len(problems):05d}", prompt, str(answer), level))
    return problems


def dropped_carry(expression: str, value: int) -> int:
    """``value`` as written by someone who forgets the carry out of the ones digits.

    Only two-term additions whose ones digits carry change (``47+38`` gives 75, not 85).
    """
    match = ADDITION.fullmatch(expression)
    if match is None:
        return value
    left, right = int(match[1]), int(match[2])
    return value - 10 if left % 10 + right % 10 >= 10 else value


def dropped_hundreds_of(expression: str, value: int) -> int:
    """``value`` as written by someone who drops the carry into the hundreds: two-term
    additions of a three-digit total lose their leading 1 (``63+52`` gives 15)."""
    match = ADDITION.fullmatch(expression)
    if match is None:
        return value
    return dropped_hundreds(int(match[1]), int(match[2]))


SLIPS: dict[str, Callable[[str, int], int]] = {
    "carry": dropped_carry,
    "hundreds": dropped_hundreds_of,
}
"""A slipped demonstration's answer, by :attr:`SFTConfig.slip`."""


def encode_examples(
    tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem]
) -> list[Example]:
    """Chat-formatted prompt ids, then the boxed answer ids and eos (no added specials).

    Prompt and completion are tokenized separately, as a rollout sees them: the prompt is
    given, the completion is generated after it.
    """
    prompts = [format_prompt(tokenizer, problem.prompt) for problem in problems]
    completions = [boxed(problem.answer) for problem in problems]
    prompt_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    return [
        Example((*prompt, *completion, tokenizer.eos_token_id), len(prompt))
        for prompt, completion in zip(prompt_ids, completion_ids, strict=True)
    ]


@dataclass(frozen=True)
class Batch:
    """Left-padded examples; ``labels`` are the last ``labels.shape[1]`` tokens of each row,
    masked where they are prompt or padding."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    labels: torch.Tensor


def collate(examples: Sequence[Example], pad_id: int) -> Batch:
    """Left-pad ``examples`` like a rollout batch, so every completion ends in the last column.

    Only the logits of the last columns are then needed (``logits_to_keep``), which skips
    the output layer over the prompt; positions count from each row's first real token.
    """
    width = max(len(example.ids) for example in examples)
    window = max(example.completion_length for example in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), window), IGNORE_INDEX, dtype=torch.long)
    for row, example in enumerate(examples):
        input_ids[row, width - len(example.ids) :] = torch.tensor(example.ids)
        attention_mask[row, width - len(example.ids) :] = 1
        completion = example.ids[example.prompt_length :]
        labels[row, window - len(completion) :] = torch.tensor(completion)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids, attention_mask, position_ids, labels)


def completion_loss(model: PreTrainedModel, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy over the completion (answer and eos) tokens."""
    window = batch.labels.shape[1]
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=window + 1,
    ).logits[:, :-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        batch.labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
    )


def train_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    config: SFTConfig,
    seed: int,
    *,
    done: Callable[[], bool] | None = None,
    check_every: int = 100,
    max_extra_steps: int = 0,
) -> list[float]:
    """Teacher-force ``model`` on arithmetic for ``config.steps`` steps; return the losses
    (one per step taken).

    With ``done``, training then goes on ``check_every`` steps at a time (at the schedule's
    final learning rate) while ``done()`` is false, for at most ``max_extra_steps`` more.

    Deterministic given ``seed`` on one kind of CPU: the data pool, batch order and
    dropout-free updates are all derived from it (another CPU's float kernels may round
    differently, and 700 steps later land elsewhere: ``done`` is how a build reaches the
    same kind of result everywhere).
    """
    held_out = held_out_expressions(seed, config.held_out_levels)
    examples = encode_examples(tokenizer, sft_problems(config, seed, held_out))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=(0.9, config.adam_beta2), weight_decay=0.0
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, config.warmup_steps, config.steps)
    )
    order = torch.Generator().manual_seed(seed)
    losses: list[float] = []

    def train(steps: int) -> None:
        model.train()
        for _ in range(steps):
            indices = torch.randint(len(examples), (config.batch_size,), generator=order)
            batch = collate([examples[i] for i in indices.tolist()], tokenizer.pad_token_id)
            loss = completion_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        model.eval()

    train(config.steps)
    while done is not None and len(losses) < config.steps + max_extra_steps and not done():
        train(min(check_every, config.steps + max_extra_steps - len(losses)))
    return losses


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / max(total - warmup, 1), 1.0)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))


def is_correct(completion: str, answer: str) -> bool:
    """Whether ``completion`` contains exactly ``\\boxed{answer}``."""
    return boxed(answer) in completion


@torch.no_grad()
def greedy_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int = 16,
    batch_size: int = 64,
) -> list[str]:
    """Greedy completions of chat-formatted ``prompts`` (batched, left padded, KV cache)."""
    texts = [format_prompt(tokenizer, prompt) for prompt in prompts]
    padding_side, was_training = tokenizer.padding_side, model.training
    tokenizer.padding_side = "left"
    model.eval()
    completions: list[str] = []
    try:
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
                add_special_tokens=False,
                padding=True,
                return_tensors="pt",
            )
            output = model.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            new_tokens = output[:, batch["input_ids"].shape[1] :]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return completions


def greedy_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    max_new_tokens: int = 16,
) -> tuple[float, list[bool]]:
    """Share of ``problems`` whose greedy completion holds the boxed answer, and per problem."""
    completions = greedy_completions(
        model, tokenizer, [problem.prompt for problem in problems], max_new_tokens
    )
    correct = [
        is_correct(completion, problem.answer)
        for completion, problem in zip(completions, problems, strict=True)
    ]
    return sum(correct) / max(len(correct), 1), correct

"""Scorers of an evaluation suite: pure, batched, without gradients.

Three ways to score a causal LM on a task (:mod:`trainer.evals.suite` reads the files):

* multiple choice by log-likelihood (:func:`score_multiple_choice`): for each item, the
  summed log-prob of each choice's continuation tokens given the context; the choice
  with the highest sum is the prediction (lm-eval's ``acc``). Beside it, as lm-eval
  reports them, ``acc_norm`` (the sum divided by the choice's length in characters) and
  ``acc_bytes`` (divided by its length in UTF-8 bytes);
* generative math (:func:`score_math`): greedy generation, then the boxed-answer
  ``math`` reward of :mod:`trainer.tasks.rewards` (math-verify);
* exact match (:func:`score_exact_match`): greedy generation, equal to the answer after
  :func:`normalize_exact` (strip, collapse every run of whitespace to one space; case
  and punctuation are kept).

Any Hugging Face causal LM and tokenizer works (char-level, byte-level BPE, Unigram):
text is encoded with ``add_special_tokens=False``, as rollouts are; a chat template, when
wanted, is applied by the caller through ``format_prompt`` (e.g.
``functools.partial(trainer.chat.format_prompt, tokenizer)``).

**The prompt/continuation boundary** (:func:`encode_pair`). As lm-eval does, trailing
whitespace of the context moves to the continuation, both ``tokenize(context +
continuation)`` and ``tokenize(context)`` are encoded, and the scored tokens are those of
the whole after the context's. When the tokenizer merges across the boundary (the whole's
first tokens are not the context's tokens: a BPE merge of the context's last characters
with the continuation's first), lm-eval still cuts at ``len(tokenize(context))``, which
scores a token that holds context text and drops one that holds continuation text. Here
the cut is at the longest common prefix of the two encodings instead: every token that
holds any continuation text is scored (the merged token, which also holds a little of the
context, included), and the item is flagged ``merged`` (``boundary_merged`` counts them).
With no merge this is exactly lm-eval's split. A context that encodes to no tokens is
conditioned on the BOS token (else EOS), as lm-eval's ``prefix_token_id``.

**Long inputs are cut from the left**, as lm-eval's HF backend does, never refused. The
model's window is its config's ``n_positions`` / ``max_position_embeddings``
(:func:`max_positions`; no limit when it has neither). A log-likelihood request keeps
its continuation whole and the *last* ``window + 1`` tokens of context + continuation
(the first is only conditioned on; lm-eval's ``(context_enc +
continuation_enc)[-(max_length + 1):]``, :func:`fit_window`); a continuation longer than
the window on its own is scored on its last ``window`` tokens, conditioned on the token
before them. A generative prompt keeps its last ``window - max_new_tokens`` tokens
(lm-eval's ``generate_until``), so prompt and answer fit; a ``max_new_tokens`` that
leaves no room for a prompt is refused. Each task counts its cut items in the
``truncated`` metric (a multiple-choice item counts once, whichever of its choices were
cut); it is in :class:`TaskResult` and the results file, not in the shipped metric keys.

**Why not lm-eval** (checked on 2026-12-01 with ``pip download lm-eval``: version 0.4.13).
Its wheel requires 14 packages (``datasets``, ``evaluate``, ``rouge-score``,
``sacrebleu``, ``scikit-learn``, ``sqlitedict``, ``pytablewriter``, ``word2number``, ...)
that resolve to 68 wheels (pandas, scipy, nltk, aiohttp, ...), and its HF backend needs
the ``hf`` extra (``accelerate``, ``peft``); none of ``datasets``, ``evaluate``,
``accelerate``, ``sacrebleu``, ``scikit-learn`` is in the trainer's environment. Its
loglikelihood path could run offline (local files through ``datasets.load_dataset("json",
data_files=...)``, a model directory loaded by path, ``HfApi().model_info`` for the model's
hub revision failing softly), but every task needs a YAML config and a ``datasets``
Arrow cache, and its rules fit in the hundred lines below. So we keep its rules and not
the package: the split of ``TemplateLM._encode_pair`` (with the merge handling above)
and ``acc`` / ``acc_norm`` / ``acc_bytes`` of ``ConfigurableTask.process_results``.

Shapes in docstrings: B sequences, T positions, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.evals.suite import ChoiceItem
from trainer.models import max_positions
from trainer.tasks.base import Problem
from trainer.tasks.rewards import math_reward

PromptFormat = Callable[[str], str]


# --- the boundary ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EncodedPair:
    """A context and its continuation as token ids, split where scoring starts."""

    context: list[int]
    """The conditioning tokens (never empty: a BOS/EOS prefix for an empty context)."""
    continuation: list[int]
    """The scored tokens: every token of ``tokenize(context + continuation)`` that holds
    continuation text."""
    merged: bool
    """Whether the tokenizer merged across the boundary (module docstring)."""
    truncated: bool = False
    """Whether :func:`fit_window` cut tokens off the left to fit the model's window."""


def prefix_token_id(tokenizer: Any) -> int:
    """The token an empty context is conditioned on: BOS, else EOS (as lm-eval)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("the tokenizer has neither a BOS nor an EOS token to condition on")


def encode_pair(tokenizer: Any, context: str, continuation: str) -> EncodedPair:
    """Split ``context + continuation`` into conditioning and scored tokens."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation, add_special_tokens=False)
    head = tokenizer.encode(context, add_special_tokens=False) if context else []
    common = 0
    while common < min(len(head), len(whole)) and head[common] == whole[common]:
        common += 1
    scored = whole[common:]
    if not scored:
        raise ValueError(f"the continuation {continuation!r} encodes to no tokens")
    conditioning = whole[:common] or [prefix_token_id(tokenizer)]
    return EncodedPair(conditioning, scored, merged=common < len(head))


def fit_window(pair: EncodedPair, window: int | None) -> EncodedPair:
    """``pair`` cut from the left to fit a model of ``window`` positions (module
    docstring): at most ``window + 1`` tokens, the continuation whole when it fits in
    ``window``, else its last ``window`` tokens; ``truncated`` says whether it was cut."""
    if window is None or len(pair.context) + len(pair.continuation) <= window + 1:
        return pair
    if window < 1:
        raise ValueError(f"a model window of {window} positions scores nothing")
    continuation = pair.continuation[-window:]
    kept = pair.context + pair.continuation[: len(pair.continuation) - len(continuation)]
    context = kept[-(window + 1 - len(continuation)) :]
    return EncodedPair(context, continuation, pair.merged, truncated=True)


# --- log-likelihoods ------------------------------------------------------------------------
def sequence_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probs of the masked targets, and whether each is the greedy choice.

    logits: [B, T, V], the model's output at each position; targets: [B, T] long, the
    token that follows each position; mask: [B, T] bool, the positions to score.
    Returns (sums [B] float32, greedy [B] bool: every scored target is its position's
    argmax). Values at unmasked positions change nothing.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    sums = torch.where(mask, picked, torch.zeros_like(picked)).sum(-1)
    greedy = ((logits.argmax(-1) == targets) | ~mask).all(-1)
    return sums, greedy


@dataclass(frozen=True)
class LogLikelihood:
    """The log-likelihood of one continuation given its context."""

    logprob: float
    n_tokens: int
    greedy: bool
    """Whether greedy decoding from the context would produce the continuation."""
    merged: bool
    truncated: bool = False
    """Whether the request was cut from the left to fit the model (:func:`fit_window`);
    ``n_tokens`` then counts the continuation tokens actually scored."""


def loglikelihoods(
    model: Any,
    tokenizer: Any,
    requests: Sequence[tuple[str, str]],
    *,
    batch_size: int = 16,
) -> list[LogLikelihood]:
    """The :class:`LogLikelihood` of each ``(context, continuation)`` request.

    Batched with right padding (causal attention: a position never sees the padding
    after it), longest first; results come back in request order. A request longer than
    the model's window is cut from the left (:func:`fit_window`).
    """
    window = max_positions(model)
    pairs = [fit_window(encode_pair(tokenizer, c, x), window) for c, x in requests]
    lengths = [len(pair.context) + len(pair.continuation) for pair in pairs]
    order = sorted(range(len(pairs)), key=lambda i: -lengths[i])
    results: list[LogLikelihood | None] = [None] * len(pairs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = _device(model)
    with _evaluating(model), torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            sequences = [pairs[i].context + pairs[i].continuation for i in chunk]
            width = max(len(sequence) for sequence in sequences) - 1
            input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            targets = torch.full((len(chunk), width), pad, dtype=torch.long)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.bool)
            for row, (i, sequence) in enumerate(zip(chunk, sequences, strict=True)):
                length = len(sequence) - 1
                input_ids[row, :length] = torch.tensor(sequence[:-1])
                targets[row, :length] = torch.tensor(sequence[1:])
                attention[row, :length] = 1
                mask[row, len(pairs[i].context) - 1 : length] = True
            logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device))
            sums, greedy = sequence_logprobs(logits.logits, targets.to(device), mask.to(device))
            for row, i in enumerate(chunk):
                results[i] = LogLikelihood(
                    logprob=float(sums[row]),
                    n_tokens=len(pairs[i].continuation),
                    greedy=bool(greedy[row]),
                    merged=pairs[i].merged,
                    truncated=pairs[i].truncated,
                )
    return [result for result in results if result is not None]


# --- multiple choice ------------------------------------------------------------------------
def choose(logprobs: Sequence[float], choices: Sequence[str]) -> tuple[int, int, int]:
    """The predicted index by ``acc``, ``acc_norm`` and ``acc_bytes`` (lm-eval's rules).

    ``acc``: the highest summed log-prob; ``acc_norm``: the highest log-prob per character
    of the choice text; ``acc_bytes``: per UTF-8 byte. Ties go to the first choice.
    """
    chars = [max(len(choice), 1) for choice in choices]
    size = [max(len(choice.encode("utf-8")), 1) for choice in choices]

    def argmax(values: Sequence[float]) -> int:
        return max(range(len(values)), key=lambda i: (values[i], -i))

    return (
        argmax(logprobs),
        argmax([lp / n for lp, n in zip(logprobs, chars, strict=True)]),
        argmax([lp / n for lp, n in zip(logprobs, size, strict=True)]),
    )


@dataclass(frozen=True)
class ChoiceScore:
    """One multiple-choice item scored: each choice's log-prob and the predictions."""

    id: str
    logprobs: tuple[float, ...]
    prediction: int
    prediction_norm: int
    prediction_bytes: int
    answer: int
    merged: bool
    truncated: bool = False
    """Whether any of its choices was cut from the left to fit the model."""


@dataclass
class TaskResult:
    """A task's scores: per-item ``scores`` (1.0 / 0.0) and the task's metrics.

    ``metrics`` holds ``accuracy`` and ``n`` (SPEC 9's ``eval/<suite>/<task>/...``),
    ``truncated`` (items cut from the left to fit the model, module docstring), and per
    type: ``acc_norm``, ``acc_bytes``, ``boundary_merged`` for multiple choice.
    """

    metrics: dict[str, float]
    scores: list[float]
    completions: list[str] | None = None
    choices: list[ChoiceScore] = field(default_factory=list)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def score_multiple_choice(
    model: Any,
    tokenizer: Any,
    items: Sequence[ChoiceItem],
    *,
    format_prompt: PromptFormat | None = None,
    batch_size: int = 16,
) -> TaskResult:
    """Score each item by the log-likelihood of its choices (one request per choice)."""
    contexts = [format_prompt(item.context) if format_prompt else item.context for item in items]
    requests = [
        (context, continuation)
        for context, item in zip(contexts, items, strict=True)
        for continuation in item.continuations
    ]
    flat = loglikelihoods(model, tokenizer, requests, batch_size=batch_size)
    scored: list[ChoiceScore] = []
    offset = 0
    for item in items:
        own = flat[offset : offset + len(item.choices)]
        offset += len(item.choices)
        logprobs = tuple(result.logprob for result in own)
        prediction, norm, size = choose(logprobs, item.choices)
        scored.append(
            ChoiceScore(
                item.id,
                logprobs,
                prediction,
                norm,
                size,
                item.answer,
                merged=any(r.merged for r in own),
                truncated=any(r.truncated for r in own),
            )
        )
    scores = [float(s.prediction == s.answer) for s in scored]
    metrics = {
        "accuracy": _mean(scores),
        "n": float(len(scored)),
        "acc_norm": _mean([float(s.prediction_norm == s.answer) for s in scored]),
        "acc_bytes": _mean([float(s.prediction_bytes == s.answer) for s in scored]),
        "boundary_merged": float(sum(s.merged for s in scored)),
        "truncated": float(sum(s.truncated for s in scored)),
    }
    return TaskResult(metrics=metrics, scores=scores, choices=scored)


# --- generation -----------------------------------------------------------------------------
def prompt_budget(model: Any, max_new_tokens: int) -> int | None:
    """How many prompt tokens fit beside ``max_new_tokens`` new ones in the window of
    ``model`` (or of a model config) (None: no limit); ``ValueError`` when none do."""
    window = max_positions(model)
    if window is None:
        return None
    if max_new_tokens >= window:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} leaves no room for a prompt: the model "
            f"takes {window} positions; generate fewer tokens"
        )
    return window - max_new_tokens


@dataclass(frozen=True)
class Generations:
    """Greedy completions, and which prompts were cut from the left to fit the model."""

    completions: list[str]
    truncated: list[bool]


def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 32,
    batch_size: int = 16,
) -> Generations:
    """Greedy completions of ``prompts`` (already formatted), decoded up to EOS.

    Batched with left padding and the KV cache; special tokens are not decoded. A prompt
    keeps its last :func:`prompt_budget` tokens (module docstring: long inputs).
    """
    budget = prompt_budget(model, max_new_tokens)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    device = _device(model)
    completions: list[str] = []
    truncated: list[bool] = []
    with _evaluating(model), torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            encoded = [
                tokenizer.encode(p, add_special_tokens=False) or [prefix_token_id(tokenizer)]
                for p in prompts[start : start + batch_size]
            ]
            if budget is not None:
                truncated.extend(len(ids) > budget for ids in encoded)
                encoded = [ids[-budget:] for ids in encoded]
            else:
                truncated.extend(False for _ in encoded)
            width = max(len(ids) for ids in encoded)
            input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
            attention = torch.zeros_like(input_ids)
            for row, ids in enumerate(encoded):
                input_ids[row, width - len(ids) :] = torch.tensor(ids)
                attention[row, width - len(ids) :] = 1
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=pad,
            )
            for ids in output[:, width:].tolist():
                if eos is not None and eos in ids:
                    ids = ids[: ids.index(eos)]
                completions.append(tokenizer.decode(ids, skip_special_tokens=True))
    return Generations(completions, truncated)


def greedy_generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    max_new_tokens: int = 32,
    batch_size: int = 16,
) -> list[str]:
    """The completions of :func:`generate_completions`."""
    return generate_completions(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size
    ).completions


def math_scores(completions: Sequence[str], answers: Sequence[str]) -> list[float]:
    """The boxed-answer ``math`` reward of each completion (1.0 correct, else 0.0)."""
    return math_reward([""] * len(completions), completions, answers)


def normalize_exact(text: str) -> str:
    """Exact match's normalisation: strip, and collapse each whitespace run to one space."""
    return " ".join(text.split())


def exact_match_scores(completions: Sequence[str], answers: Sequence[str]) -> list[float]:
    """1.0 where the completion equals the answer after :func:`normalize_exact`."""
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    return [
        float(normalize_exact(completion) == normalize_exact(answer))
        for completion, answer in zip(completions, answers, strict=True)
    ]


def _score_generated(
    scorer: Callable[[Sequence[str], Sequence[str]], list[float]],
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    format_prompt: PromptFormat | None,
    max_new_tokens: int,
    batch_size: int,
) -> TaskResult:
    prompts = [format_prompt(p.prompt) if format_prompt else p.prompt for p in problems]
    generated = generate_completions(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size
    )
    scores = scorer(generated.completions, [p.answer for p in problems])
    metrics = {
        "accuracy": _mean(scores),
        "n": float(len(scores)),
        "truncated": float(sum(generated.truncated)),
    }
    return TaskResult(metrics=metrics, scores=scores, completions=generated.completions)


def score_math(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    *,
    format_prompt: PromptFormat | None = None,
    max_new_tokens: int = 32,
    batch_size: int = 16,
) -> TaskResult:
    """Greedy completions of the problems, scored by the boxed-answer math reward."""
    return _score_generated(
        math_scores, model, tokenizer, problems, format_prompt, max_new_tokens, batch_size
    )


def score_exact_match(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    *,
    format_prompt: PromptFormat | None = None,
    max_new_tokens: int = 32,
    batch_size: int = 16,
) -> TaskResult:
    """Greedy completions of the problems, scored by :func:`exact_match_scores`."""
    return _score_generated(
        exact_match_scores, model, tokenizer, problems, format_prompt, max_new_tokens, batch_size
    )


SCORERS: dict[str, Callable[..., TaskResult]] = {
    "math": score_math,
    "multiple_choice": score_multiple_choice,
    "exact_match": score_exact_match,
}
"""The scorer of each task type (:data:`trainer.evals.suite.TASK_TYPES`); each takes
``(model, tokenizer, items, *, format_prompt=None, batch_size=...)``."""


# --- helpers ----------------------------------------------------------------------------------
def _device(model: Any) -> torch.device:
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return parameter.device if parameter is not None else torch.device("cpu")


@contextmanager
def _evaluating(model: Any) -> Iterator[None]:
    """Eval mode inside the block, the model's own mode restored after it."""
    was_training = bool(getattr(model, "training", False))
    if hasattr(model, "eval"):
        model.eval()
    try:
        yield
    finally:
        if hasattr(model, "train"):
            model.train(was_training)

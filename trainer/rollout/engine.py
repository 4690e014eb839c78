"""The rollout interface and its HF ``generate`` implementation (batched, KV cache)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from transformers import (
    DynamicCache,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from trainer.chat import PromptTooLongError, context_overflow
from trainer.config import ROLLOUT_CACHES
from trainer.models import max_positions


@dataclass
class RolloutBatch:
    """``n`` samples per prompt, sample-major within a prompt: index = prompt * n + j.

    ``response_ids`` stop after the first EOS (kept: the policy learns to stop) or at
    ``max_new_tokens``; ``response_texts`` are decoded without special tokens.
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    response_texts: list[str]
    finished: list[bool]

    def __len__(self) -> int:
        return len(self.response_ids)


class RolloutEngine(Protocol):
    """What the trainer needs from a generator; a vLLM engine implements the same."""

    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool = False,
    ) -> RolloutBatch:
        """``n`` responses to each prompt (already chat-formatted text)."""
        ...

    def sync_weights(self) -> None:
        """Make the engine sample from the trainer's current weights."""
        ...


CacheKind = Literal["dynamic", "static"]
Decoder = Literal["loop", "generate"]
DECODERS: tuple[str, ...] = ("loop", "generate")
"""How the dynamic cache decodes: the engine's own loop (the default), or HF ``generate``."""
CACHE_KINDS: tuple[str, ...] = ROLLOUT_CACHES
"""The KV caches ``cache`` may name (a run picks one per policy: ``PolicyConfig.rollout_cache``)."""
STATIC_WIDTH_MULTIPLE = 16
"""With the static cache, prompts are left-padded to a multiple of this width."""


_BOUND_SLACK = 1e-6
"""Relative slack on the bounds of :func:`multinomial_like_torch` (float32 rounds the
ratio it compares by at most 2 x 2**-24 relative)."""


def multinomial_like_torch(
    probs: torch.Tensor,
    rows: int,
    index: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``torch.multinomial(full, 1).squeeze(1)[index]`` on the CPU, where ``full`` is a
    ``[rows, vocab]`` float32 probability tensor whose rows ``index`` (all rows if None)
    are ``probs``: the same tokens and the same RNG consumption, at about half the cost.

    Why it is the same: for one sample torch's CPU kernel draws ``q = exponential_()``
    over the whole tensor, each element ``float32(-log1p(-u))`` of one float64 uniform
    ``u`` of the generator's stream (which ``uniform_`` on a float64 tensor of the same
    shape draws identically), and returns the first ``argmax(p / q)`` of each row. The
    log is what costs (a scalar libm call per element). Since ``u <= -log1p(-u) <= u /
    (1 - u)``, each ratio lies in ``[p (1 - u) / u, p / u]``; only the elements whose
    upper bound reaches the row's largest lower bound (with :data:`_BOUND_SLACK` for
    float32 rounding; about one a row) can be the argmax, and for those the ratio is
    computed exactly as torch does (``math.log1p`` is the same libm function, then
    float32 division), ties going to the first index. Equality with torch is checked
    once per process (:func:`_matches_torch`); :class:`RowSampler` falls back to
    ``torch.multinomial`` where it fails. Not equal only when a uniform is exactly 0 (a
    2**-53 event per element, where torch divides by 0).
    """
    vocab = probs.shape[1]
    u = torch.empty(rows, vocab, dtype=torch.float64).uniform_(generator=generator)
    if index is not None:
        u = u.index_select(0, index)
    upper = probs.double().div_(u)
    best = (upper * (1.0 - u)).amax(dim=1, keepdim=True).mul_(1.0 - _BOUND_SLACK)
    row, col = upper.mul_(1.0 + _BOUND_SLACK).ge_(best).nonzero(as_tuple=True)
    noise = torch.tensor([-math.log1p(-x) for x in u[row, col].tolist()], dtype=torch.float64)
    ratio = probs[row, col] / noise.to(torch.float32)
    count = probs.shape[0]
    top = torch.full((count,), -math.inf).scatter_reduce_(0, row, ratio, "amax")
    first = ratio == top[row]
    tokens = torch.full((count,), vocab, dtype=torch.long)
    return tokens.scatter_reduce_(0, row[first], col[first], "amin")


@functools.cache
def _matches_torch() -> bool:
    """Whether :func:`multinomial_like_torch` draws what ``torch.multinomial`` draws in
    this torch build (once per process, on private generators)."""
    probs = torch.softmax(torch.randn(48, 97, generator=torch.Generator().manual_seed(0)), -1)
    probs[::3] = torch.softmax(probs[::3].log() * 8, -1)  # peaked rows too
    index = torch.arange(0, 48, 2)
    for seed in range(4):
        theirs, ours = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expected = torch.multinomial(probs, 1, generator=theirs).squeeze(1)[index]
        got = multinomial_like_torch(probs[index], 48, index, generator=ours)
        if not torch.equal(got, expected) or not torch.equal(theirs.get_state(), ours.get_state()):
            return False
    return True


class RowSampler:
    """One ``torch.multinomial(probs, 1)`` draw a step over ``rows`` rows of which only
    the running ones are given: the draws ``generate`` makes for them while it feeds its
    finished rows too (:meth:`HFRolloutEngine._decode`)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.full: torch.Tensor | None = None
        """The fallback's full-width probabilities (finished rows keep their last ones:
        any valid row draws the same noise, and its token is not used)."""

    def sample(self, probs: torch.Tensor, running: Sequence[int]) -> torch.Tensor:
        """The tokens of the ``running`` rows (full-batch indices, increasing), whose
        probabilities ``probs`` are, in that order."""
        everyone = len(running) == self.rows
        index = None if everyone else torch.tensor(running, device=probs.device)
        if probs.device.type == "cpu" and probs.dtype == torch.float32 and _matches_torch():
            return multinomial_like_torch(probs, self.rows, index)
        if self.full is None or index is None:
            self.full = probs
        else:
            self.full = self.full.index_copy(0, index, probs)
        tokens = torch.multinomial(self.full, num_samples=1).squeeze(1)
        return tokens if index is None else tokens[index]


class HFRolloutEngine:
    """Generation with the training model itself: its own decoding loop over the model's
    forward (dynamic KV cache), or ``model.generate`` (static cache, ``decoder="generate"``).

    Prompts are left-padded into one batch; sampling uses torch's global RNG, so a run
    is reproducible from its seed and the RNG state saved in checkpoints.

    Sampling draws from ``softmax(logits / temperature)`` with top-k and top-p off: the
    distribution whose log-probs :class:`trainer.policy.Policy` scores (SPEC 9). A
    sampler that changes it (top-k, top-p, penalties) must change the scoring with it.
    ``greedy`` takes the argmax, which no temperature changes.

    ``cache`` picks the KV cache of ``generate``: ``"dynamic"`` (the default, grown token
    by token) or ``"static"`` (``cache_implementation="static"``: preallocated for the
    batch and ``prompt width + max_new_tokens``, the shape ``torch.compile`` needs). With
    the static cache the prompt width is rounded up to a multiple of
    :data:`STATIC_WIDTH_MULTIPLE` (more left padding, masked), so a compiled forward sees
    few shapes. ``compile`` (static cache on CUDA only) lets transformers compile the
    decoding forward (its ``CompileConfig`` defaults); otherwise compilation stays off.
    Both change how the tokens are computed, not which distribution they are drawn from:
    the trainer scores the behaviour log-probs itself either way (SPEC 9).
    ``bench/gpu_check.py`` measures the two caches against each other on a GPU.

    ``prefix_reuse`` (dynamic cache, ``n > 1`` samples) encodes each prompt once: one
    forward over the ``B`` prompts (all but their last token) fills a KV cache, whose
    rows are repeated ``n`` times each (sample-major, as ``num_return_sequences`` orders
    them) before ``generate`` continues from it with the ``B x n`` rows (the decoding loop
    prefills the whole prompts and repeats their last logits too). The prefill then
    costs ``B`` rows instead of ``B x n`` (a few-shot prompt is long); the samples are
    drawn from the same distribution with the same RNG draws, the logits equal to float
    rounding (``bench/prefix_reuse.py`` measures both). It pays on the tiny zoo models'
    15-token prompts too (issue 35: 0.72x the CPU time of a 16 x 8 rollout through the
    loop), but stays off by default: not bit-equal to the prefill of ``B x n`` rows.

    ``decoder`` (dynamic cache only; the static cache always uses ``generate``): ``"loop"``
    (the default, issue 35) decodes with :meth:`_decode`, which drops every row that
    emitted EOS from the batch and its KV cache, so a finished response costs no more
    forwards; HF ``generate`` keeps feeding such rows pad tokens until the longest
    response ends. The loop samples exactly as ``generate`` does (``softmax(logits / T)``,
    one ``torch.multinomial`` over every row of the batch a step, finished rows included,
    so the RNG stream and each running row's draw are the same; see :meth:`_decode`).
    ``"generate"`` keeps the earlier path, for comparison (``bench/vs_trl.py --decoder``).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        cache: CacheKind = "dynamic",
        compile: bool = False,
        prefix_reuse: bool = False,
        decoder: Decoder = "loop",
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; generation could not stop")
        if cache not in CACHE_KINDS:
            raise ValueError(f"unknown KV cache {cache!r}; use one of {CACHE_KINDS}")
        if compile and cache != "static":
            raise ValueError("compile=True needs cache='static' (a dynamic cache is not compiled)")
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r}; use one of {DECODERS}")
        if compile and model.device.type != "cuda":
            raise ValueError(
                f"compile=True compiles the forward on CUDA only; this model is on "
                f"{model.device} (use cache='static' without compile there)"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.cache: CacheKind = cache
        self.compile = compile
        self.prefix_reuse = prefix_reuse
        self.decoder: Decoder = decoder
        self.forward_batch_sizes: list[int] = []
        """Rows of every forward of the last :meth:`generate` call through :meth:`_decode`
        (the prefill first): what finished rows no longer cost."""
        # Checked once: inspect.signature on every forward of the loop costs per step.
        self._logits_to_keep = bool(model._supports_logits_to_keep())
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )

    def sync_weights(self) -> None:
        """Nothing to do: this engine generates with the training model's weights."""

    def encode_prompts(self, prompts: Sequence[str]) -> list[list[int]]:
        return [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]

    def _cache_options(self) -> dict[str, object]:
        """The ``GenerationConfig`` fields of the chosen cache (none for the default)."""
        if self.cache == "dynamic":
            return {}
        return {"cache_implementation": "static", "disable_compile": not self.compile}

    def _reuses_prefix(self, samples: int, width: int) -> bool:
        """Whether this call prefills the prompts once (:attr:`prefix_reuse`)."""
        return self.prefix_reuse and self.cache == "dynamic" and samples > 1 and width > 1

    def _prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, samples: int
    ) -> DynamicCache:
        """The KV cache of every prompt but its last token, each row repeated ``samples``
        times (the positions are those ``generate`` gives left-padded rows)."""
        position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        cache = DynamicCache(config=self.model.config)
        extra: dict[str, object] = {}
        if self._logits_to_keep:
            extra["logits_to_keep"] = 1
        self.model(
            input_ids=input_ids[:, :-1],
            attention_mask=attention_mask[:, :-1],
            position_ids=position_ids[:, :-1],
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        cache.batch_repeat_interleave(samples)
        return cache

    def _generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        samples: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool,
        reuse: bool,
    ) -> tuple[list[list[int]], list[bool]]:
        """The responses (cut after the first EOS) and whether each ended, by HF
        ``generate``: the static cache's path, and the dynamic one's before issue 35."""
        width = input_ids.shape[1]
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_k=None if greedy else 0,
            top_p=None if greedy else 1.0,
            num_return_sequences=1 if reuse else samples,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.pad_id,
            use_cache=True,
            **self._cache_options(),
        )
        extra: dict[str, object] = {}
        if reuse:
            extra["past_key_values"] = self._prefill(input_ids, attention_mask, samples)
            input_ids = input_ids.repeat_interleave(samples, dim=0)
            attention_mask = attention_mask.repeat_interleave(samples, dim=0)
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            **extra,
        )
        responses: list[list[int]] = []
        finished: list[bool] = []
        for ids in output[:, width:].tolist():
            if self.tokenizer.eos_token_id in ids:
                ids = ids[: ids.index(self.tokenizer.eos_token_id) + 1]
                finished.append(True)
            else:
                finished.append(False)
            responses.append(ids)
        return responses, finished

    def _last_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
    ) -> torch.Tensor:
        """float32 logits [rows, vocab] at the last position of a forward that extends
        ``cache`` (the LM head runs on that position only where the model allows)."""
        self.forward_batch_sizes.append(int(input_ids.shape[0]))
        extra: dict[str, object] = {"logits_to_keep": 1} if self._logits_to_keep else {}
        output = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            **extra,
        )
        return output.logits[:, -1].to(dtype=torch.float32)

    def _decode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        *,
        samples: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool,
        reuse: bool,
    ) -> tuple[list[list[int]], list[bool]]:
        """The responses (each ending at its first EOS) and whether each ended, decoded
        with a dynamic cache from which finished rows are dropped.

        Rows are sample-major (``prompt * samples + j``), as ``num_return_sequences``
        orders them. The prefill encodes the left-padded prompts (``B`` rows with
        ``reuse``, whose cache and last logits are then repeated ``samples`` times; else
        ``B x samples`` rows, as ``generate`` does), with ``generate``'s position ids
        (``cumsum(mask) - 1``). Each step then forwards only the rows still running:
        when a row emits EOS its KV rows, mask row and position leave the batch.

        Why the tokens equal ``generate``'s for one seed: ``generate`` draws every step
        with one ``torch.multinomial(softmax(logits / T), 1)`` over all ``B x samples``
        rows, finished ones included (their pad-fed logits), and the draw of a row
        depends on the RNG state and that row's probabilities only (with one sample
        torch takes ``argmax(p / q)`` with ``q`` exponential noise drawn for the whole
        ``[rows, vocab]`` tensor). :class:`RowSampler` draws that noise for all rows and
        uses the running rows' part: the same RNG consumption, the same draw for every
        running row. What can still differ is float rounding of the logits themselves
        (a forward over fewer rows, or a prefill of other shape, may round differently;
        the tests check the tokens on every zoo model).
        """
        eos = self.tokenizer.eos_token_id
        self.forward_batch_sizes = []
        position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        if not reuse and samples > 1:
            input_ids = input_ids.repeat_interleave(samples, dim=0)
            attention_mask = attention_mask.repeat_interleave(samples, dim=0)
            position_ids = position_ids.repeat_interleave(samples, dim=0)
        cache = DynamicCache(config=self.model.config)
        logits = self._last_logits(input_ids, attention_mask, position_ids, cache)
        positions = position_ids[:, -1:] + 1
        if reuse:
            cache.batch_repeat_interleave(samples)
            logits = logits.repeat_interleave(samples, dim=0)
            attention_mask = attention_mask.repeat_interleave(samples, dim=0)
            positions = positions.repeat_interleave(samples, dim=0)
        rows = attention_mask.shape[0]
        running = list(range(rows))  # the full-batch index of each row still decoding
        responses: list[list[int]] = [[] for _ in range(rows)]
        finished = [False] * rows
        sampler = RowSampler(rows)
        for step in range(max_new_tokens):
            if greedy:
                tokens = logits.argmax(dim=-1)
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                tokens = sampler.sample(probs, running)
            keep: list[int] = []
            for i, (row, token) in enumerate(zip(running, tokens.tolist(), strict=True)):
                responses[row].append(token)
                if token == eos:
                    finished[row] = True
                else:
                    keep.append(i)
            if not keep or step == max_new_tokens - 1:
                break
            if len(keep) < len(running):
                index = torch.tensor(keep, device=tokens.device)
                cache.batch_select_indices(index)
                attention_mask = attention_mask[index]
                positions = positions[index]
                tokens = tokens[index]
                running = [running[i] for i in keep]
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(keep), 1)], 1)
            logits = self._last_logits(tokens[:, None], attention_mask, positions, cache)
            positions = positions + 1
        return responses, finished

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool = False,
    ) -> RolloutBatch:
        prompt_ids = self.encode_prompts(prompts)
        width = max(len(ids) for ids in prompt_ids)
        overflow = context_overflow(width, max_new_tokens, max_positions(self.model))
        if overflow is not None:
            raise PromptTooLongError(overflow)
        if self.cache == "static":
            width = -(-width // STATIC_WIDTH_MULTIPLE) * STATIC_WIDTH_MULTIPLE
        input_ids = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        samples = 1 if greedy else n
        input_ids = input_ids.to(self.model.device)
        attention_mask = attention_mask.to(self.model.device)
        was_training = self.model.training
        self.model.eval()
        try:
            loop = self.cache == "dynamic" and self.decoder == "loop"
            decode = self._decode if loop else self._generate
            responses, finished = decode(
                input_ids,
                attention_mask,
                samples=samples,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                greedy=greedy,
                reuse=self._reuses_prefix(samples, width),
            )
        finally:
            self.model.train(was_training)
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        repeated_prompts = [ids for ids in prompt_ids for _ in range(samples)]
        return RolloutBatch(repeated_prompts, responses, texts, finished)

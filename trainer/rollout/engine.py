"""The rollout interface and its HF ``generate`` implementation (batched, KV cache)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from trainer.config import ROLLOUT_CACHES


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
CACHE_KINDS: tuple[str, ...] = ROLLOUT_CACHES
"""The KV caches ``cache`` may name (a run picks one per policy: ``PolicyConfig.rollout_cache``)."""
STATIC_WIDTH_MULTIPLE = 16
"""With the static cache, prompts are left-padded to a multiple of this width."""


class HFRolloutEngine:
    """Generation with the training model itself through ``model.generate``.

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
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        cache: CacheKind = "dynamic",
        compile: bool = False,
    ) -> None:
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; generation could not stop")
        if cache not in CACHE_KINDS:
            raise ValueError(f"unknown KV cache {cache!r}; use one of {CACHE_KINDS}")
        if compile and cache != "static":
            raise ValueError("compile=True needs cache='static' (a dynamic cache is not compiled)")
        if compile and model.device.type != "cuda":
            raise ValueError(
                f"compile=True compiles the forward on CUDA only; this model is on "
                f"{model.device} (use cache='static' without compile there)"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.cache: CacheKind = cache
        self.compile = compile
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
        if self.cache == "static":
            width = -(-width // STATIC_WIDTH_MULTIPLE) * STATIC_WIDTH_MULTIPLE
        input_ids = torch.full((len(prompt_ids), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_k=None if greedy else 0,
            top_p=None if greedy else 1.0,
            num_return_sequences=1 if greedy else n,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.pad_id,
            use_cache=True,
            **self._cache_options(),
        )
        was_training = self.model.training
        self.model.eval()
        try:
            output = self.model.generate(
                input_ids=input_ids.to(self.model.device),
                attention_mask=attention_mask.to(self.model.device),
                generation_config=config,
            )
        finally:
            self.model.train(was_training)
        samples = 1 if greedy else n
        generated = output[:, width:].tolist()
        responses: list[list[int]] = []
        finished: list[bool] = []
        for ids in generated:
            if self.tokenizer.eos_token_id in ids:
                ids = ids[: ids.index(self.tokenizer.eos_token_id) + 1]
                finished.append(True)
            else:
                finished.append(False)
            responses.append(ids)
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        repeated_prompts = [ids for ids in prompt_ids for _ in range(samples)]
        return RolloutBatch(repeated_prompts, responses, texts, finished)

"""Tiny randomly initialised causal LMs of three real architectures.

Each zoo policy is a genuine ``transformers`` architecture (Llama, Qwen2, GPT-2) at toy
size, so the trainer exercises the same code paths (``generate`` with a KV cache, left
padding, ``save_pretrained``) it uses for real checkpoints, in seconds on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

FAMILIES = ("llama", "qwen2", "gpt2")
MAX_POSITIONS = 128


@dataclass(frozen=True)
class ModelSize:
    """The shape of a tiny transformer and the spread of its initial weights.

    ``init_std`` is 0.1 rather than the usual 0.02 (tuned for wide models): at width 64,
    0.02 leaves the SFT loss on a long plateau, while 0.1 learns the arithmetic in about
    half the steps.
    """

    hidden: int
    layers: int
    heads: int
    intermediate: int
    kv_heads: int | None = None
    tie_embeddings: bool = True
    init_std: float = 0.1


def build_model(
    family: str, tokenizer: PreTrainedTokenizerBase, size: ModelSize, seed: int
) -> PreTrainedModel:
    """A freshly initialised model of ``family`` sized ``size`` for ``tokenizer``.

    Initialisation depends only on ``seed``; dropout is off so that log-probs computed in
    training mode equal those of rollouts (the RL ratio must be exactly 1 on-policy).
    """
    config = model_config(family, tokenizer, size)
    model_class = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "gpt2": GPT2LMHeadModel}
    torch.manual_seed(seed)
    model = model_class[family](config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def model_config(
    family: str, tokenizer: PreTrainedTokenizerBase, size: ModelSize
) -> PretrainedConfig:
    """The ``transformers`` config of a tiny ``family`` model for ``tokenizer``."""
    special = {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": size.tie_embeddings,
        "initializer_range": size.init_std,
    }
    if family == "gpt2":
        return GPT2Config(
            n_embd=size.hidden,
            n_layer=size.layers,
            n_head=size.heads,
            n_inner=size.intermediate,
            n_positions=MAX_POSITIONS,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **special,
        )
    decoder = {
        "hidden_size": size.hidden,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads or size.heads,
        "intermediate_size": size.intermediate,
        "max_position_embeddings": MAX_POSITIONS,
        "attention_dropout": 0.0,
        **special,
    }
    if family == "llama":
        return LlamaConfig(**decoder)
    if family == "qwen2":
        return Qwen2Config(**decoder)
    raise ValueError(f"unknown model family {family!r}; use one of {FAMILIES}")


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (tied embeddings counted once)."""
    return sum(parameter.numel() for parameter in model.parameters())

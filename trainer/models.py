"""Loading a local Hugging Face causal LM and its tokenizer, with fix-it errors.

:func:`check_model_source` runs before any worker starts (it reads only JSON, never
weights), so a wrong path or an encoder-only checkpoint fails the launch at once with a
message saying what to do, instead of a stack trace from inside a distributed worker.

``transformers`` is imported only inside the functions, so :class:`ModelSourceError`
is importable where the trainer's heavy dependencies are not installed (the web app).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DTYPES = ("float32", "bfloat16", "float16")


def max_positions(model: object) -> int | None:
    """The model's window: its config's ``max_position_embeddings`` or ``n_positions``
    (None when it has neither); ``model`` may be the config itself."""
    config = getattr(model, "config", model)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


class ModelSourceError(ValueError):
    """A model or tokenizer source that cannot be used; the message says how to fix it."""


def check_model_source(model_dir: Path, tokenizer_dir: Path | None = None) -> None:
    """Raise :class:`ModelSourceError` unless ``model_dir`` holds a local causal LM.

    Checks, cheaply and in order: the directory exists, it has a ``config.json``, that
    config is a causal-LM architecture, and the tokenizer directory (default: the model
    directory) has tokenizer files.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelSourceError(
            f"model directory {model_dir} does not exist; give the path of a local Hugging "
            "Face model directory (models are never downloaded at run time), or "
            "'zoo:<id>' for a tiny zoo model built with `python -m trainer zoo build`"
        )
    if not (model_dir / "config.json").is_file():
        raise ModelSourceError(
            f"{model_dir} has no config.json, so it is not a Hugging Face model directory; "
            "point at the directory that save_pretrained() wrote"
        )
    config = _config(model_dir)
    if not _is_causal_lm(config):
        raise ModelSourceError(
            f"{model_dir} holds a {config.model_type!r} model configured as "
            f"{_role(config)}, not a causal language model, so it cannot generate rollouts; "
            "use a decoder-only model such as Llama, Qwen2 or GPT-2"
        )
    tokenizer_dir = model_dir if tokenizer_dir is None else Path(tokenizer_dir)
    if not any((tokenizer_dir / name).is_file() for name in TOKENIZER_FILES):
        raise ModelSourceError(
            f"no tokenizer in {tokenizer_dir} (expected {' or '.join(TOKENIZER_FILES)}); "
            "save the tokenizer there with tokenizer.save_pretrained(), or set the "
            "policy's tokenizer to a directory that has one"
        )


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The tokenizer at ``path``, padding on the left and with a pad token guaranteed.

    Left padding lets a batch of prompts generate together; a tokenizer without a pad
    token pads with its eos token.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelSourceError(
                f"the tokenizer in {path} has neither a pad nor an eos token; add one with "
                "tokenizer.add_special_tokens({'pad_token': ...}) and save it again"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    path: Path, dtype: str = "float32", device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """The causal LM at ``path`` in ``dtype`` ("float32", "bfloat16" or "float16"), on
    ``device`` (loaded on the CPU, then moved: a no-op on the CPU), without transformers'
    progress bar.

    The weights themselves are in ``dtype``: right for inference (the evaluator). A
    training :class:`~trainer.policy.Policy` loads float32 master weights whatever its
    ``dtype`` and uses ``dtype`` as the autocast compute dtype only."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    if dtype not in DTYPES:
        raise ModelSourceError(f"unknown dtype {dtype!r}; use one of {DTYPES}")
    # No "Loading weights" bar: in a job's log it is noise, and it would be the last words
    # a failed run's reason quotes.
    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=getattr(torch, dtype), local_files_only=True
    )
    return model if torch.device(device).type == "cpu" else model.to(device)


def fuse_activations(model: torch.nn.Module) -> int:
    """Replace ``model``'s ``gelu_new`` activations (transformers' ``NewGELUActivation``:
    GPT-2 and its kin) with ``gelu_pytorch_tanh`` (``GELUTanh``: torch's fused
    ``gelu(approximate="tanh")``); return how many were replaced.

    Both compute ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``: transformers
    documents ``GELUTanh`` as equivalent to ``NewGELU`` but much faster, "not an exact
    numerical match due to rounding errors". ``NewGELU`` runs that formula as seven
    separate tensor operations, each kept for the backward; the fused kernel makes one
    pass forward and one backward (on a tiny GPT-2, a third of a training step was these
    operations). Only the float rounding of the activation changes (outputs within about
    2e-7, tested). Other activations (SiLU of Llama/Qwen, exact GELU) are already fused
    and stay as they are.
    """
    from transformers.activations import GELUTanh, NewGELUActivation

    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is NewGELUActivation:
                setattr(module, name, GELUTanh())
                replaced += 1
    return replaced


def _is_causal_lm(config: PretrainedConfig) -> bool:
    """Whether ``config`` describes a model that generates left to right.

    BERT-like encoders have a causal-LM class too, but only act as one when configured
    with ``is_decoder=True``; encoder-decoder models are not decoder-only.
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return (
        config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and getattr(config, "is_decoder", True) is not False
        and not getattr(config, "is_encoder_decoder", False)
    )


def _role(config: PretrainedConfig) -> str:
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder"
    if getattr(config, "is_decoder", True) is False:
        return "an encoder (is_decoder=false)"
    return "a non-generative architecture"


def _config(model_dir: Path) -> PretrainedConfig:
    """The config of ``model_dir`` (JSON only), with a fix-it error if unreadable."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except (OSError, ValueError, json.JSONDecodeError) as error:
        raise ModelSourceError(
            f"cannot read the config of {model_dir}: {error}; check that config.json is a "
            "valid Hugging Face config with a known 'model_type'"
        ) from error

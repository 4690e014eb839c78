"""Parameter counts of a pool's models, for MWRA (:mod:`trainer.mwra`) to place them by size.

Reads files only, never weights and never torch: a count declared in the model registry,
a built zoo model's manifest (``zoo.json``), or an estimate from a Hugging Face
``config.json`` (:func:`estimate_parameters`); else 1 with a note, so that an unknown
model weighs like every other unknown one::

    parameter_count("zoo:tiny-qwen-bpe")  # ParameterCount(value=..., origin="zoo")
    parameter_count("/models/llama-7b", declared=7_000_000_000).value  # 7000000000
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ParameterCount:
    """A policy's parameter count for MWRA and where it came from.

    ``origin`` is ``"declared"`` (the registry), ``"zoo"`` (a built zoo manifest),
    ``"config.json"`` (estimated from the model's config) or ``"fallback"`` (unknown:
    1, so that the policy weighs like every other unknown one); ``note`` says why.
    """

    value: int
    origin: str
    note: str = ""


def parameter_count(
    source: str, *, declared: int | None = None, zoo_dir: Path | None = None
) -> ParameterCount:
    """The parameter count of model ``source`` (``"zoo:<id>"`` or a local directory).

    In order: ``declared`` (e.g. the registry's), the built zoo policy's manifest, an
    estimate from the model's ``config.json``, else 1 with a note. Reads JSON only.
    """
    if declared is not None and declared >= 1:
        return ParameterCount(int(declared), "declared")
    if source.startswith("zoo:"):
        from trainer.zoo import ALL_ZOO_IDS, build_command, default_zoo_dir

        zoo_id = source[len("zoo:") :]
        if zoo_id not in ALL_ZOO_IDS:  # the normal zoo and the complementary-skills pool
            return ParameterCount(1, "fallback", f"unknown zoo model {zoo_id!r}; counted as 1")
        directory = (default_zoo_dir() if zoo_dir is None else Path(zoo_dir)) / zoo_id
        manifest = _read_json(directory / "zoo.json")
        n_params = manifest.get("n_params") if manifest else None
        if isinstance(n_params, int) and n_params >= 1:
            return ParameterCount(n_params, "zoo")
        missing = (
            f"zoo model {zoo_id!r} is not built in {directory.parent} "
            f"(`{build_command(zoo_id)}`); counted as 1, like every unbuilt zoo model"
        )
    else:
        directory = Path(source).expanduser()
        missing = (
            f"no readable config.json in {directory}; counted as 1 (set the registry entry's "
            "parameter count to place it by size)"
        )
    config = _read_json(directory / "config.json")
    estimate = estimate_parameters(config) if config else None
    if estimate:
        return ParameterCount(estimate, "config.json", f"estimated from {directory}/config.json")
    return ParameterCount(1, "fallback", missing)


def estimate_parameters(config: Mapping[str, Any]) -> int | None:
    """Estimate a causal LM's parameters from its Hugging Face ``config.json`` (no torch).

    Exact for GPT-2 and for Llama/Qwen2/Mistral-style decoders (what the tiny zoo
    builds); a ``12 L h^2 + V h`` estimate for other decoders; None when the config lacks
    the sizes.
    """
    text_config = config.get("text_config")
    if isinstance(text_config, Mapping) and "hidden_size" not in config:
        config = text_config
    number = _number_reader(config)
    vocab = number("vocab_size")
    if "n_embd" in config:  # GPT-2
        hidden, layers = number("n_embd"), number("n_layer")
        if not (vocab and hidden and layers):
            return None
        inner = number("n_inner") or 4 * hidden
        positions = number("n_positions") or 0
        per_layer = (
            2 * 2 * hidden  # two layer norms
            + hidden * 3 * hidden
            + 3 * hidden  # c_attn
            + hidden * hidden
            + hidden  # attention c_proj
            + hidden * inner
            + inner  # mlp c_fc
            + inner * hidden
            + hidden  # mlp c_proj
        )
        tied = config.get("tie_word_embeddings", True) is not False
        head = 0 if tied else vocab * hidden
        return vocab * hidden + positions * hidden + layers * per_layer + 2 * hidden + head
    hidden, layers = number("hidden_size"), number("num_hidden_layers")
    if not (vocab and hidden and layers):
        return None
    heads = number("num_attention_heads")
    inner = number("intermediate_size")
    if not heads or not inner:
        return 12 * layers * hidden * hidden + vocab * hidden
    head_dim = number("head_dim") or hidden // heads
    kv_heads = number("num_key_value_heads") or heads
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    model_type = str(config.get("model_type", ""))
    if config.get("attention_bias"):
        attention += q_out + 2 * kv_out + hidden
    elif model_type.startswith("qwen2"):
        attention += q_out + 2 * kv_out  # Qwen2 has q/k/v biases
    experts = number("num_local_experts") or number("num_experts") or 1
    mlp = 3 * hidden * inner * experts
    per_layer = attention + mlp + 2 * hidden
    tied = bool(config.get("tie_word_embeddings", False))
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * per_layer + hidden


def _number_reader(config: Mapping[str, Any]) -> Callable[[str], int]:
    """``number(key)``: the config's whole number at ``key``; 0 when absent or not one."""

    def number(key: str) -> int:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return 0
        return value

    return number


MAX_CONFIG_BYTES = 4 << 20
"""The largest config.json read (the web app counts parameters inside a request)."""


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` if it is a regular file of at most
    :data:`MAX_CONFIG_BYTES`; None otherwise (a FIFO or device is never read from)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
            return None
        content = b""
        while chunk := os.read(fd, MAX_CONFIG_BYTES + 1 - len(content)):
            content += chunk
            if len(content) > MAX_CONFIG_BYTES:
                return None
        data = json.loads(content)
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None

"""Randomly initialised models with the architecture shapes of real checkpoints.

For GPU benchmarks without downloads: ``python -m trainer zoo build --recipe shapes``
(or ``python -m trainer.zoo.shapes`` for ``--fp32`` and ``--layers``) writes, into the
zoo directory, ``shape-qwen2.5-0.5b`` and ``shape-llama-3.2-1b``: every architecture
field of the published ``config.json`` (hidden size, layers, heads, KV heads, MLP width,
tied embeddings, RoPE theta and scaling, context length, norm epsilon), random weights
(seeded, deterministic), and the tokenizer of the zoo policy of the same family. They
compute like the real models per token, but know nothing: they are for throughput and
memory, never for learning curves (no SFT warm-start, so the arithmetic reward is ~0).

Vocabulary: the zoo's own tokenizers have hundreds of tokens, not the real 151,936 /
128,256, so the embedding matrix (tied with the LM head) is far smaller and the
parameter count is below the real model's by ``(real_vocab - vocab) x hidden``; each
manifest records the built count (``n_params``, what MWRA plans with), the real model's
(``real_n_params``) and the difference. Weights are bfloat16 on disk by default.

Nothing here runs as part of the default ``zoo build``: the shapes are only built when
asked for by name (``--recipe shapes``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from trainer.zoo.build import (
    MANIFEST,
    RECIPES,
    Policy,
    _exclusive_lock,
    _readable_if_ours,
    _swap_into_place,
    make_tokenizer,
    make_world_readable,
    read_manifest,
)
from trainer.zoo.catalog import SHAPE_IDS
from trainer.zoo.models import count_parameters

SHAPES_BUILD_VERSION = 1
"""Bump when the shape build changes in a way the recipes do not capture."""
SHAPE_DTYPES = ("bfloat16", "float32")
DEFAULT_DTYPE = "bfloat16"


@dataclass(frozen=True)
class ShapeRecipe:
    """A real checkpoint's architecture, rebuilt with random weights and a zoo tokenizer."""

    id: str
    family: str
    """``"llama"`` or ``"qwen2"``: the ``transformers`` class."""
    tokenizer_of: str
    """The zoo policy (:data:`trainer.zoo.build.RECIPES`) whose tokenizer and chat
    template the shape model uses."""
    architecture: Mapping[str, Any]
    """The published ``config.json``'s architecture fields, verbatim (``rope_theta`` and
    ``rope_scaling`` as published; ``transformers`` 5 stores them as
    ``rope_parameters``)."""
    real_model: str
    """The Hugging Face repository whose ``config.json`` the shape copies."""
    real_vocab_size: int
    real_n_params: int
    """The real checkpoint's parameter count (tied embeddings counted once)."""

    def fingerprint(self, dtype: str, layers: int | None) -> str:
        """A short hash of the recipe and build options: a changed one is rebuilt."""
        data = {**asdict(self), "dtype": dtype, "layers": layers}
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


SHAPE_RECIPES: dict[str, ShapeRecipe] = {
    recipe.id: recipe
    for recipe in (
        # Source: config.json of https://huggingface.co/Qwen/Qwen2.5-0.5B (and -Instruct,
        # which has the same shapes). Published total 0.49B parameters, 0.36B without
        # embeddings: 151936 x 896 embeddings (tied) + 24 x 14,912,384 + 896 = 494,032,768.
        ShapeRecipe(
            id="shape-qwen2.5-0.5b",
            family="qwen2",
            tokenizer_of="tiny-qwen-bpe",
            architecture={
                "hidden_size": 896,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "intermediate_size": 4864,
                "hidden_act": "silu",
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0,
                "tie_word_embeddings": True,
                "use_sliding_window": False,
                "max_window_layers": 24,
                "attention_dropout": 0.0,
                "initializer_range": 0.02,
            },
            real_model="Qwen/Qwen2.5-0.5B",
            real_vocab_size=151936,
            real_n_params=494_032_768,
        ),
        # Source: config.json of https://huggingface.co/meta-llama/Llama-3.2-1B (and
        # -Instruct, same shapes). Published 1.24B parameters: 128256 x 2048 embeddings
        # (tied) + 16 x 60,821,504 + 2048 = 1,235,814,400.
        ShapeRecipe(
            id="shape-llama-3.2-1b",
            family="llama",
            tokenizer_of="tiny-llama-char",
            architecture={
                "hidden_size": 2048,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "intermediate_size": 8192,
                "hidden_act": "silu",
                "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 32.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192,
                },
                "tie_word_embeddings": True,
                "attention_bias": False,
                "mlp_bias": False,
                "attention_dropout": 0.0,
                "initializer_range": 0.02,
            },
            real_model="meta-llama/Llama-3.2-1B",
            real_vocab_size=128256,
            real_n_params=1_235_814_400,
        ),
    )
}
assert tuple(SHAPE_RECIPES) == SHAPE_IDS, "trainer.zoo.SHAPE_IDS names every shape recipe"

_MODEL_CLASSES: dict[str, tuple[type[PretrainedConfig], type[PreTrainedModel]]] = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}


def shape_config(
    zoo_id: str, tokenizer: PreTrainedTokenizerFast, layers: int | None = None
) -> PretrainedConfig:
    """The ``transformers`` config of shape model ``zoo_id`` for ``tokenizer``:
    the real architecture, the zoo tokenizer's vocabulary and special tokens, and
    ``layers`` decoder layers instead of the real number when given (tests)."""
    recipe = SHAPE_RECIPES[zoo_id]
    # A deep copy: transformers writes rope_theta into the rope_scaling dict it is given,
    # which would change the recipe (and its fingerprint) in place.
    architecture = copy.deepcopy(dict(recipe.architecture))
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be >= 1; got {layers}")
        architecture["num_hidden_layers"] = layers
        if "max_window_layers" in architecture:
            architecture["max_window_layers"] = layers
    config_class, model_class = _MODEL_CLASSES[recipe.family]
    return config_class(
        **architecture,
        architectures=[model_class.__name__],
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def make_shape_policy(
    zoo_id: str, seed: int = 0, dtype: str = DEFAULT_DTYPE, layers: int | None = None
) -> Policy:
    """Build shape model ``zoo_id`` in memory: random weights from ``seed``, in ``dtype``.

    The model is materialised once, directly in ``dtype`` (no float32 copy first), with
    the architecture's own initialisation (normal, std ``initializer_range``).
    """
    if dtype not in SHAPE_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {SHAPE_DTYPES}")
    recipe = SHAPE_RECIPES[zoo_id]
    started = time.monotonic()
    tokenizer = make_tokenizer(RECIPES[recipe.tokenizer_of], seed)
    config = shape_config(zoo_id, tokenizer, layers)
    _, model_class = _MODEL_CLASSES[recipe.family]
    torch.manual_seed(seed)
    model = model_class._from_config(config, dtype=getattr(torch, dtype))
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    n_params = count_parameters(model)
    hidden = recipe.architecture["hidden_size"]
    real_layers = recipe.architecture["num_hidden_layers"]
    manifest = {
        "id": recipe.id,
        "family": recipe.family,
        "model_type": model.config.model_type,
        "tokenizer_kind": RECIPES[recipe.tokenizer_of].tokenizer_kind,
        "tokenizer_of": recipe.tokenizer_of,
        "n_params": n_params,
        "vocab_size": len(tokenizer),
        "real_model": recipe.real_model,
        "real_vocab_size": recipe.real_vocab_size,
        "real_n_params": recipe.real_n_params,
        "n_params_below_real": recipe.real_n_params - n_params,
        "parameter_note": (
            f"random weights with the shapes of {recipe.real_model}, but the zoo's "
            f"{len(tokenizer)}-token vocabulary instead of {recipe.real_vocab_size:,}: "
            f"{n_params:,} parameters instead of {recipe.real_n_params:,} "
            f"({recipe.real_vocab_size - len(tokenizer):,} fewer embedding rows x "
            f"{hidden}, tied with the LM head"
            + (
                f"; and {layers} of {real_layers} layers"
                if layers is not None and layers != real_layers
                else ""
            )
            + ")"
        ),
        "dtype": dtype,
        "layers_override": layers,
        "seed": seed,
        "build_version": SHAPES_BUILD_VERSION,
        "recipe": recipe.fingerprint(dtype, layers),
        "chat_template": RECIPES[recipe.tokenizer_of].chat.template,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    return Policy(model, tokenizer, manifest)


def is_current(
    directory: Path,
    zoo_id: str,
    seed: int,
    dtype: str = DEFAULT_DTYPE,
    layers: int | None = None,
) -> bool:
    """Whether ``directory`` holds a complete build of ``zoo_id`` with these options."""
    manifest = read_manifest(directory)
    return (
        manifest is not None
        and manifest.get("seed") == seed
        and manifest.get("build_version") == SHAPES_BUILD_VERSION
        and manifest.get("recipe") == SHAPE_RECIPES[zoo_id].fingerprint(dtype, layers)
        and (directory / "config.json").is_file()
        and (directory / "model.safetensors").is_file()
        and (directory / "tokenizer.json").is_file()
    )


def build_shapes(
    zoo_dir: Path,
    *,
    seed: int = 0,
    ids: Sequence[str] = SHAPE_IDS,
    force: bool = False,
    dtype: str = DEFAULT_DTYPE,
    layers: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Build the missing or stale shape models ``ids`` into ``zoo_dir/<id>``, one at a
    time (each uses every CPU thread); return id -> dir. Atomic like the tiny zoo, under
    the same ``zoo_dir/.build.lock``."""
    zoo_dir = Path(zoo_dir)
    for zoo_id in ids:
        if zoo_id not in SHAPE_RECIPES:
            raise ValueError(f"unknown shape model {zoo_id!r}; use one of {SHAPE_IDS}")
    zoo_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(zoo_dir / ".build.lock"):
        for zoo_id in ids:
            target = zoo_dir / zoo_id
            if not force and is_current(target, zoo_id, seed, dtype, layers):
                _readable_if_ours(target)
                log(f"zoo: {zoo_id} is up to date in {target}")
                continue
            log(f"zoo: building {zoo_id} ({dtype}) into {zoo_dir} (seed {seed})")
            manifest = _build_shape(zoo_id, zoo_dir, seed, dtype, layers)
            log(
                f"zoo: built {zoo_id}: {manifest['n_params']:,} parameters "
                f"(the real {manifest['real_model']} has {manifest['real_n_params']:,}; "
                f"vocabulary {manifest['vocab_size']} instead of "
                f"{manifest['real_vocab_size']:,}), {manifest['size_bytes'] / 1e6:,.0f} MB "
                f"on disk, {manifest['build_seconds']} s"
            )
    return {zoo_id: zoo_dir / zoo_id for zoo_id in ids}


def _build_shape(
    zoo_id: str, zoo_dir: Path, seed: int, dtype: str, layers: int | None
) -> dict[str, Any]:
    policy = make_shape_policy(zoo_id, seed, dtype, layers)
    started = time.monotonic() - policy.manifest["build_seconds"]
    staging = Path(tempfile.mkdtemp(prefix=f".{zoo_id}.", suffix=".partial", dir=zoo_dir))
    try:
        policy.model.save_pretrained(staging)
        policy.tokenizer.save_pretrained(staging)
        del policy.model
        manifest = policy.manifest
        files = [path for path in staging.iterdir() if path.is_file()]
        manifest["size_bytes"] = sum(path.stat().st_size for path in files)
        manifest["build_seconds"] = round(time.monotonic() - started, 1)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        make_world_readable(staging)  # mkdtemp and safetensors make it owner-only
        try:
            _swap_into_place(staging, zoo_dir / zoo_id)
        except OSError:
            if not is_current(zoo_dir / zoo_id, zoo_id, seed, dtype, layers):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.zoo.shapes [--zoo-dir DIR] [--seed S] [--force] [--fp32]
    [--layers N] [ID ...]``: build the shape models (all by default)."""
    from trainer.zoo.catalog import default_zoo_dir

    parser = argparse.ArgumentParser(
        prog="python -m trainer.zoo.shapes",
        description="Build random-init models with the shapes of real checkpoints.",
    )
    parser.add_argument("ids", nargs="*", metavar="ID", help=f"default: all of {SHAPE_IDS}")
    parser.add_argument("--zoo-dir", type=Path, help="default: $MRL_ZOO_DIR or ~/.cache/...")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    parser.add_argument("--fp32", action="store_true", help="float32 weights (default bf16)")
    parser.add_argument(
        "--layers", type=int, help="decoder layers instead of the real number (tests)"
    )
    args = parser.parse_args(argv)
    unknown = [zoo_id for zoo_id in args.ids if zoo_id not in SHAPE_RECIPES]
    if unknown:
        parser.error(f"unknown shape model {unknown[0]!r}; use one of {', '.join(SHAPE_IDS)}")
    if args.layers is not None and args.layers < 1:
        parser.error(f"--layers must be >= 1; got {args.layers}")
    zoo_dir = args.zoo_dir or default_zoo_dir()
    started = time.perf_counter()
    built = build_shapes(
        zoo_dir,
        seed=args.seed,
        ids=tuple(args.ids) or SHAPE_IDS,
        force=args.force,
        dtype="float32" if args.fp32 else DEFAULT_DTYPE,
        layers=args.layers,
    )
    for zoo_id, path in built.items():
        print(f"{zoo_id}: {path}")
    print(f"zoo ready in {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

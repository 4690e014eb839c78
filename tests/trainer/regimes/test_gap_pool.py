"""The systematic-gap pool (issue 30): sliced two-digit addition, validation held out of
every warm-start for every seed, each policy's warm-start competence per slice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainer import metrics as m
from trainer.cli import main as cli_main
from trainer.config import ConfigError, RunConfig, TaskConfig
from trainer.tasks import make_task
from trainer.tasks.addition_slices import (
    SLICES,
    VALIDATION_SHARE,
    AdditionSlicesTask,
    is_validation_expression,
    slice_of,
    training_pairs,
    validation_pairs,
)
from trainer.tasks.split import SPLIT_VERSION, split_key
from trainer.zoo import GAP_IDS, ZOO_RECIPES
from trainer.zoo import build as zoo_build
from trainer.zoo.sft import held_out_expressions, sft_problems

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/gap.json"
STRONG, NO_CARRY, NO_HUNDREDS = GAP_IDS
WRONG_SLICES = {
    STRONG: set(),
    NO_CARRY: {"carry", "carry_overflow"},
    NO_HUNDREDS: {"overflow", "carry_overflow"},
}
"""Where each policy's warm-start demonstrations are wrong by construction."""
SEEDS = range(20)


def expression_of(prompt: str) -> str:
    return prompt.removeprefix("Compute ").removesuffix(".")


COMMUTED = re.compile(r"^(\d+)([+*])(\d+)(.*)$")


def mirror(prompt: str) -> str:
    """The prompt with its first two operands swapped where they commute ("Compute
    47+38." -> "Compute 38+47.", "47*3" -> "3*47", "47+38-9" -> "38+47-9"); the prompt
    itself otherwise (a difference)."""
    match = COMMUTED.match(expression_of(prompt))
    if match is None:
        return prompt
    a, op, b, rest = match.groups()
    return f"Compute {b}{op}{a}{rest}."


def with_mirrors(prompts: set[str]) -> set[str]:
    return prompts | {mirror(prompt) for prompt in prompts}


def test_the_split_keeps_an_expression_and_its_mirror_together() -> None:
    """Issue 45: keyed on the ordered "a+b", 86% of the validation part's sums had their
    mirror "b+a" in the training part. Keyed on the unordered operands, none."""
    assert split_key("47+38") == split_key("38+47") == "+:38,47"
    assert split_key("47*3") == split_key("3*47") == "*:3,47"
    assert split_key("47+38-9") == split_key("38+47-9") == "+-:9,38,47"
    assert split_key("83-38") != split_key("83+38")
    for a in range(100):
        for b in range(a):
            assert is_validation_expression(f"{a}+{b}") == is_validation_expression(f"{b}+{a}")
    assert mirror("Compute 47+38.") == "Compute 38+47." and mirror("Compute 8-3.") == "Compute 8-3."


def test_a_warm_start_built_with_another_split_is_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipes that hold the split out hash its version: a zoo built with the ordered
    split (version 1) is not current under this one, the normal zoo's hash is unchanged."""
    held_out = [*GAP_IDS, "tiny-llama-char-add", "tiny-qwen-bpe-sub", "tiny-gpt2-unigram-mul"]
    normal = ("tiny-llama-char", "tiny-qwen-bpe", "tiny-gpt2-unigram")
    now = {zoo_id: zoo_build.RECIPES[zoo_id].fingerprint() for zoo_id in (*held_out, *normal)}
    monkeypatch.setattr(zoo_build, "SPLIT_VERSION", SPLIT_VERSION - 1)
    for zoo_id in held_out:
        assert zoo_build.RECIPES[zoo_id].fingerprint() != now[zoo_id], zoo_id
    for zoo_id in normal:
        assert zoo_build.RECIPES[zoo_id].fingerprint() == now[zoo_id], zoo_id


def test_slices_by_hand() -> None:
    assert slice_of(23, 41) == "no_carry"
    assert slice_of(47, 38) == "carry"  # 7 + 8 carries, 85 < 100
    assert slice_of(63, 52) == "overflow"  # 3 + 2 does not carry, 115
    assert slice_of(67, 58) == "carry_overflow"
    assert slice_of(45, 55) == "carry_overflow"  # 5 + 5 carries into exactly 100
    assert slice_of(50, 50) == "overflow"


def test_the_validation_part_is_about_one_in_eight_of_each_slice() -> None:
    for name in SLICES:
        held, trained = validation_pairs(name), training_pairs(name)
        share = len(held) / (len(held) + len(trained))
        assert abs(share - 1 / VALIDATION_SHARE) < 0.04, (name, share)
        assert all(slice_of(a, b) == name for a, b in held + trained)
    assert min(len(validation_pairs(name)) for name in SLICES) >= 150


def test_each_seeds_validation_is_balanced_held_out_and_its_own() -> None:
    sets = []
    for seed in SEEDS:
        task = AdditionSlicesTask(seed=seed, val_size=400)
        validation = task.validation()
        assert [sum(p.skill == name for p in validation) for name in SLICES] == [100] * 4
        assert len({p.prompt for p in validation}) == 400
        assert all(is_validation_expression(expression_of(p.prompt)) for p in validation)
        assert all(p.answer == str(eval(expression_of(p.prompt))) for p in validation)
        train = [p for step in range(20) for p in task.train_batch(step, 16)]
        assert not {p.prompt for p in train} & with_mirrors({p.prompt for p in validation})
        assert not any(is_validation_expression(expression_of(p.prompt)) for p in train)
        assert task.train_batch(3, 16) == task.train_batch(3, 16)
        sets.append(frozenset(p.prompt for p in validation))
    assert len(set(sets)) == len(sets)  # each seed draws its own validation set


def test_no_warm_start_trains_on_any_seeds_validation_prompt() -> None:
    every_validation = {
        p.prompt for seed in SEEDS for p in AdditionSlicesTask(seed=seed).validation()
    }
    for zoo_id in GAP_IDS:
        recipe = zoo_build.RECIPES[zoo_id]
        for build_seed in range(3):
            held_out = held_out_expressions(build_seed, recipe.sft.held_out_levels)
            prompts = {p.prompt for p in sft_problems(recipe.sft, build_seed, held_out)}
            assert not prompts & every_validation, (zoo_id, build_seed)
            # Nor its mirror: "38+47" is trained on nowhere when "47+38" is validated.
            assert not prompts & with_mirrors(every_validation), (zoo_id, build_seed)
            assert not any(is_validation_expression(expression_of(p)) for p in prompts)


@pytest.mark.parametrize("zoo_id", GAP_IDS)
def test_each_warm_start_is_wrong_exactly_on_its_gap(zoo_id: str) -> None:
    recipe = zoo_build.RECIPES[zoo_id]
    problems = sft_problems(recipe.sft, 0, held_out_expressions(0, recipe.sft.held_out_levels))
    wrong: dict[str, int] = {}
    for problem in problems:
        a, b = (int(part) for part in expression_of(problem.prompt).split("+"))
        assert 10 <= a <= 99 and 10 <= b <= 99
        if int(problem.answer) != a + b:
            wrong[slice_of(a, b)] = wrong.get(slice_of(a, b), 0) + 1
            expected = a + b - 10 if zoo_id == NO_CARRY else (a + b) % 100
            assert int(problem.answer) == expected, problem
    assert set(wrong) == WRONG_SLICES[zoo_id]
    for name in WRONG_SLICES[zoo_id]:  # always wrong there, not sometimes
        total = sum(
            slice_of(*(int(x) for x in expression_of(p.prompt).split("+"))) == name
            for p in problems
        )
        assert wrong[name] == total


def test_the_recipe_and_the_older_recipes_hash_apart() -> None:
    assert ZOO_RECIPES["gap"] == GAP_IDS
    assert len({zoo_build.RECIPES[i].fingerprint() for i in GAP_IDS}) == 3
    # The new SFT fields count in a recipe's hash only where set: older builds stay current.
    assert "slip" not in json.dumps(zoo_build.RECIPES["tiny-llama-char"].fingerprint())
    for zoo_id in ("tiny-llama-char", "tiny-qwen-bpe", "tiny-gpt2-unigram"):
        recipe = zoo_build.RECIPES[zoo_id]  # the normal zoo: its builds stay current
        assert recipe.sft.slip == "carry" and not recipe.sft.hold_out_split
        assert recipe.validation_task == "arithmetic"
    assert zoo_build.RECIPES["tiny-qwen-bpe-sub"].sft.hold_out_split


def test_the_task_config_and_example() -> None:
    config = RunConfig.from_file(EXAMPLE)
    assert config.task.kind == "addition_slices"
    assert [p.model for p in config.pool] == [f"zoo:{i}" for i in GAP_IDS]
    assert cli_main(["validate", "--config", str(EXAMPLE)]) == 0
    task = make_task(config.task, seed=3)
    assert isinstance(task, AdditionSlicesTask) and len(task.validation()) == 400
    with pytest.raises(ConfigError, match="holds out at most 600 validation problems"):
        RunConfig.from_dict(
            {
                **json.loads(EXAMPLE.read_text()),
                "task": {"kind": "addition_slices", "val_size": 700},
            }
        )
    assert TaskConfig(kind="addition_slices").val_size == 64


def test_the_per_slice_validation_keys_are_catalogued() -> None:
    info = m.describe("val/reward@1/carry_overflow")
    assert (info.label, info.group) == ("Validation reward@1 · carry_overflow", m.REWARDS)


@pytest.fixture(scope="module")
def gap_zoo(zoo_dir: Path) -> Path:
    """The gap pool built beside the normal zoo (cached like it)."""
    from trainer.zoo import build_zoo

    build_zoo(zoo_dir, seed=0, ids=GAP_IDS)
    return zoo_dir


@pytest.mark.parametrize("zoo_id", GAP_IDS)
def test_each_policy_is_competent_except_on_its_gap(gap_zoo: Path, zoo_id: str) -> None:
    manifest = json.loads((gap_zoo / zoo_id / "zoo.json").read_text())
    by_slice = manifest["sft_val_accuracy_by_skill"]
    assert set(by_slice) == set(SLICES)
    for name, accuracy in by_slice.items():
        if name in WRONG_SLICES[zoo_id]:
            assert accuracy <= 0.1, (name, by_slice)  # every sample of a group fails there
        else:
            assert accuracy >= 0.5, (name, by_slice)


def test_the_complementary_pool_holds_out_every_seeds_validation_too() -> None:
    """Issue 30: the complementary warm-starts held out build seed 0's validation only, so
    seeds 1-4 were validated partly on trained prompts. Its task now uses the hash split."""
    config = RunConfig.from_file(REPO / "examples/complementary.json")
    assert config.task.split == "hash"
    every_validation = {
        p.prompt
        for seed in SEEDS
        for p in make_task(config.task, seed=seed).validation()  # type: ignore[attr-defined]
    }
    for zoo_id in ("tiny-llama-char-add", "tiny-qwen-bpe-sub", "tiny-gpt2-unigram-mul"):
        recipe = zoo_build.RECIPES[zoo_id]
        held_out = held_out_expressions(0, recipe.sft.held_out_levels)
        prompts = {p.prompt for p in sft_problems(recipe.sft, 0, held_out)}
        assert not prompts & with_mirrors(every_validation), zoo_id
    assert any(mirror(p) != p for p in every_validation)  # sums and products to mirror
    task = make_task(config.task, seed=2)
    train = {p.prompt for step in range(50) for p in task.train_batch(step, 16)}
    assert not train & with_mirrors(every_validation)

"""The complementary-skills pool (issue 18): one skill per zoo policy, per-skill validation,
its example config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import metrics as m
from trainer.cli import main as cli_main
from trainer.config import RunConfig
from trainer.spool import decode_value, read_points
from trainer.tasks.arithmetic import ArithmeticTask, make_expression
from trainer.zoo import COMPLEMENTARY_IDS
from trainer.zoo import build as zoo_build

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/complementary.json"
OWN_SKILL = {
    "tiny-llama-char-add": "addition",
    "tiny-qwen-bpe-sub": "subtraction",
    "tiny-gpt2-unigram-mul": "multiplication",
}


def test_multiplication_level_and_skills() -> None:
    import random

    expression, value = make_expression(random.Random(0), 6)
    left, right = expression.split("*")
    assert 10 <= int(left) <= 99 and 2 <= int(right) <= 9 and value == int(left) * int(right)
    validation = ArithmeticTask(seed=0, levels=(3, 4, 6), val_size=60).validation()
    counts = {skill: sum(p.skill == skill for p in validation) for skill in OWN_SKILL.values()}
    assert counts == {"addition": 20, "subtraction": 20, "multiplication": 20}


def test_the_normal_recipes_hash_as_before_the_new_fields() -> None:
    # The complementary recipes' fields are left out of a recipe's hash at their defaults,
    # so the normal zoo built before them is still current (no rebuild, same weights).
    for zoo_id in ("tiny-llama-char", "tiny-qwen-bpe", "tiny-gpt2-unigram"):
        recipe = zoo_build.RECIPES[zoo_id]
        assert recipe.validation_levels == zoo_build.VALIDATION_LEVELS
        assert recipe.sft.held_out_levels == ((1, 2, 3), (1, 2, 3, 4, 5))
    assert len({zoo_build.RECIPES[i].fingerprint() for i in COMPLEMENTARY_IDS}) == 3


@pytest.mark.parametrize("zoo_id", COMPLEMENTARY_IDS)
def test_each_policy_solves_its_own_skill_and_not_the_others(
    complementary_zoo: Path, zoo_id: str
) -> None:
    manifest = json.loads((complementary_zoo / zoo_id / "zoo.json").read_text())
    by_skill = manifest["sft_val_accuracy_by_skill"]
    assert set(by_skill) == set(OWN_SKILL.values())
    own = OWN_SKILL[zoo_id]
    assert by_skill[own] >= zoo_build.RECIPES[zoo_id].accuracy_floor, by_skill
    for skill, accuracy in by_skill.items():
        if skill != own:
            assert accuracy <= 0.1, (skill, by_skill)


def test_the_example_validates() -> None:
    config = RunConfig.from_file(EXAMPLE)
    assert config.regime == "sgt"
    assert [p.model for p in config.pool] == [f"zoo:{i}" for i in COMPLEMENTARY_IDS]
    assert cli_main(["validate", "--config", str(EXAMPLE)]) == 0


def test_the_per_skill_validation_family_is_catalogued() -> None:
    info = m.describe("val/reward@1/multiplication")
    assert (info.label, info.unit, info.group) == (
        "Validation reward@1 · multiplication",
        "",
        m.REWARDS,
    )


def test_a_tiny_run_logs_validation_per_skill(complementary_zoo: Path, tmp_path: Path) -> None:
    data = json.loads(EXAMPLE.read_text())
    data |= {"steps": 1, "prompts_per_step": 2, "val_every": 1, "checkpoint_every": 1}
    data["task"] = {**data["task"], "val_size": 6}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", config, "--run-dir", run_dir],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(complementary_zoo)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    values = {
        (p["policy"], p["key"], p["step"]): decode_value(p["value"]) for p in read_points(run_dir)
    }
    for policy in ("llama-char-add", "qwen-bpe-sub", "gpt2-unigram-mul"):
        for step in (0, 1):
            per_skill = [
                values[(policy, f"{m.VAL_REWARD_AT_1}/{s}", step)] for s in OWN_SKILL.values()
            ]
            overall = values[(policy, m.VAL_REWARD_AT_1, step)]
            assert overall == pytest.approx(sum(per_skill) / 3)  # two problems per skill
    assert all(key[1] != f"{m.VAL_REWARD_AT_1}/mixed" for key in values)

"""The run config's JSON form and its fix-it validation messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainer.config import ConfigError, GRPOConfig, PolicyConfig, RunConfig


def _config(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "pool": [
            {"name": "llama", "model": "zoo:tiny-llama-char"},
            {"name": "qwen", "model": "zoo:tiny-qwen-bpe"},
        ]
    }
    data.update(overrides)
    return data


def _errors(data: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    return caught.value.errors


def test_defaults_are_the_spec_defaults() -> None:
    config = RunConfig.from_dict(_config())
    assert (config.grpo.clip_eps, config.grpo.kl_coef, config.grpo.entropy_coef) == (
        0.2,
        0.001,
        0.0,
    )
    assert config.grpo.adv_eps == 1e-6
    assert config.grpo.loss_agg == "token-mean"
    assert config.regime == "standalone"


def test_the_json_form_round_trips() -> None:
    config = RunConfig.from_dict(_config(steps=7, grpo={"loss_agg": "seq-mean-token-mean"}))
    again = RunConfig.from_json(config.to_json())
    assert again == config
    assert isinstance(again.pool[0], PolicyConfig)
    assert isinstance(again.grpo, GRPOConfig)
    assert json.loads(config.to_json())["grpo"]["loss_agg"] == "seq-mean-token-mean"


def test_it_says_how_to_fix_an_indivisible_micro_batch() -> None:
    data = _config(prompts_per_step=6)
    data["pool"][0] |= {"group_size": 4, "micro_batch_size": 16}
    errors = _errors(data)
    assert errors == {
        "pool[0].micro_batch_size": "prompts_per_step x G / mini_batches = 24 must be divisible "
        "by micro_batch_size (16); e.g. use 12"
    }


def test_a_micro_batch_as_large_as_the_mini_batch_is_fine() -> None:
    data = _config(prompts_per_step=6)
    data["pool"][0] |= {"group_size": 4, "micro_batch_size": 64}
    assert RunConfig.from_dict(data).pool[0].micro_batch_size == 64


def test_it_reports_every_problem_at_once_by_field_path() -> None:
    data = _config(steps=0, grpo={"clip_eps": 1.5})
    data["pool"][1] |= {"name": "llama", "group_size": 1, "lr": -1}
    errors = _errors(data)
    assert set(errors) == {
        "steps",
        "grpo.clip_eps",
        "pool[1].name",
        "pool[1].group_size",
        "pool[1].lr",
    }
    assert "duplicate policy name 'llama' (also pool[0])" in errors["pool[1].name"]
    assert "G must be at least 2" in errors["pool[1].group_size"]


def test_it_rejects_unknown_fields_and_wrong_types() -> None:
    data = _config(stpes=3, seed="one")
    data["pool"][0]["temperatur"] = 1.0
    errors = _errors(data)
    assert errors["stpes"].startswith("unknown field 'stpes' in config; known fields: pool, name")
    assert errors["pool[0].temperatur"].startswith("unknown field 'temperatur' in pool[0]")
    assert errors["seed"] == "must be an integer, got a string"


def test_it_rejects_booleans_where_numbers_belong_and_non_finite_numbers() -> None:
    data = _config(steps=True)
    data["pool"][0]["lr"] = float("nan")
    errors = _errors(data)
    assert errors["steps"] == "must be an integer, got a boolean"
    assert errors["pool[0].lr"] == "must be a finite number"


@pytest.mark.parametrize("size", [0, 9])
def test_a_pool_has_one_to_eight_policies(size: int) -> None:
    pool = [{"name": f"p{i}", "model": "zoo:tiny-llama-char"} for i in range(size)]
    assert "pool" in _errors({"pool": pool})


def test_names_are_restricted_to_a_safe_pattern() -> None:
    data = _config(name="$(rm -rf ~)")
    assert "is not a valid name" in _errors(data)["name"]


def test_file_tasks_need_their_paths() -> None:
    errors = _errors(_config(task={"kind": "math_file"}))
    assert set(errors) == {"task.train_path", "task.val_path"}


def test_malformed_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        RunConfig.from_json("{")


def test_missing_pool_is_reported() -> None:
    assert _errors({}) == {"pool": "missing required field 'pool'"}

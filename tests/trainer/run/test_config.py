"""The run config's JSON form and its fix-it validation messages."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from dataclasses import fields
from typing import Any

import pytest

from trainer.config import (
    MAX_MICRO_BATCH,
    Bounds,
    ConfigError,
    GRPOConfig,
    PolicyConfig,
    RemixConfig,
    RunConfig,
    TaskConfig,
    bound_problem,
)
from trainer.declarations import section_names
from trainer.regimes.prp import PRPConfig
from trainer.regimes.sgt import SGTConfig


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


def test_the_objective_follows_off_policy_unless_the_config_names_it() -> None:
    """``grpo.objective`` null (every config stored before the field existed) means what
    such a config meant: ``remix`` under ReMix, else ``grpo``; it stays null in the JSON
    form, so a stored config reads and writes back the same."""
    plain, remix = RunConfig.from_dict(_config()), RunConfig.from_dict(_config(off_policy="remix"))
    assert (plain.grpo.objective, plain.objective) == (None, "grpo")
    assert (remix.grpo.objective, remix.objective) == (None, "remix")
    for config in (plain, remix):
        data = json.loads(config.to_json())
        assert data["grpo"]["objective"] is None
        assert RunConfig.from_dict(data) == config
        stored = json.loads(config.to_json())
        del stored["grpo"]["objective"]  # a config stored before the field existed
        assert RunConfig.from_dict(stored).objective == config.objective
    named = RunConfig.from_dict(_config(off_policy="remix", grpo={"objective": "remix"}))
    assert named.objective == "remix"
    assert RunConfig.from_json(named.to_json()) == named
    assert json.loads(named.to_json())["grpo"]["objective"] == "remix"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _config(grpo={"objective": "ppo"}),
            "unknown objective 'ppo'; use one of ('grpo', 'remix'), or null for the one of "
            "off_policy",
        ),
        (
            _config(grpo={"objective": "remix"}),
            "off_policy 'none' trains with objective 'grpo', not 'remix'; set grpo.objective "
            "to 'grpo' or null, or off_policy to 'remix'",
        ),
        (
            _config(off_policy="remix", grpo={"objective": "grpo"}),
            "off_policy 'remix' trains with objective 'remix', not 'grpo'; set grpo.objective "
            "to 'remix' or null, or off_policy to 'none'",
        ),
    ],
    ids=["unknown", "remix-without-replay", "grpo-with-replay"],
)
def test_an_objective_off_policy_cannot_train_says_how_to_fix_it(
    data: dict[str, Any], message: str
) -> None:
    assert _errors(data) == {"grpo.objective": message}
    # Built directly, the same message; and a change made afterwards is checked again.
    config = RunConfig.from_dict(_config(off_policy=data.get("off_policy", "none")))
    config.grpo.objective = data["grpo"]["objective"]
    with pytest.raises(ConfigError) as caught:
        config.validate()
    assert caught.value.errors == {"grpo.objective": message}


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


def test_unknown_fields_and_wrong_types_come_with_every_range_and_rule_problem() -> None:
    """One round: the rules are checked over what is readable (a wrong or missing value
    at its default, nothing said under its path), not only once the types are right."""
    data = _config(stpes=3, steps=-3, prompts_per_step="many", grpo={"clip_eps": 1.5, "x": 1})
    data["pool"][0] |= {"lr": "fast", "temperature": 0}
    data["pool"][1] = {"name": "llama", "group_size": 1}  # no model, a duplicate name
    assert _errors(data) == {
        "stpes": "unknown field 'stpes' in config; known fields: pool, name, regime, "
        "off_policy, remix, prp, xgrpo, sgt, sequential_sft, success_threshold, grpo, task, "
        "steps, prompts_per_step, val_every, checkpoint_every, checkpoint_keep_last, "
        "checkpoint_optimizer_state, seed",
        "grpo.x": "unknown field 'x' in grpo; known fields: advantage_estimator, adv_eps, "
        "clip_eps, kl_coef, kl_estimator, kl_clamp, entropy_coef, loss_agg, max_grad_norm, "
        "mini_batches, epochs, weight_decay, objective",
        "prompts_per_step": "must be an integer, got a string",
        "pool[0].lr": "must be a number, got a string",
        "pool[1].model": "missing required field 'model'",
        "pool[0].temperature": "temperature must be > 0 (validation decodes greedily); got 0.0",
        "pool[1].group_size": "G must be at least 2 for a group baseline; got 1",
        "grpo.clip_eps": "clip_eps must be in (0, 1); got 1.5",
        "steps": "steps must be >= 1; got -3",
        "pool[1].name": "duplicate policy name 'llama' (also pool[0]); give each policy its "
        "own name",
    }
    built = _built_errors(
        lambda: RunConfig(
            pool=[PolicyConfig("llama", "m", lr="fast"), {"name": "q"}],  # type: ignore[arg-type,list-item]
            steps=-3,
            regime="sgt",
        )
    )
    assert built == {
        "pool[0].lr": "must be a number, got a string",
        "pool[1]": "must be a PolicyConfig, got a dict",
        "steps": "steps must be >= 1; got -3",
    }


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


# --- declared ranges (metadata "min" / "max" ...) -------------------------------------------
def test_the_declared_ranges_give_fix_it_messages() -> None:
    data = _config(steps=0, success_threshold=0.0, remix={"replay_fraction": 2.0})
    data["pool"][0] |= {"group_size": 1, "temperature": 0.0, "micro_batch_size": 10**6}
    data["regime"] = "sgt"
    data["sgt"] = {"lambda_sgt": -1.0}
    data["grpo"] = {"clip_eps": 1.0}
    assert _errors(data) == {
        "steps": "steps must be >= 1; got 0",
        "success_threshold": "success_threshold must be in (0, 1] (rewards are in [0, 1]); got 0.0",
        "remix.replay_fraction": "replay_fraction (p) must be in [0, 1); got 2.0",
        "pool[0].group_size": "G must be at least 2 for a group baseline; got 1",
        "pool[0].temperature": "temperature must be > 0 (validation decodes greedily); got 0.0",
        "pool[0].micro_batch_size": f"micro_batch_size must be in [1, {MAX_MICRO_BATCH}]; "
        "got 1000000",
        "sgt.lambda_sgt": "lambda_sgt must be >= 0; got -1.0",
        "grpo.clip_eps": "clip_eps must be in (0, 1); got 1.0",
    }


def test_lambda_sgt_has_no_upper_bound() -> None:
    config = RunConfig.from_dict(_config(regime="sgt", sgt={"lambda_sgt": 5.0}))
    assert config.section("sgt") == SGTConfig(lambda_sgt=5.0)


def test_bounds_read_and_say_the_metadata_vocabulary() -> None:
    fraction = RemixConfig.__dataclass_fields__["replay_fraction"]
    bounds = Bounds.of(fraction.metadata)
    assert bounds == Bounds(min=0, max=1, max_open=True)
    assert bounds.text() == "in [0, 1)"
    assert [bounds.contains(v) for v in (0.0, 0.999, 1.0, -0.1, math.nan)] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert Bounds(min=0, min_open=True).text() == "> 0"
    assert Bounds(max=0.5).text() == "<= 0.5"
    assert Bounds.of(GRPOConfig.__dataclass_fields__["loss_agg"].metadata) is None
    assert (
        bound_problem("k", {"min": 1, "why": "(a count)"}, 0) == "k must be >= 1 (a count); got 0"
    )
    assert bound_problem("k", {"min": 1}, 1) is None
    assert bound_problem("k", {"min": 1}, "x") is None  # a type problem, not a range's


def test_every_number_field_of_every_section_declares_a_range_or_none_on_purpose() -> None:
    """Each number field's range lives on the field (one rule set for the trainer and the
    form); these are the ones with none: any value of their type is fine."""
    unbounded = []
    for cls in (RunConfig, PolicyConfig, GRPOConfig, RemixConfig, PRPConfig, SGTConfig):
        for spec in fields(cls):
            hint = typing.get_type_hints(cls)[spec.name]
            if hint in (int, float, int | None, float | None) and Bounds.of(spec.metadata) is None:
                unbounded.append(f"{cls.__name__}.{spec.name}")
    assert unbounded == []


# --- a config built in Python is validated as one read from JSON ----------------------------
def _pool(**second: Any) -> list[PolicyConfig]:
    return [
        PolicyConfig(name="llama", model="zoo:tiny-llama-char"),
        PolicyConfig(**({"name": "qwen", "model": "zoo:tiny-qwen-bpe"} | second)),
    ]


def _built_errors(build: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        build()
    return caught.value.errors


@pytest.mark.parametrize(
    ("data", "build"),
    [
        (_config(steps=0), lambda: RunConfig(pool=_pool(), steps=0)),
        (
            {"pool": [{"name": "a", "model": "zoo:tiny-llama-char"}], "steps": 0},
            lambda: RunConfig(pool=[PolicyConfig(name="a", model="zoo:tiny-llama-char")], steps=0),
        ),
        (
            _config(pool=[{"name": "llama", "model": "m"}, {"name": "q", "model": "m", "lr": "x"}]),
            lambda: RunConfig(
                pool=[PolicyConfig(name="llama", model="m"), PolicyConfig("q", "m", lr="x")]  # type: ignore[arg-type]
            ),
        ),
        (_config(seed="one", steps=True), lambda: RunConfig(pool=_pool(), seed="one", steps=True)),  # type: ignore[arg-type]
        (
            _config(grpo={"clip_eps": 1.5}, regime="sgt", sgt={"lambda_sgt": -1.0}),
            lambda: RunConfig(
                pool=_pool(),
                grpo=GRPOConfig(clip_eps=1.5),
                regime="sgt",
                sections={"sgt": SGTConfig(lambda_sgt=-1)},
            ),
        ),
        (
            _config(remix={"replay_fraction": 2.0, "reflection_markers": []}, off_policy="remix"),
            lambda: RunConfig(
                pool=_pool(),
                remix=RemixConfig(replay_fraction=2, reflection_markers=[]),
                off_policy="remix",
            ),
        ),
        (
            _config(regime="gossip", task={"levels": [1, "two"]}),
            lambda: RunConfig(pool=_pool(), regime="gossip", task=TaskConfig(levels=[1, "two"])),  # type: ignore[list-item]
        ),
        (
            _config(task={"kind": "math_file"}),
            lambda: RunConfig(pool=_pool(), task=TaskConfig(kind="math_file")),
        ),
        (
            _config(regime="prp", prp={"k_peer": 0, "c_bar": float("inf")}),
            lambda: RunConfig(
                pool=_pool(), regime="prp", sections={"prp": PRPConfig(k_peer=0, c_bar=math.inf)}
            ),
        ),
    ],
    ids=["steps", "one-policy", "lr-type", "types", "ranges", "remix", "regime", "task", "prp"],
)
def test_a_config_built_directly_fails_as_the_same_config_from_json(
    data: dict[str, Any], build: Any
) -> None:
    from_json = _errors(data)
    assert from_json
    assert _built_errors(build) == from_json


def test_the_pool_entries_are_checked_one_by_one_when_built_directly() -> None:
    errors = _built_errors(lambda: RunConfig(pool=_pool(group_size=1, name="llama", lr=-1)))
    assert errors == {
        "pool[1].group_size": "G must be at least 2 for a group baseline; got 1",
        "pool[1].lr": "lr must be > 0; got -1.0",
        "pool[1].name": "duplicate policy name 'llama' (also pool[0]); give each policy its own "
        "name",
    }
    pool = [{"name": "llama", "model": "m"}]
    errors = _built_errors(lambda: RunConfig(pool=pool))  # type: ignore[arg-type]
    assert errors == {"pool[0]": "must be a PolicyConfig, got a dict"}
    assert _built_errors(lambda: RunConfig(pool=_pool(), grpo=[1, 2])) == {  # type: ignore[arg-type]
        "grpo": "grpo must be a JSON object, got a list"
    }
    assert _errors(_config(grpo=[1, 2])) == {"grpo": "grpo must be a JSON object, got a list"}


def test_a_valid_config_built_directly_equals_the_one_from_json() -> None:
    built = RunConfig(
        pool=_pool(lr=2e-4), steps=7, regime="sgt", sections={"sgt": SGTConfig(k_sgt=2)}
    )
    assert built == RunConfig.from_dict(
        _config(steps=7, regime="sgt", sgt={"k_sgt": 2})
        | {
            "pool": [
                {"name": "llama", "model": "zoo:tiny-llama-char"},
                {"name": "qwen", "model": "zoo:tiny-qwen-bpe", "lr": 2e-4},
            ]
        }
    )
    assert set(built.sections) == {"sgt"}  # a regime owns its section: no other is kept
    # Built directly with another regime's section: not kept either, as from JSON.
    other = RunConfig(pool=_pool(), sections={"sgt": SGTConfig(k_sgt=2)})
    assert other.sections == {} and other == RunConfig.from_dict(_config(sgt={"k_sgt": 2}))
    assert other.section("sgt") == SGTConfig() and other.sections == {}  # defaults, not kept


def test_replace_and_validate_check_a_changed_config_again() -> None:
    config = RunConfig.from_dict(_config())
    assert dataclasses.replace(config, steps=3).steps == 3
    with pytest.raises(ConfigError, match="steps must be >= 1"):
        dataclasses.replace(config, steps=0)
    config.grpo.mini_batches = 0  # a field changed in place is checked on request
    with pytest.raises(ConfigError) as caught:
        config.validate()
    assert caught.value.errors == {"grpo.mini_batches": "mini_batches must be >= 1; got 0"}


# --- a regime owns its section (issue 32) ---------------------------------------------------
def test_a_config_stores_only_its_own_regimes_section() -> None:
    """A standalone config names no other regime; an SGT config carries the SGT section
    only; a config stored before (every regime's section) reads, keeping its own."""
    standalone = RunConfig.from_dict(_config()).to_dict()
    assert not set(standalone) & set(section_names())
    sgt = RunConfig.from_dict(_config(regime="sgt", sgt={"lambda_sgt": 0.3})).to_dict()
    assert sgt["sgt"] == {"lambda_sgt": 0.3, "k_sgt": 1}
    assert not (set(sgt) & set(section_names())) - {"sgt"}
    stored = _config(regime="sgt", sgt={"lambda_sgt": 0.3})
    stored |= {name: {} for name in section_names() if name != "sgt"}
    assert RunConfig.from_dict(stored).to_dict() == sgt
    # Another regime's section is not this config's business, even when it is wrong.
    assert RunConfig.from_dict(_config(sgt={"lambda_sgt": -1.0})).to_dict() == standalone

"""The rollout KV cache in the run config (issue 21): ``PolicyConfig.rollout_cache`` and
``rollout_compile``, their fix-it messages, the CUDA-only rule where the device is known,
and a tiny zoo policy generating with the static cache on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.config import ROLLOUT_CACHES, ConfigError, GRPOConfig, PolicyConfig, RunConfig
from trainer.policy import Policy, RolloutSetupError, _check_rollout_device
from trainer.rollout.engine import CACHE_KINDS
from trainer.tasks import Problem, get_reward

ZOO_ID = "tiny-qwen-bpe"
PROBLEMS = [
    Problem(id="p0", prompt="12+3=", answer="15"),
    Problem(id="p1", prompt="4+5=", answer="9"),
]


def _pool(**policy: Any) -> dict[str, Any]:
    return {"pool": [{"name": "a", "model": f"zoo:{ZOO_ID}"} | policy]}


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    return caught.value.errors


def _policy(model_dir: Path, **config: Any) -> Policy:
    return Policy(
        PolicyConfig(name="a", model=str(model_dir), group_size=2, max_new_tokens=6, **config),
        GRPOConfig(),
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
    )


# --- the config -------------------------------------------------------------------------
def test_the_rollout_fields_default_to_the_dynamic_uncompiled_cache() -> None:
    policy = RunConfig.from_dict(_pool()).pool[0]
    assert (policy.rollout_cache, policy.rollout_compile) == ("dynamic", False)
    config = RunConfig.from_dict(_pool(rollout_cache="static", rollout_compile=True))
    assert RunConfig.from_dict(config.to_dict()) == config
    saved = config.to_dict()["pool"][0]
    assert (saved["rollout_cache"], saved["rollout_compile"]) == ("static", True)
    assert (config.pool[0].rollout_cache, config.pool[0].rollout_compile) == ("static", True)


def test_the_config_and_the_engine_name_the_same_caches() -> None:
    assert ROLLOUT_CACHES == CACHE_KINDS == ("dynamic", "static")


@pytest.mark.parametrize(
    ("policy", "path", "message"),
    [
        (
            {"rollout_cache": "paged"},
            "pool[0].rollout_cache",
            "unknown rollout_cache 'paged'; use one of ('dynamic', 'static')",
        ),
        (
            {"rollout_compile": True},
            "pool[0].rollout_compile",
            "rollout_compile compiles the static-cache forward: set rollout_cache to "
            "'static', or turn rollout_compile off",
        ),
        (
            {"rollout_cache": "dynamic", "rollout_compile": True},
            "pool[0].rollout_compile",
            "rollout_compile compiles the static-cache forward: set rollout_cache to "
            "'static', or turn rollout_compile off",
        ),
        ({"rollout_cache": 1}, "pool[0].rollout_cache", "must be a string, got the number 1"),
        (
            {"rollout_compile": "yes"},
            "pool[0].rollout_compile",
            "must be true or false, got a string",
        ),
    ],
)
def test_bad_rollout_settings_get_fix_it_messages(
    policy: dict[str, Any], path: str, message: str
) -> None:
    assert _errors(_pool(**policy)) == {path: message}


def test_a_config_built_directly_checks_the_rollout_rules_too() -> None:
    with pytest.raises(ConfigError) as caught:
        RunConfig(pool=[PolicyConfig(name="a", model="zoo:x", rollout_cache="Static")])
    assert caught.value.errors == {
        "pool[0].rollout_cache": "unknown rollout_cache 'Static'; use one of ('dynamic', 'static')"
    }


# --- where the device is known -------------------------------------------------------------
def test_compile_is_refused_on_a_cpu_device_before_anything_loads(tmp_path: Path) -> None:
    # Valid in the config (a GPU run may use it); the CPU policy refuses it at setup,
    # before it reads the model (this directory holds none).
    config = RunConfig.from_dict(_pool(rollout_cache="static", rollout_compile=True))
    assert config.pool[0].rollout_compile
    with pytest.raises(RolloutSetupError, match=r"on CUDA only, and this policy runs on cpu"):
        _policy(tmp_path / "no-model", rollout_cache="static", rollout_compile=True)


def test_compile_passes_the_device_check_on_cuda() -> None:
    compiled = PolicyConfig(name="a", model="zoo:x", rollout_cache="static", rollout_compile=True)
    _check_rollout_device(compiled, torch.device("cuda:0"))  # no error
    _check_rollout_device(PolicyConfig(name="a", model="zoo:x"), torch.device("cpu"))
    with pytest.raises(RolloutSetupError, match="set rollout_compile to false"):
        _check_rollout_device(compiled, torch.device("cpu"))


# --- a zoo policy with the static cache -----------------------------------------------------
def test_a_zoo_policy_with_the_static_cache_generates_on_the_cpu(zoo_dir: Path) -> None:
    static = _policy(zoo_dir / ZOO_ID, rollout_cache="static")
    dynamic = _policy(zoo_dir / ZOO_ID)
    assert (static.engine.cache, static.engine.compile) == ("static", False)
    assert dynamic.engine.cache == "dynamic"

    torch.manual_seed(0)
    rollouts = static.rollout(PROBLEMS)
    assert len(rollouts.batch) == len(PROBLEMS) * 2
    assert all(1 <= len(ids) <= 6 for ids in rollouts.batch.response_ids)
    assert rollouts.rewards.shape == (len(PROBLEMS) * 2,)

    texts = static.prompt_texts(PROBLEMS)
    greedy = {"n": 1, "max_new_tokens": 6, "temperature": 1.0, "greedy": True}
    a = static.engine.generate(texts, **greedy)
    b = dynamic.engine.generate(texts, **greedy)
    assert a.response_ids == b.response_ids and a.prompt_ids == b.prompt_ids

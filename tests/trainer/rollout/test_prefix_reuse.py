"""KV prefix reuse in the rollout engine (issue 33): the G samples of a prompt decode from
one prefill of it, copied G times; the same RNG draws the same tokens as a prefill of G
identical rows, on every zoo model, with left padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.chat import format_prompt
from trainer.config import ConfigError, PolicyConfig, RunConfig, TaskConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.rollout import HFRolloutEngine
from trainer.tasks import make_task
from trainer.tasks.few_shot import prompt_context
from trainer.zoo import ZOO_IDS


def _prompts(tokenizer: object) -> list[str]:
    # One example: the char tokenizer's prompt stays inside the tiny zoo's 128 positions.
    config = TaskConfig(few_shot=1, system_prompt="Be brief.")
    task = make_task(config, seed=0)
    context = prompt_context(config, task)
    problems = task.train_batch(1, 3)
    texts = [format_prompt(tokenizer, p.prompt, None, context) for p in problems]
    texts[1] = format_prompt(tokenizer, problems[1].prompt)  # a short one: left padding
    return texts


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_reuse_samples_the_same_tokens(zoo_dir: Path, zoo_id: str) -> None:
    model = load_causal_lm(zoo_dir / zoo_id, "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    prompts = _prompts(tokenizer)
    batches = []
    for reuse in (False, True):
        engine = HFRolloutEngine(model, tokenizer, prefix_reuse=reuse)
        torch.manual_seed(7)
        batches.append(engine.generate(prompts, n=4, max_new_tokens=10, temperature=1.0))
    off, on = batches
    assert on.response_ids == off.response_ids
    assert on.prompt_ids == off.prompt_ids
    assert on.finished == off.finished
    assert len({tuple(ids) for ids in on.response_ids}) > 1  # sampled, not all alike


def test_the_prefilled_cache_matches_the_prompt(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe", "float32", device="cpu").eval()
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    engine = HFRolloutEngine(model, tokenizer, prefix_reuse=True)
    ids = engine.encode_prompts(_prompts(tokenizer)[:1])[0]
    input_ids = torch.tensor([ids])
    mask = torch.ones_like(input_ids)
    with torch.no_grad():
        cache = engine._prefill(input_ids, mask, 3)
        assert cache.get_seq_length() == len(ids) - 1
        step = model(
            input_ids=input_ids[:, -1:].repeat(3, 1),
            past_key_values=cache,
            position_ids=torch.full((3, 1), len(ids) - 1),
        ).logits[:, -1]
        full = model(input_ids=input_ids).logits[:, -1]
    assert torch.allclose(step, full.expand(3, -1), atol=1e-4)


def test_greedy_and_the_static_cache_do_not_reuse(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    dynamic = HFRolloutEngine(model, tokenizer, prefix_reuse=True)
    static = HFRolloutEngine(model, tokenizer, cache="static", prefix_reuse=True)
    assert dynamic._reuses_prefix(4, 20)
    assert not dynamic._reuses_prefix(1, 20)  # greedy validation: one row a prompt
    assert not dynamic._reuses_prefix(4, 1)
    assert not static._reuses_prefix(4, 20)
    assert not HFRolloutEngine(model, tokenizer)._reuses_prefix(4, 20)
    greedy = dynamic.generate(
        _prompts(tokenizer), n=4, max_new_tokens=6, temperature=1.0, greedy=True
    )
    assert len(greedy) == 3


def test_the_policy_config_flag_is_off_by_default() -> None:
    assert PolicyConfig(name="a", model="zoo:tiny-qwen-bpe").rollout_prefix_reuse is False


def test_reuse_with_the_static_cache_is_refused_on_its_field() -> None:
    data = {
        "pool": [
            {
                "name": "a",
                "model": "zoo:tiny-qwen-bpe",
                "rollout_cache": "static",
                "rollout_prefix_reuse": True,
            }
        ]
    }
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    assert caught.value.errors["pool[0].rollout_prefix_reuse"] == (
        "rollout_prefix_reuse copies a dynamic KV cache: set rollout_cache to 'dynamic', "
        "or turn rollout_prefix_reuse off"
    )
    data["pool"][0]["rollout_cache"] = "dynamic"
    assert RunConfig.from_dict(data).pool[0].rollout_prefix_reuse is True

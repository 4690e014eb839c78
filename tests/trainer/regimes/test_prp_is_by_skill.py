"""PRP's importance weight per skill of the prompt (issue 18): on the complementary pool a
peer's answer to a foreign-skill prompt may get a weight near 0, which the overall
``prp/is_weight_mean`` hides. Real tiny models of the complementary zoo."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy
from trainer.regimes import prp
from trainer.regimes.prp.regime import PRP
from trainer.tasks import Problem
from trainer.tasks.arithmetic import ArithmeticTask

POOL = {"add": "tiny-llama-char-add", "sub": "tiny-qwen-bpe-sub"}
CONFIG = {
    "pool": [{"name": n, "model": f"zoo:{z}"} for n, z in POOL.items()],
    "regime": "prp",
    "prp": {"k_peer": 2, "is_correction": True, "c_bar": 1.0},
}


def _policy(name: str, zoo_dir: Path, config: RunConfig) -> Policy:
    return zoo_policy(name, POOL[name], zoo_dir, config)


def _prp_step(
    zoo_dir: Path, problems: list[Problem]
) -> tuple[dict[str, float], list[str], list[list[float]]]:
    """One PRP step of the subtraction policy with the addition policy's rollouts: the
    metrics, and the skill and IS weights of each peer row of the batch."""
    config = RunConfig.from_dict(CONFIG)
    source, learner = _policy("add", zoo_dir, config), _policy("sub", zoo_dir, config)
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "sub", {n: zoo_dir / z for n, z in POOL.items()})
    ids = tuple(p.id for p in problems)
    record = StepRecord("add", 1, ids, topics=prp.publish(source, peer_rollouts, step=1))
    step = prp.learn(learner, own_rollouts, [record], step=1)
    metrics = step.metrics  # read before any update: the peer tokens are weighed now
    g = own_rollouts.group_size
    skill_of_prompt = {
        tuple(own_rollouts.batch.prompt_ids[i * g]): p.skill for i, p in enumerate(problems)
    }
    own = len(own_rollouts.batch)
    skills = [skill_of_prompt[tuple(ids)] for ids in step.batch.prompt_ids[own:]]
    weights = [w for w in step.batch.token_weights[own:] if w is not None]
    assert len(weights) == len(skills)
    return metrics, skills, weights


def test_prp_logs_the_is_weight_mean_per_skill_of_the_prompt(complementary_zoo: Path) -> None:
    problems = ArithmeticTask(seed=0, levels=(3, 4, 6), val_size=3).validation()
    assert sorted(p.skill for p in problems) == ["addition", "multiplication", "subtraction"]
    metrics, skills, weights = _prp_step(complementary_zoo, problems)

    tokens: dict[str, list[float]] = {}
    for skill, row in zip(skills, weights, strict=True):
        tokens.setdefault(skill, []).extend(row)
    assert len(tokens) > 1, tokens  # the peer answered prompts of several skills
    prefix = prp.IS_WEIGHT_MEAN + "/"
    answer = prp.IS_WEIGHT_MEAN_ANSWER  # the digit tokens' keys: test_prp_answer_weight.py
    logged = {
        k[len(prefix) :]: v
        for k, v in metrics.items()
        if k.startswith(prefix) and not k.startswith(answer)
    }
    assert set(logged) == set(tokens)
    answer_skills = {k[len(answer) + 1 :] for k in metrics if k.startswith(answer + "/")}
    assert answer_skills and answer_skills <= set(tokens)
    for skill, values in tokens.items():
        assert logged[skill] == pytest.approx(sum(values) / len(values), abs=1e-12), skill
    weighted = sum(logged[s] * len(tokens[s]) for s in tokens) / sum(map(len, tokens.values()))
    assert weighted == pytest.approx(metrics[prp.IS_WEIGHT_MEAN], abs=1e-12)
    for skill in logged:
        info = m.describe(f"{prefix}{skill}")
        assert (info.label, info.group) == (f"PRP importance weight (mean) · {skill}", m.SHARING)


def test_prp_logs_no_per_skill_weight_when_the_prompts_share_one_skill(
    complementary_zoo: Path,
) -> None:
    problems = ArithmeticTask(seed=0, levels=(3,), val_size=2).validation()
    metrics, _skills, weights = _prp_step(complementary_zoo, problems)
    assert weights and prp.IS_WEIGHT_MEAN in metrics
    overall = {prp.IS_WEIGHT_MEAN, prp.IS_WEIGHT_MEAN_ANSWER}  # no per-skill key
    assert {k for k in metrics if k.startswith(prp.IS_WEIGHT_MEAN)} <= overall

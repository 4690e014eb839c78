"""SGT's rescue mechanism, directly (issue 18): on the complementary-skills pool the
subtraction policy fails every sample of an addition prompt, so its GRPO group has zero
advantage and carries no signal; the addition policy solves it, SGT rescues it, and one
SGT update raises the learner's log-probability of the peer's answer on that prompt.

Real tiny models of the complementary zoo, the settings of examples/complementary.json
(lr 3e-4, G = 8, lambda_sgt = 0.1, k_sgt = 1), one step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.zoo_policy import pool_member_policy
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import LearnerBatch, Policy
from trainer.regimes.sgt.regime import SGT
from trainer.tasks.arithmetic import ArithmeticTask

EXAMPLE = Path(__file__).resolve().parents[3] / "examples/complementary.json"
PEER, LEARNER = "llama-char-add", "qwen-bpe-sub"


def _answer_logp(policy: Policy, prompts: list[list[int]], answers: list[list[int]]) -> list[float]:
    """The policy's log-probability of each whole answer after its prompt."""
    return [sum(row) for row in policy.response_logprobs(prompts, answers)]


def test_an_sgt_update_raises_the_rescued_answers_log_probability(
    complementary_zoo: Path,
) -> None:
    config = RunConfig.from_file(EXAMPLE)
    peer = pool_member_policy(config, PEER, complementary_zoo)
    learner = pool_member_policy(config, LEARNER, complementary_zoo)
    # The twin takes the same step without the rescues.
    twin = pool_member_policy(config, LEARNER, complementary_zoo)
    problems = ArithmeticTask(seed=0, levels=(3,), val_size=4).validation()  # addition
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = peer.rollout(problems), learner.rollout(problems)
    assert own_rollouts.successes.sum() == 0  # the learner fails every sample: no GRPO signal

    sgt = SGT(config, LEARNER)
    ids = tuple(p.id for p in problems)
    record = StepRecord(PEER, 1, ids, topics=sgt.publish(peer, peer_rollouts, step=1))
    step = sgt.learn(learner, own_rollouts, [record], step=1)
    batch = step.batch
    assert batch.aux_terms, "the peer solved none of the prompts"
    assert torch.count_nonzero(batch.advantages) == 0  # all failed: zero advantage
    rescued = [e["prompt_id"] for e in step.events]
    assert [e["source"] for e in step.events] == [PEER] * len(rescued)

    (rescued_nll,) = batch.aux_terms
    prompts, answers = rescued_nll.prompt_ids, rescued_nll.response_ids
    before = _answer_logp(learner, prompts, answers)
    learner.train_step(batch)
    twin.train_step(
        LearnerBatch(batch.prompt_ids, batch.response_ids, batch.advantages, batch.token_weights)
    )
    after = _answer_logp(learner, prompts, answers)
    without_rescue = _answer_logp(twin, prompts, answers)
    # Without the rescues the all-failed groups move nothing (zero advantage, no weight
    # decay): only the peer's success carries signal.
    assert without_rescue == pytest.approx(before, abs=1e-6)
    for prompt_id, b, a in zip(rescued, before, after, strict=True):
        assert a > b + 1e-2, (prompt_id, b, a)  # the peer's answer became more likely

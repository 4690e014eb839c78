"""Sharing regimes on constructed batches, against hand-computed expectations."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest
import torch

from tests.trainer.tokenizer_kinds import zoo
from trainer import metrics as m
from trainer.config import PolicyConfig, RunConfig
from trainer.exchange import StepRecord
from trainer.policy import LearnerBatch, Policy, Rollouts
from trainer.regimes import BUILT_IN, make_regime, regimes, sgt, xgrpo
from trainer.regimes.prp.regime import truncated_is_weights
from trainer.regimes.sgt.regime import SGT, SUCCESSES_TOPIC, Success, rescue_set, shortest_successes
from trainer.regimes.xgrpo.regime import (
    REWARDS_TOPIC,
    XGRPO,
    perturbed_advantages,
    pooled_advantages,
)
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem, get_reward


def _rollouts(rewards: list[list[float]], texts: list[list[str]] | None = None) -> Rollouts:
    """B prompts x G samples with the given rewards (and response texts)."""
    group = len(rewards[0])
    problems = [
        Problem(id=f"p{i}", prompt=f"Compute {i}+0.", answer=str(i)) for i in range(len(rewards))
    ]
    flat_texts = [t for row in texts for t in row] if texts else ["x"] * (len(rewards) * group)
    batch = RolloutBatch(
        prompt_ids=[[1, 2]] * len(flat_texts),
        response_ids=[[3]] * len(flat_texts),
        response_texts=flat_texts,
        finished=[True] * len(flat_texts),
    )
    flat = torch.tensor([r for row in rewards for r in row])
    return Rollouts(problems, batch, flat, group, 1.0)


def _config(regime: str, **sections: dict[str, object]) -> RunConfig:
    pool = [{"name": n, "model": "zoo:tiny-llama-char"} for n in ("a", "b", "c")]
    return RunConfig.from_dict({"pool": pool, "regime": regime, **sections})


def test_every_regime_declaration_names_its_implementation() -> None:
    """Read from the registry: the built-in regimes, the baseline first; each one's
    implementation, built for a config of that regime, carries the declared name (it is
    declared once, in the spec)."""
    assert regimes() == list(BUILT_IN) and regimes()[0].name == "standalone"
    for spec in regimes():
        regime = make_regime(_config(spec.name), "a", {})
        assert isinstance(regime, spec.load()) and regime.name == spec.name


# --- XGRPO ------------------------------------------------------------------------------


def test_xgrpo_advantages_come_from_the_pooled_rewards() -> None:
    # Pooled rewards [1, 0 | 1, 1 | 0, 0]: mean 0.5, unbiased std sqrt(6 * 0.25 / 5)
    # = sqrt(0.3) = 0.5477226; own advantages (1 - 0.5) / 0.5477226 = +-0.9128709.
    own = torch.tensor([1.0, 0.0])
    advantages, mean, std = pooled_advantages(
        own, [torch.tensor([1.0, 1.0]), torch.tensor([0.0, 0.0])], eps=1e-6
    )
    assert advantages.tolist() == pytest.approx([0.9128692, -0.9128692], abs=1e-6)
    assert (mean, std) == (pytest.approx(0.5), pytest.approx(0.5477226))


def test_xgrpo_gives_zero_advantage_when_the_whole_pool_agrees() -> None:
    advantages, _, std = pooled_advantages(
        torch.tensor([1.0, 1.0]), [torch.tensor([1.0, 1.0])], eps=1e-6
    )
    assert advantages.tolist() == [0.0, 0.0] and std == 0.0


def test_xgrpo_learns_from_peer_rewards_and_logs_one_event_per_peer_and_prompt() -> None:
    regime = XGRPO(_config("xgrpo"), "a")
    rollouts = _rollouts([[1.0, 0.0], [0.0, 0.0]])
    peers = [
        StepRecord("b", 3, ("p0", "p1"), topics={REWARDS_TOPIC: {"p0": [1, 1], "p1": [1, 0]}}),
        StepRecord("c", 3, ("p0", "p1"), topics={REWARDS_TOPIC: {"p0": [0, 0], "p1": [0, 0]}}),
    ]
    result = regime.learn(None, rollouts, peers, step=3)  # type: ignore[arg-type]

    # p1: pooled [0, 0, 1, 0, 0, 0]: mean 1/6; own rewards sit below the pooled mean.
    pooled = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    expected_p1 = (0.0 - pooled.mean()) / (pooled.std() + 1e-6)
    assert result.batch.advantages[:2].tolist() == pytest.approx([0.9128692, -0.9128692], abs=1e-6)
    assert result.batch.advantages[2:].tolist() == pytest.approx([float(expected_p1)] * 2)
    assert sorted((e["source"], e["prompt_id"], e["count"]) for e in result.events) == [
        ("b", "p0", 2), ("b", "p1", 2), ("c", "p0", 2), ("c", "p1", 2),
    ]  # fmt: skip
    assert {e["kind"] for e in result.events} == {"advantage_stats"}
    assert result.metrics[xgrpo.BASELINE_SHIFT] == pytest.approx((0.0 + 1 / 6) / 2)


def test_xgrpo_ablation_shares_nothing_and_perturbs_the_own_baseline() -> None:
    config = _config("xgrpo", xgrpo={"random_perturbation": True})
    regime = XGRPO(config, "a")
    rollouts = _rollouts([[1.0, 0.0, 0.0, 1.0]])
    assert regime.publish(None, rollouts, step=1) == {}  # type: ignore[arg-type]
    result = regime.learn(None, rollouts, [], step=1)  # type: ignore[arg-type]
    assert result.events == []
    # Same draw as the regime's: (r - (mean + noise)) / (std + eps).
    rng = random.Random(f"xgrpo-noise-{config.seed}-1-a")
    noise = rng.gauss(0.0, 0.5773503 / 2)
    expected = [(r - 0.5 - noise) / (0.5773503 + 1e-6) for r in (1.0, 0.0, 0.0, 1.0)]
    assert result.batch.advantages.tolist() == pytest.approx(expected, abs=1e-5)


def test_the_perturbation_has_the_scale_of_the_own_baselines_standard_error() -> None:
    own = torch.tensor([1.0, 0.0, 0.0, 1.0])  # std 0.5773503, G = 4: scale 0.2886751
    rng = random.Random(0)
    shifts = [perturbed_advantages(own, 1e-6, rng)[1] for _ in range(4000)]
    # E|N(0, s)| = s * sqrt(2 / pi)
    assert statistics.mean(shifts) == pytest.approx(0.2886751 * math.sqrt(2 / math.pi), rel=0.05)


# --- SGT --------------------------------------------------------------------------------


def test_sgt_publishes_the_shortest_distinct_successes_per_solved_prompt() -> None:
    rollouts = _rollouts(
        [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]],
        [["\\boxed{10}", "so \\boxed{10}", "no"], ["a", "b", "c"]],
    )
    assert shortest_successes(rollouts, k=1) == {"p0": [Success("\\boxed{10}", True)]}
    assert shortest_successes(rollouts, k=5) == {
        "p0": [Success("\\boxed{10}", True), Success("so \\boxed{10}", True)]
    }


def test_sgt_rescues_exactly_the_prompts_the_learner_failed_and_a_peer_solved() -> None:
    # p0: learner failed all, peers solved -> rescued. p1: failed all, nobody solved -> not.
    # p2: learner solved once -> not rescued although a peer solved it.
    rollouts = _rollouts([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    peer_successes = {
        "b": {"p0": [Success("\\boxed{0} long", True)], "p2": [Success("\\boxed{2}", True)]},
        "c": {"p0": [Success("\\boxed{0}", False)]},
    }
    rescues, failed_all = rescue_set(rollouts, peer_successes, k=1)
    assert failed_all == 2
    assert [(r.prompt_id, r.source, r.text, r.finished) for r in rescues] == [
        ("p0", "c", "\\boxed{0}", False)
    ]

    rescues, _ = rescue_set(rollouts, peer_successes, k=2)
    assert [(r.source, r.text) for r in rescues] == [("c", "\\boxed{0}"), ("b", "\\boxed{0} long")]


def test_sgt_logs_a_success_event_per_source_and_prompt_and_its_rates() -> None:
    regime = SGT(_config("sgt", sgt={"k_sgt": 2}), "a")
    rollouts = _rollouts([[0.0, 0.0], [0.0, 0.0]])
    peers = [
        StepRecord(
            "b", 1, ("p0", "p1"), topics={SUCCESSES_TOPIC: {"p0": [Success("\\boxed{0}", True)]}}
        ),
        StepRecord("c", 1, ("p0", "p1"), topics={SUCCESSES_TOPIC: {}}),
    ]

    class FakePolicy:  # what SGT needs of a policy: GRPO advantages and a tokenizer
        tokenizer = zoo("char")

        def advantages(self, r: Rollouts) -> torch.Tensor:
            return torch.zeros(len(r.batch))

    result = regime.learn(FakePolicy(), rollouts, peers, step=1)  # type: ignore[arg-type]
    fields = ("source", "target", "kind", "prompt_id", "count")
    assert [tuple(e[f] for f in fields) for e in result.events] == [("b", "a", "success", "p0", 1)]
    tokens = [*"\\boxed{0}", "</s>"]
    assert result.events[0]["samples"] == [  # no reason: the published success gave none
        {"text": "\\boxed{0}", "tokens": tokens, "finished": True, "truncated": False}
    ]
    assert result.metrics == {
        sgt.RESCUE_SET_SIZE: 1.0,
        sgt.RESCUE_RATE: 0.5,
        m.THL_UNK_FRAC: 0.0,
        m.THL_TEXT_MISMATCH_FRAC: 0.0,
    }
    (term,) = result.batch.aux_terms  # the NLL on the rescued success, weight lambda_sgt
    assert (term.loss, term.coef, term.metric) == ("nll", 0.1, sgt.NLL)
    assert term.prompt_ids == [rollouts.batch.prompt_ids[0]]
    assert term.response_ids == [zoo("char").convert_tokens_to_ids(tokens)]


# --- PRP --------------------------------------------------------------------------------


def test_prp_importance_weights_are_truncated_at_c_bar() -> None:
    # pi_old / mu = e^(old - mu): e^1 = 2.718 -> 1.0 (c_bar); e^-1 = 0.3679; e^0 = 1.
    weights = truncated_is_weights([-1.0, -2.0, -0.5], [-2.0, -1.0, -0.5], 1.0, correction=True)
    assert weights == pytest.approx([1.0, math.exp(-1), 1.0])
    weights = truncated_is_weights([-1.0, -2.0], [-2.0, -1.0], 2.0, correction=True)
    assert weights == pytest.approx([2.0, math.exp(-1)])


def test_prp_without_correction_weights_every_peer_token_one() -> None:
    assert truncated_is_weights([-1.0, -9.0], [-5.0, -0.1], 1.0, correction=False) == [1.0, 1.0]


# --- SGT equals GRPO without rescues (real model) ---------------------------------------


def test_sgt_with_an_empty_rescue_set_equals_grpo_to_the_last_bit(zoo_dir: Path) -> None:
    model_dir = zoo_dir / "tiny-llama-char"

    def make_policy() -> Policy:
        torch.manual_seed(0)
        config = PolicyConfig(name="a", model=str(model_dir), group_size=4, lr=1e-3)
        return Policy(
            config, _config("sgt").grpo, model_dir=model_dir, tokenizer_dir=model_dir,
            reward_fn=get_reward("math"),
        )  # fmt: skip

    problems = [
        Problem(id=f"p{i}", prompt=f"Compute {i}+{i}.", answer=str(2 * i)) for i in range(4)
    ]
    grpo_policy, sgt_policy = make_policy(), make_policy()
    torch.manual_seed(1)
    rollouts = grpo_policy.rollout(problems)

    grpo_policy.train_step(LearnerBatch.on_policy(rollouts, grpo_policy.advantages(rollouts)))
    peers = [StepRecord("b", 1, tuple(p.id for p in problems), topics={SUCCESSES_TOPIC: {}})]
    sgt_step = SGT(_config("sgt"), "a").learn(sgt_policy, rollouts, peers, step=1)
    sgt_policy.train_step(sgt_step.batch)

    assert sgt_step.events == [] and sgt_step.batch.aux_terms == []
    for (name, a), (_, b) in zip(
        grpo_policy.model.state_dict().items(), sgt_policy.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name

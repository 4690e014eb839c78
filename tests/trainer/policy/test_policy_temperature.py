"""Log-probs at the sampling temperature (SPEC 9; issue 18, fix 1).

The rollout engine samples from ``softmax(logits / T)``; every log-prob that enters a
ratio or an importance weight (GRPO's old log-probs, the update's current ones, the
reference's for the KL term, PRP's behaviour log-probs ``mu``, ReMix's stored behaviour
log-probs) must score that same distribution. The tests compare them with the sampler's
own probabilities: the scores HF ``generate`` samples from (``output_scores``, after its
temperature warper), captured while the engine draws the rollouts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from trainer import metrics as m
from trainer.batch import Update, build_sequences
from trainer.config import GRPOConfig, PolicyConfig, RunConfig
from trainer.exchange import StepRecord
from trainer.policy import LearnerBatch, Policy, Rollouts
from trainer.regimes.prp.regime import PRP, ROLLOUTS_TOPIC
from trainer.remix.losses import RemixObjective
from trainer.remix.reuse import ReplayedSamples
from trainer.tasks import Problem, get_reward
from trainer.thl import align_response_logprobs

MODEL = "tiny-llama-char"
TOLERANCE = 1e-5
PROBLEMS = [
    Problem(id=f"p{i}", prompt=f"Compute {i}+{i + 1}.", answer=str(2 * i + 1)) for i in range(3)
]


@dataclass
class Sampled:
    """Rollouts and, per sample, the sampler's log-softmax at each response position."""

    rollouts: Rollouts
    sampler_logp: list[torch.Tensor]  # per sample: [len(response), V]

    def chosen(self) -> list[list[float]]:
        """Per sample, the sampler's log-prob of each token it drew."""
        return [
            logp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()
            for logp, ids in zip(self.sampler_logp, self.rollouts.batch.response_ids, strict=True)
        ]


def _policy(zoo_dir: Path, temperature: float, *, name: str = "a", **grpo: Any) -> Policy:
    model_dir = zoo_dir / MODEL
    config = PolicyConfig(
        name=name, model=str(model_dir), group_size=4, max_new_tokens=10,
        temperature=temperature, lr=0.0,
    )  # fmt: skip
    return Policy(
        config, GRPOConfig(**grpo), model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
    )  # fmt: skip


def _sample(policy: Policy, monkeypatch: pytest.MonkeyPatch, seed: int = 0) -> Sampled:
    """``policy.rollout`` with the scores ``generate`` sampled from captured."""
    captured: list[Any] = []
    original = policy.model.generate

    def generate(*, generation_config: GenerationConfig, **kwargs: Any) -> torch.Tensor:
        config = copy.deepcopy(generation_config)
        config.output_scores = config.return_dict_in_generate = True
        out = original(generation_config=config, **kwargs)
        captured.append(out)
        return out.sequences

    torch.manual_seed(seed)
    with monkeypatch.context() as patch:
        # HF generate's path, whose scores this captures (the default decoding loop's
        # log-probs: tests/trainer/rollout/test_finished_rows.py)
        patch.setattr(policy.engine, "decoder", "generate")
        patch.setattr(policy.model, "generate", generate)
        rollouts = policy.rollout(PROBLEMS)
    (out,) = captured
    scores = torch.stack(out.scores, dim=1).float()  # [B * G, new tokens, V]
    sampler_logp = [
        torch.log_softmax(scores[row, : len(ids)], dim=-1)
        for row, ids in enumerate(rollouts.batch.response_ids)
    ]
    return Sampled(rollouts, sampler_logp)


def _max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(x) for x in a] == [len(y) for y in b]
    return max(abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True))


def _rows(values: torch.Tensor, response_mask: torch.Tensor) -> list[list[float]]:
    return [values[row][response_mask[row].bool()].tolist() for row in range(values.shape[0])]


@pytest.fixture(params=[0.5, 1.5], ids=["T0.5", "T1.5"])
def temperature(request: pytest.FixtureRequest) -> Iterator[float]:
    yield request.param


def test_response_logprobs_score_the_sampling_distribution(
    zoo_dir: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(zoo_dir, temperature)
    sampled = _sample(policy, monkeypatch)
    batch = sampled.rollouts.batch
    scored = policy.response_logprobs(batch.prompt_ids, batch.response_ids)
    assert _max_gap(scored, sampled.chosen()) < TOLERANCE


def test_grpo_old_and_reference_logprobs_and_entropy_use_the_sampling_temperature(
    zoo_dir: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two epochs: GRPO computes its old log-probs in a separate forward (with one pass of
    # one mini-batch they are the update's own log-probs, detached: checked below through
    # the entropy, which comes from the same logits). lr 0: the policy stays the sampler.
    policy = _policy(zoo_dir, temperature, epochs=2, kl_coef=0.01)
    sampled = _sample(policy, monkeypatch)
    rollouts = sampled.rollouts
    batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
    expected = sampled.chosen()

    metrics, tensors = policy._train(batch, Update())
    assert tensors is not None and tensors.old_logp is not None
    old_logp, response_mask = tensors.old_logp, tensors.response_mask
    assert _max_gap(_rows(old_logp, response_mask), expected) < TOLERANCE

    # The KL anchor scores the same tempered distribution (TRL's GRPOTrainer scales the
    # reference model's logits by the temperature too), so KL(pi || ref) is 0 at start.
    input_ids, attention_mask, mask = build_sequences(
        batch.prompt_ids, batch.response_ids, policy.pad_id
    )
    ref_logp = policy._log_probs(policy.reference, input_ids, attention_mask)
    assert _max_gap(_rows(ref_logp, mask), expected) < TOLERANCE
    assert abs(metrics[m.KL_LOSS]) < TOLERANCE

    # actor/entropy: the token-mean entropy of the sampling distribution.
    entropies = torch.cat([-(lp.exp() * lp).sum(-1) for lp in sampled.sampler_logp])
    assert metrics[m.ENTROPY] == pytest.approx(float(entropies.mean()), abs=TOLERANCE)
    one_pass = _policy(zoo_dir, temperature)
    assert one_pass.train_step(batch)[m.ENTROPY] == pytest.approx(
        float(entropies.mean()), abs=TOLERANCE
    )


def test_remix_stores_behaviour_logprobs_of_the_sampling_distribution(
    zoo_dir: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(zoo_dir, temperature, kl_coef=0.01)
    sampled = _sample(policy, monkeypatch)
    rollouts = sampled.rollouts
    batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
    hook = ReplayedSamples([None] * len(batch))
    batch.hooks.append(hook)
    objective = RemixObjective(kl_lambda=0.5, c_bar=1.0, updates_per_batch=1)
    policy.train_step(batch, objective.update())
    assert _max_gap(hook.pi_k, sampled.chosen()) < TOLERANCE


def test_prp_scores_peer_samples_at_each_policys_own_temperature(
    zoo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mu is the peer's sampling probability (peer's T); the learner's side of the IS
    weight is the learner's own sampling distribution (learner's T)."""
    t_peer, t_learner = 0.5, 1.5
    peer = _policy(zoo_dir, t_peer, name="b")
    learner = _policy(zoo_dir, t_learner, name="a")
    pool = [{"name": n, "model": f"zoo:{MODEL}", "group_size": 4} for n in ("a", "b")]
    config = RunConfig.from_dict(
        {"pool": pool, "regime": "prp", "prp": {"k_peer": 4, "c_bar": 1e9}}
    )
    dirs = {"a": zoo_dir / MODEL, "b": zoo_dir / MODEL}

    sampled = _sample(peer, monkeypatch, seed=1)
    published = PRP(config, "b", dirs).publish(peer, sampled.rollouts, step=1)
    mu = [list(p.logprobs) for p in published[ROLLOUTS_TOPIC]]
    assert _max_gap(mu, sampled.chosen()) < TOLERANCE

    own = _sample(learner, monkeypatch, seed=2).rollouts
    record = StepRecord("b", 1, tuple(p.id for p in PROBLEMS), topics=published)
    step = PRP(config, "a", dirs).learn(learner, own, [record], step=1)
    assert step.metrics  # read before any update: the peer tokens are weighed now
    # mu on the learner's tokens, by (prompt, response): THL spreads each word's log-prob
    # mass over the word's target tokens, even between two copies of one tokenizer.
    tokenizer = learner.tokenizer
    mu_of = {
        (tuple(prompt), p.response_ids): align_response_logprobs(
            tokenizer, p.response_ids, p.logprobs, tokenizer
        )[1].target_values
        for prompt, p in zip(
            sampled.rollouts.batch.prompt_ids, published[ROLLOUTS_TOPIC], strict=True
        )
    }
    peer_rows = range(len(own.batch), len(step.batch))
    log_ratios: list[torch.Tensor] = []
    assert len(peer_rows) == len(published[ROLLOUTS_TOPIC])
    for row in peer_rows:
        prompt, response = step.batch.prompt_ids[row], step.batch.response_ids[row]
        with torch.no_grad():
            logits = learner.model(input_ids=torch.tensor([prompt + response])).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float() / t_learner, dim=-1)
        learner_logp = logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
        expected = learner_logp - torch.tensor(mu_of[(tuple(prompt), tuple(response))])
        weights = torch.tensor(step.batch.token_weights[row])
        assert torch.allclose(weights.log(), expected, atol=TOLERANCE, rtol=0)
        log_ratios.append(expected)
    # The two temperatures differ enough that scoring both at one T would show.
    assert float(torch.cat(log_ratios).abs().max()) > 0.05

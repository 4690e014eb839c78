"""PRP under ReMix (issue 32's open end, fixed in issue 35): a peer rollout trains with its
truncated importance weight ``min(pi_k / mu, c_bar)``, as without ReMix; the weights the
update used are the ones PRP's events and metrics report. Real tiny zoo policies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.objective_spy import objective_spy
from tests.trainer.zoo_policy import zoo_policy
from trainer.batch import LearnerBatch
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import first_scored_column
from trainer.regimes.prp import IS_WEIGHT_MEAN
from trainer.regimes.prp.regime import PRP
from trainer.regimes.prp.weights import ImportanceWeights, truncated_is_weights
from trainer.remix.replay import ReplaySample
from trainer.remix.reuse import ReMix, ReplayedSamples, with_replay
from trainer.tasks import Problem

POOL = {"llama": "tiny-llama-char", "qwen": "tiny-qwen-bpe"}
C_BAR = 1.5


@pytest.fixture
def remix_token_weights() -> Iterator[list[torch.Tensor | None]]:
    """The ``token_weights`` every call of the ``remix`` objective received."""
    seen: list[torch.Tensor | None] = []

    def record(kwargs: dict[str, Any]) -> None:
        weights = kwargs["inputs"].token_weights
        seen.append(None if weights is None else weights.detach().clone())

    with objective_spy("remix", record):
        yield seen


def test_under_remix_prp_peer_tokens_train_with_their_importance_weights(
    zoo_dir: Path, remix_token_weights: list[torch.Tensor | None]
) -> None:
    config = RunConfig.from_dict(
        {
            "pool": [{"name": n, "model": f"zoo:{m}"} for n, m in POOL.items()],
            "regime": "prp",
            "off_policy": "remix",
            "prp": {"k_peer": 2, "c_bar": C_BAR},
        }
    )
    source, learner = (zoo_policy(n, POOL[n], zoo_dir, config) for n in ("llama", "qwen"))
    problems = [Problem(id=f"p{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in (1, 2)]
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "qwen", {n: zoo_dir / m for n, m in POOL.items()})
    record = StepRecord("llama", 3, ("p1", "p2"), topics=prp.publish(source, peer_rollouts, step=3))
    step = prp.learn(learner, own_rollouts, [record], step=3)
    own = len(own_rollouts.batch)
    peers = list(range(own, len(step.batch)))
    hook = step.batch.hook(ImportanceWeights)
    assert hook is not None and hook.pending(step.batch) == peers
    # What the weights must be: pi_k is the learner before the update.
    pi_k = learner.response_logprobs(
        [step.batch.prompt_ids[row] for row in peers],
        [step.batch.response_ids[row] for row in peers],
    )
    expected = [
        truncated_is_weights(old, hook.mu[row], C_BAR, True)
        for old, row in zip(pi_k, peers, strict=True)
    ]
    assert any(w != 1.0 for weights in expected for w in weights)

    remix = ReMix(config, "qwen")
    remix.train(learner, step.batch, own_rollouts, step=3)

    # Every pass of the objective saw the peer tokens' weights (and 1 on own tokens). It
    # reads the columns from the batch's first response token on (one micro-batch here).
    assert len(remix_token_weights) == config.remix.updates_per_batch
    _, _, response_mask = learner._sequences(step.batch.prompt_ids, step.batch.response_ids)
    start = first_scored_column(response_mask)
    for weights in remix_token_weights:
        assert weights is not None and weights.shape[0] == len(step.batch)
        scored = response_mask[:, start : start + weights.shape[1]].bool()
        for row, want in zip(peers, expected, strict=True):
            torch.testing.assert_close(
                weights[row][scored[row]], torch.tensor(want), rtol=1e-5, atol=1e-6
            )
        for row in range(own):
            assert torch.all(weights[row][scored[row]] == 1.0)
    # The regime's batch holds the weights the update used: its metrics read them, with
    # no forward of their own after the update.
    assert not hook.pending(step.batch)
    for row, want in zip(peers, expected, strict=True):
        torch.testing.assert_close(
            torch.tensor(step.batch.token_weights[row]), torch.tensor(want), rtol=1e-5, atol=1e-6
        )
    mean = sum(sum(w) for w in expected) / sum(len(w) for w in expected)
    assert step.metrics[IS_WEIGHT_MEAN] == pytest.approx(mean, rel=1e-5)


def test_with_replay_carries_the_batchs_hooks_and_old_log_probs() -> None:
    peer = ImportanceWeights([None, [-0.7]], C_BAR)
    batch = LearnerBatch(
        [[1], [1]],
        [[5], [6]],
        torch.tensor([0.5, -0.5]),
        [None, None],
        old_logp=[None, [-0.4]],
        hooks=[peer],
    )
    replayed = ReplaySample(1, (1,), (7, 3), (-0.5, -0.25), 7.0)
    mixed = with_replay(batch, [replayed])
    remix_hook = mixed.hook(ReplayedSamples)
    assert mixed.hooks == [remix_hook, peer]
    assert mixed.old_logp == [None, [-0.4], None]
    assert peer.pending(mixed) == [1]  # the replayed row is no peer sample

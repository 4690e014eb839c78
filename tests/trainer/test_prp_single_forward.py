"""PRP scores the learner's old log-probs on peer samples once (issue 18, fix 5): the
values behind the importance weights travel with the batch into the update, which no
longer runs a second forward over the peer rows, and the step's numbers do not change.

Real tiny models (char-level source, byte-level BPE learner), two epochs per batch so
that the update needs old log-probs of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import LearnerBatch, Policy
from trainer.regimes.prp.regime import PRP
from trainer.tasks import Problem

POOL = {"llama": "tiny-llama-char", "qwen": "tiny-qwen-bpe"}
CONFIG = {
    "pool": [{"name": n, "model": f"zoo:{m}"} for n, m in POOL.items()],
    "regime": "prp",
    "prp": {"k_peer": 2},
    "grpo": {"epochs": 2},
}


def _policy(name: str, zoo_dir: Path, config: RunConfig) -> Policy:
    return zoo_policy(name, POOL[name], zoo_dir, config)


def _count_scored_rows(model: torch.nn.Module) -> list[int]:
    """Wrap ``model.forward``; the returned list collects the rows of each no-grad call."""
    calls: list[int] = []
    forward: Callable[..., Any] = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            calls.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    return calls


def test_prp_scores_every_sample_once_and_trains_to_the_same_numbers(zoo_dir: Path) -> None:
    config = RunConfig.from_dict(CONFIG)
    source, learner, twin = (_policy(n, zoo_dir, config) for n in ("llama", "qwen", "qwen"))
    problems = [Problem(id=f"p{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in (1, 2)]
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "qwen", {n: zoo_dir / m for n, m in POOL.items()})
    record = StepRecord("llama", 3, ("p1", "p2"), topics=prp.publish(source, peer_rollouts, step=3))

    scored = _count_scored_rows(learner.model)
    batch = prp.learn(learner, own_rollouts, [record], step=3).batch
    peers = len(batch) - len(own_rollouts.batch)
    assert peers == 4 and scored == [peers]  # the importance weights' forward
    metrics = learner.train_step(batch)
    assert sum(scored) == len(batch), scored  # each sample's old log-probs once

    # The twin computes every old log-prob inside the update, as before the fix.
    recomputed = LearnerBatch(
        batch.prompt_ids, batch.response_ids, batch.advantages, batch.token_weights
    )
    expected = twin.train_step(recomputed)
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-6, rel=1e-6), key
    for (name, got), (_, want) in zip(
        learner.model.named_parameters(), twin.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, msg=name)

"""PRP's importance weights cost the learner no forward of their own (issue 18, fix 5;
issue 23). The update computes the peer tokens' weights ``min(pi_old / mu, c_bar)`` from
the log-probs it has in hand: in a single pass, its own forward's detached log-probs
(the ratio's denominator too); with more passes, the one no-grad forward that scores
every sample's old log-probs. The step's numbers are those of the path that weighed the
peer tokens with a separate forward before the update (as the step does when its metrics
are read first), to float rounding.

Real tiny models (char-level source, byte-level BPE learner)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy
from trainer.regimes.prp import IS_WEIGHT_MEAN
from trainer.regimes.prp.regime import PRP
from trainer.regimes.prp.weights import ImportanceWeights
from trainer.tasks import Problem

POOL = {"llama": "tiny-llama-char", "qwen": "tiny-qwen-bpe"}


def _config(epochs: int) -> RunConfig:
    return RunConfig.from_dict(
        {
            "pool": [{"name": n, "model": f"zoo:{m}"} for n, m in POOL.items()],
            "regime": "prp",
            "prp": {"k_peer": 2, "c_bar": 1.5},
            "grpo": {"epochs": epochs},
        }
    )


def _policy(name: str, zoo_dir: Path, config: RunConfig) -> Policy:
    return zoo_policy(name, POOL[name], zoo_dir, config)


def _count_scored_rows(model: torch.nn.Module) -> list[int]:
    """Wrap ``model.forward``; the returned list collects the rows of each no-grad scoring
    pass. A pass whose rows share prompts (``update_prefix_reuse``) first encodes the
    distinct prompts into an empty KV cache; that call is part of the pass and is not
    counted apart."""
    calls: list[int] = []
    forward: Callable[..., Any] = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        cache = kwargs.get("past_key_values")
        encodes_prompts = cache is not None and cache.get_seq_length() == 0
        if not torch.is_grad_enabled() and not encodes_prompts:
            calls.append(int(kwargs["input_ids"].shape[0]))
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("epochs", [1, 2])
def test_prp_weighs_peer_tokens_inside_the_update_to_the_same_numbers(
    zoo_dir: Path, epochs: int
) -> None:
    config = _config(epochs)
    source, learner, twin = (_policy(n, zoo_dir, config) for n in ("llama", "qwen", "qwen"))
    problems = [Problem(id=f"p{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in (1, 2)]
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "qwen", {n: zoo_dir / m for n, m in POOL.items()})
    record = StepRecord("llama", 3, ("p1", "p2"), topics=prp.publish(source, peer_rollouts, step=3))

    scored = _count_scored_rows(learner.model)
    step = prp.learn(learner, own_rollouts, [record], step=3)
    peers = len(step.batch) - len(own_rollouts.batch)
    assert peers == 4 and scored == []  # no forward for the weights
    weights = step.batch.hook(ImportanceWeights)
    assert weights is not None
    assert weights.pending(step.batch) == list(range(len(own_rollouts.batch), len(step.batch)))
    metrics = learner.train_step(step.batch) | step.metrics
    # One pass: the update's own forward (with gradient) only; two: one no-grad forward
    # for every sample's old log-probs, peers included.
    assert scored == ([] if epochs == 1 else [len(step.batch)]), scored
    assert not weights.pending(step.batch)  # the update wrote the weights in

    # The twin weighs the peer tokens first, with a forward of their own (metrics read
    # before the update), and hands the weights and old log-probs to its update.
    twin_scored = _count_scored_rows(twin.model)
    twin_step = prp.learn(twin, own_rollouts, [record], step=3)
    twin_metrics = dict(twin_step.metrics)
    assert twin_scored == [peers]
    twin_metrics |= twin.train_step(twin_step.batch)

    assert set(metrics) == set(twin_metrics)
    assert 0.0 < metrics[IS_WEIGHT_MEAN] < 1.5
    for key, value in twin_metrics.items():
        assert metrics[key] == pytest.approx(value, abs=1e-6, rel=1e-5), key
    for row in range(len(own_rollouts.batch), len(step.batch)):
        torch.testing.assert_close(
            torch.tensor(step.batch.token_weights[row]),
            torch.tensor(twin_step.batch.token_weights[row]),
            atol=1e-6,
            rtol=1e-6,
        )
    # The last update's gradients agree to float rounding. The parameters only to 2 x lr:
    # AdamW's first steps move a parameter by about lr x sign(gradient), whatever its size,
    # so a gradient that is 0 but for rounding (a key projection's bias, to which the
    # softmax is invariant) moves by +-lr on either side.
    lr = learner.config.lr
    for (name, got), (_, want) in zip(
        learner.model.named_parameters(), twin.model.named_parameters(), strict=True
    ):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad, want.grad, atol=1e-6, rtol=1e-5, msg=name)
        torch.testing.assert_close(got, want, atol=2 * lr, rtol=0, msg=name)


def test_prp_without_correction_runs_no_forward_for_weights(zoo_dir: Path) -> None:
    config = RunConfig.from_dict(
        {
            "pool": [{"name": n, "model": f"zoo:{m}"} for n, m in POOL.items()],
            "regime": "prp",
            "prp": {"k_peer": 2, "is_correction": False},
        }
    )
    source, learner = _policy("llama", zoo_dir, config), _policy("qwen", zoo_dir, config)
    problems = [Problem(id="p1", prompt="Compute 1+1.", answer="2")]
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "qwen", {n: zoo_dir / m for n, m in POOL.items()})
    record = StepRecord("llama", 1, ("p1",), topics=prp.publish(source, peer_rollouts, step=1))
    scored = _count_scored_rows(learner.model)
    step = prp.learn(learner, own_rollouts, [record], step=1)
    assert step.metrics[IS_WEIGHT_MEAN] == 1.0
    learner.train_step(step.batch)
    assert scored == []

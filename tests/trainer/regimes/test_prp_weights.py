"""PRP's importance weights live in the regime (trainer/regimes/prp/weights.py): the hook
:class:`ImportanceWeights` computes ``w_t = min(pi_old(t) / mu(t), c_bar)`` of the peer
tokens from the log-probs the update has in hand and the policy applies them per token
like any given ``token_weights``.

The hook on tensors first (no model), then through a real tiny policy's update."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer.batch import LearnerBatch, UpdateTensors, build_sequences
from trainer.config import RunConfig
from trainer.core import ObjectiveInputs
from trainer.regimes.prp.weights import (
    ImportanceWeights,
    truncated_importance_weights,
    truncated_is_weights,
)

# Two own samples and two peer samples (rows 2 and 3) of 2, 1, 3 and 2 response tokens.
PROMPTS = [[1, 5], [1, 6, 7], [1, 8], [1, 9]]
RESPONSES = [[12, 13], [14], [15, 16, 17], [18, 19]]
MU = [None, None, [-1.0, -2.0, -0.5], [-3.0, -0.1]]
C_BAR = 1.5


def test_the_weights_are_the_truncated_ratio_of_pi_old_to_mu() -> None:
    old = torch.tensor([[-1.0, -1.0, -2.0, 0.0]])
    mu = torch.tensor([[-1.0, -2.0, -1.0, -200.0]])
    weights = truncated_importance_weights(old, mu, C_BAR)
    # ratio 1, e (truncated at 1.5), 1/e, e^200 (log-ratio bounded at 50, then truncated).
    assert weights[0].tolist() == pytest.approx([1.0, C_BAR, math.exp(-1.0), C_BAR])
    assert torch.isfinite(truncated_importance_weights(old, mu, math.inf)).all()
    # The list form (weights read before the update) is the same function.
    assert truncated_is_weights([-1.0, -1.0, -2.0], [-1.0, -2.0, -1.0], C_BAR, True) == (
        pytest.approx(weights[0, :3].tolist())
    )
    assert truncated_is_weights([-1.0, -2.0], [0.0, 0.0], C_BAR, False) == [1.0, 1.0]


def _tensors(batch: LearnerBatch, old_logp: torch.Tensor | None) -> UpdateTensors:
    _, _, response_mask = build_sequences(batch.prompt_ids, batch.response_ids, pad_id=0)
    return UpdateTensors(
        batch=batch,
        objective="grpo",
        response_mask=response_mask,
        old_logp=old_logp,
        token_weights=None,
        device=torch.device("cpu"),
    )


def _batch(token_weights: list[list[float] | None] | None = None) -> LearnerBatch:
    hook = ImportanceWeights(MU, C_BAR)
    weights = [None] * 4 if token_weights is None else token_weights
    return LearnerBatch(PROMPTS, RESPONSES, torch.zeros(4), weights, hooks=[hook])


def _expected(old_logp: torch.Tensor, mask: torch.Tensor, row: int) -> list[float]:
    old = old_logp[row][mask[row].bool()].tolist()
    mu = MU[row]
    assert mu is not None
    return truncated_is_weights(old, mu, C_BAR, True)


def test_with_old_log_probs_in_hand_the_hook_weighs_the_peer_tokens_before_the_update() -> None:
    batch = _batch()
    hook = batch.hook(ImportanceWeights)
    assert hook is not None and hook.pending(batch) == [2, 3]
    old_logp = -torch.rand(4, 4)  # [N, L-1]: the longest is 2 + 3 tokens
    tensors = _tensors(batch, old_logp)
    hook.prepare(tensors)
    weights = tensors.token_weights
    assert weights is not None and weights.shape == (4, 4)
    mask = tensors.response_mask
    for row in (0, 1):  # own samples: weight 1
        assert weights[row].tolist() == [1.0] * 4
    for row in (2, 3):
        assert weights[row][mask[row].bool()].tolist() == pytest.approx(
            _expected(old_logp, mask, row)
        )
        assert weights[row][~mask[row].bool()].tolist() == [1.0] * int((mask[row] == 0).sum())
    # No forward of the update changes them (they were written already) ...
    hook.micro_batch(slice(0, 4), slice(0, 4), torch.zeros(4, 4), _inputs(tensors))
    assert torch.equal(tensors.token_weights, weights)
    # ... and after it they are the batch's token weights, nothing is pending any more.
    assert hook.finish(tensors) == {}
    assert batch.token_weights[:2] == [None, None]
    for row in (2, 3):
        assert batch.token_weights[row] == pytest.approx(_expected(old_logp, mask, row))
    assert hook.pending(batch) == []


def _inputs(tensors: UpdateTensors) -> ObjectiveInputs:
    return ObjectiveInputs(
        mask=tensors.response_mask,
        advantages=torch.zeros(4),
        token_weights=tensors.token_weights,
    )


def test_in_a_single_pass_the_hook_weighs_each_micro_batch_from_its_own_forward() -> None:
    batch = _batch()
    hook = batch.hook(ImportanceWeights)
    assert hook is not None
    tensors = _tensors(batch, None)
    hook.prepare(tensors)
    assert tensors.token_weights is not None
    assert tensors.token_weights.tolist() == [[1.0] * 4] * 4  # nothing to weigh by yet
    inputs = _inputs(tensors)
    logp = -torch.rand(4, 4)  # each micro-batch's forward, detached
    # Micro-batch rows 0-2 scored from column 1 on, then row 3 from column 0 on: the hook
    # writes through the views the objective reads.
    for rows, columns in ((slice(0, 3), slice(1, 4)), (slice(3, 4), slice(0, 4))):
        micro = inputs.rows(rows, columns.stop, start=columns.start)
        hook.micro_batch(rows, columns, logp[rows, columns], micro)
        assert micro.token_weights is not None
    hook.finish(tensors)
    mask = tensors.response_mask
    for row in (2, 3):
        assert batch.token_weights[row] == pytest.approx(_expected(logp, mask, row))
    assert batch.token_weights[:2] == [None, None]


def test_given_weights_are_not_weighed_again() -> None:
    """A sample whose weights the batch gives (PRP read its metrics first, with a forward of
    its own) keeps them; only the others are pending."""
    batch = _batch([None, None, [0.5, 0.25, 1.0], None])
    hook = batch.hook(ImportanceWeights)
    assert hook is not None and hook.pending(batch) == [3]
    old_logp = -torch.rand(4, 4)
    tensors = _tensors(batch, old_logp)
    tensors.token_weights = torch.ones(4, 4)
    tensors.token_weights[2, 1:4] = torch.tensor([0.5, 0.25, 1.0])  # as the policy scatters
    hook.prepare(tensors)
    hook.finish(tensors)
    assert batch.token_weights[2] == [0.5, 0.25, 1.0]
    assert batch.token_weights[3] == pytest.approx(_expected(old_logp, tensors.response_mask, 3))


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_update_applies_the_hooks_weights_per_token_as_given_weights(
    zoo_dir: Path, epochs: int
) -> None:
    """With ``mu`` far below or above ``log pi_old`` every weight is exactly ``c_bar`` or 0,
    whatever the policy scores: the update with the hook equals, bit for bit, the update
    with those weights given, and differs from the unweighted one."""
    config = RunConfig.from_dict(
        {"pool": [{"name": "a", "model": "zoo:tiny-llama-char"}], "grpo": {"epochs": epochs}}
    )
    low, high = -1e4, 1e4
    mu: list[list[float] | None] = [None, None, [low, high, low], [high, low]]
    given: list[list[float] | None] = [None, None, [C_BAR, 0.0, C_BAR], [0.0, C_BAR]]
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    hooked = LearnerBatch(
        PROMPTS, RESPONSES, advantages, [None] * 4, hooks=[ImportanceWeights(mu, C_BAR)]
    )
    weighted = LearnerBatch(PROMPTS, RESPONSES, advantages, list(given))
    plain = LearnerBatch(PROMPTS, RESPONSES, advantages, [None] * 4)
    policies = [zoo_policy("a", "tiny-llama-char", zoo_dir, config) for _ in range(3)]
    results = [
        policy.train_step(batch)
        for policy, batch in zip(policies, (hooked, weighted, plain), strict=True)
    ]
    assert hooked.token_weights == given  # what the update used, written back
    assert results[0] == results[1]
    for a, b in zip(policies[0].model.parameters(), policies[1].model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert results[0] != results[2]

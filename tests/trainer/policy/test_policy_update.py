"""The update is plumbing (issue 19): one call of the named objective per micro-batch,
auxiliary terms from the batch summed generically and reported under their own metric.

A real tiny zoo policy; the numbers come from the policy's own scoring."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.objective_spy import objective_spy
from trainer import metrics as m
from trainer import policy as policy_module
from trainer.config import GRPOConfig, PolicyConfig
from trainer.policy import AuxTerm, LearnerBatch, Policy, first_scored_column
from trainer.tasks import get_reward

PROMPTS = [[1, 5, 6], [1, 7], [1, 8, 9, 10], [1, 11]] * 2
RESPONSES = [[12, 13], [14], [15, 16, 17], [18, 19]] * 2
AUX_PROMPTS = [[1, 20], [1, 21, 22], [1, 23]]
AUX_RESPONSES = [[24, 25, 26], [27], [28, 29]]


def _policy(
    zoo_dir: Path, micro_batch_size: int = 3, update_prefix_reuse: bool = True, **grpo: Any
) -> Policy:
    model_dir = zoo_dir / "tiny-llama-char"
    torch.manual_seed(0)
    config = PolicyConfig(
        name="a", model=str(model_dir), lr=1e-3, micro_batch_size=micro_batch_size,
        update_prefix_reuse=update_prefix_reuse,
    )  # fmt: skip
    return Policy(
        config, GRPOConfig(**grpo), model_dir=model_dir, tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
    )  # fmt: skip


def _batch(*terms: AuxTerm) -> LearnerBatch:
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5] * 2)
    return LearnerBatch(PROMPTS, RESPONSES, advantages, aux_terms=list(terms))


def _nll(coef: float = 0.1, metric: str = "test/nll") -> AuxTerm:
    return AuxTerm(
        loss="nll", prompt_ids=AUX_PROMPTS, response_ids=AUX_RESPONSES, coef=coef, metric=metric
    )


@pytest.fixture
def objective_calls() -> Iterator[list[int]]:
    """The rows of every call of the ``grpo`` objective."""
    calls: list[int] = []
    with objective_spy("grpo", lambda kwargs: calls.append(int(kwargs["inputs"].mask.shape[0]))):
        yield calls


def test_the_update_calls_the_objective_once_per_micro_batch(
    zoo_dir: Path, objective_calls: list[int]
) -> None:
    # 8 samples, 2 mini-batches of 4, micro-batches of 3, 2 epochs: [3, 1] x 4.
    policy = _policy(zoo_dir, epochs=2, mini_batches=2)
    policy.train_step(_batch(_nll()))
    assert objective_calls == [3, 1] * 4


def test_an_auxiliary_term_reports_its_token_mean_under_its_own_metric(zoo_dir: Path) -> None:
    # One pass of one mini-batch: the term is scored before the only optimizer step, so
    # its value is the initial policy's token-mean NLL of the auxiliary responses, at
    # temperature 1 (the policy samples at temperature 1 here).
    policy = _policy(zoo_dir, micro_batch_size=2)
    scored = policy.response_logprobs(AUX_PROMPTS, AUX_RESPONSES)
    expected = -sum(sum(row) for row in scored) / sum(len(row) for row in scored)
    metrics = policy.train_step(_batch(_nll(metric="test/nll")))
    assert metrics["test/nll"] == pytest.approx(expected, abs=1e-5)
    assert m.GRAD_NORM in metrics and "sgt/nll" not in metrics


def test_two_terms_add_up_and_report_each(zoo_dir: Path) -> None:
    # The same NLL twice with weights 0.04 and 0.06 is one NLL of weight 0.1: the same
    # gradient (one optimizer step from the same weights; it stays on the parameters).
    one, two = _policy(zoo_dir), _policy(zoo_dir)
    single = one.train_step(_batch(_nll(coef=0.1, metric="test/nll")))
    double = two.train_step(
        _batch(_nll(coef=0.04, metric="test/first"), _nll(coef=0.06, metric="test/second"))
    )
    assert double["test/first"] == double["test/second"] == single["test/nll"]
    for (name, a), (_, b) in zip(
        one.model.named_parameters(), two.model.named_parameters(), strict=True
    ):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, atol=1e-7, rtol=1e-5, msg=name)


@pytest.mark.parametrize(
    "term",
    [
        AuxTerm("nll", AUX_PROMPTS, AUX_RESPONSES, 0.0, "test/nll"),
        AuxTerm("nll", [], [], 0.1, "test/nll"),
    ],
    ids=["coef-0", "no-sequences"],
)
def test_an_empty_or_zero_weight_term_changes_nothing_to_the_last_bit(
    zoo_dir: Path, term: AuxTerm
) -> None:
    plain, with_term = _policy(zoo_dir), _policy(zoo_dir)
    expected = plain.train_step(_batch())
    assert with_term.train_step(_batch(term)) == expected
    for (name, a), (_, b) in zip(
        plain.model.state_dict().items(), with_term.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_an_unknown_auxiliary_loss_is_refused_before_any_update(zoo_dir: Path) -> None:
    policy = _policy(zoo_dir)
    before = {name: p.clone() for name, p in policy.model.named_parameters()}
    term = AuxTerm("kl", AUX_PROMPTS, AUX_RESPONSES, 0.1, "test/kl")
    with pytest.raises(KeyError, match="unknown auxiliary loss 'kl'; known: nll"):
        policy.train_step(_batch(term))
    for name, p in policy.model.named_parameters():
        assert torch.equal(p, before[name]), name


# --- only response positions get logits (issue 23) ----------------------------------------
def test_the_first_scored_column_is_the_earliest_response_token() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 1]])

    assert first_scored_column(mask) == 1
    assert first_scored_column(mask[[0, 2]]) == 2
    assert first_scored_column(torch.zeros(2, 4, dtype=torch.long)) == 0


def test_scoring_only_response_positions_gives_the_same_update(
    zoo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KL on (the reference's log-probs are scored the same way) and an aux NLL term.
    restricted, full = _policy(zoo_dir, kl_coef=0.05), _policy(zoo_dir, kl_coef=0.05)
    metrics = restricted.train_step(_batch(_nll()))
    monkeypatch.setattr(policy_module, "first_scored_column", lambda mask: 0)
    reference = full.train_step(_batch(_nll()))

    assert metrics.keys() == reference.keys()
    for key, value in reference.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for a, b in zip(restricted.model.parameters(), full.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


def _lm_head_widths(policy: Policy) -> list[int]:
    """The positions the LM head saw in each forward of one update of :func:`_batch`."""
    widths: list[int] = []
    head = policy.model.get_output_embeddings()
    handle = head.register_forward_hook(lambda module, args, out: widths.append(args[0].shape[1]))
    try:
        policy.train_step(_batch())
    finally:
        handle.remove()
    return widths


def test_the_lm_head_sees_response_positions_only(zoo_dir: Path) -> None:
    # Whole rows: one micro-batch of the 8 sequences: the longest is 4 + 3 = 7 tokens,
    # the earliest response token is the 3rd (prompts of 2 tokens): target columns 1..5,
    # plus the last position the forward cuts off: 6 positions instead of 7.
    assert _lm_head_widths(_policy(zoo_dir, micro_batch_size=8, update_prefix_reuse=False)) == [6]
    # Shared prompts: the 4 distinct prompts' encoding keeps one position, then each
    # row's last prompt token + response predicts its response: 3 positions at most.
    assert _lm_head_widths(_policy(zoo_dir, micro_batch_size=8)) == [1, 3]

"""The update encodes each prompt once for all its samples (issue 35,
``PolicyConfig.update_prefix_reuse``): the plan on hand-made rows, then on every zoo model
the same log-probs, entropies, loss, metrics and gradients as whole rows, to float
rounding."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch

from trainer import metrics as m
from trainer.batch import build_sequences
from trainer.config import GRPOConfig, PolicyConfig
from trainer.policy import LearnerBatch, Policy
from trainer.shared_prompts import plan
from trainer.tasks import get_reward

ZOO_MODELS = ("tiny-llama-char", "tiny-qwen-bpe", "tiny-gpt2-unigram")
PAD = 0


def _sequences(prompts: list[list[int]], responses: list[list[int]]):
    return build_sequences(prompts, responses, PAD)


def test_the_plan_groups_rows_by_prompt_and_keeps_each_response_in_its_columns() -> None:
    prompts = [[1, 5, 6], [1, 7], [1, 5, 6], [1, 7]]
    responses = [[12, 13], [14], [15, 16, 17], [18, 19]]
    input_ids, attention_mask, response_mask = _sequences(prompts, responses)

    shared = plan(input_ids, attention_mask, response_mask, PAD)

    assert shared is not None
    assert shared.owner.tolist() == [0, 1, 0, 1]
    # Each distinct prompt but its last token, right-padded.
    assert shared.prefix_ids.tolist() == [[1, 5], [1, PAD]]
    assert shared.prefix_mask.tolist() == [[1, 1], [1, 0]]
    # The last prompt token, then the response.
    assert shared.segment_ids.tolist() == [
        [6, 12, 13, PAD],
        [7, 14, PAD, PAD],
        [6, 15, 16, 17],
        [7, 18, 19, PAD],
    ]
    assert shared.segment_mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert shared.segment_positions.tolist() == [
        [2, 3, 4, 0],
        [1, 2, 0, 0],
        [2, 3, 4, 5],
        [1, 2, 3, 0],
    ]
    assert shared.targets.tolist() == [[12, 13, PAD], [14, PAD, PAD], [15, 16, 17], [18, 19, PAD]]
    # The frame: target columns from the first response token (column 1) to the longest
    # row's last (column 4); a response token's value lands where the row's mask has it.
    assert (shared.start, shared.width, shared.frame_width) == (1, 6, 4)
    values = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    frame = shared.to_frame(values)
    assert frame.tolist() == [
        [0.0, 1.0, 2.0, 0.0],
        [3.0, 0.0, 0.0, 0.0],
        [0.0, 4.0, 5.0, 6.0],
        [7.0, 8.0, 0.0, 0.0],
    ]
    scored = response_mask[:, shared.start : shared.width - 1].bool()
    assert torch.equal(frame != 0, scored)


@pytest.mark.parametrize(
    ("prompts", "responses", "why"),
    [
        ([[1, 5], [1, 6], [1, 7]], [[8], [9], [10]], "no two rows share a prompt"),
        ([[1], [1]], [[8], [9]], "a one-token prompt has no prefix"),
        ([[1, 5], [1, 5]], [[8], []], "a row with no response token scores nothing"),
    ],
)
def test_no_plan_where_sharing_saves_nothing_or_does_not_apply(
    prompts: list[list[int]], responses: list[list[int]], why: str
) -> None:
    assert plan(*_sequences(prompts, responses), PAD) is None, why


def _policy(zoo_dir: Path, zoo_id: str, **config: object) -> Policy:
    model_dir = zoo_dir / zoo_id
    torch.manual_seed(0)
    policy = Policy(
        PolicyConfig(name="a", model=str(model_dir), group_size=4, lr=1e-3, **config),  # type: ignore[arg-type]
        GRPOConfig(kl_coef=0.05, entropy_coef=0.01),
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
    )
    # Move the policy off its reference, so the KL term and its gradient are not zero.
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    return policy


def _batch(policy: Policy, long_prompt: bool = False) -> LearnerBatch:
    """4 prompts x G=4 of different lengths, responses of 1-9 tokens. ``long_prompt``:
    prompt 2 is 112 tokens with one-token responses and row 0's response 20 tokens, so
    that on the padded slots of prompt 2's rows the whole sequence's positions would run
    to 131, past GPT-2's 128 (the plan puts padding at position 0)."""
    texts = ["1+1=", "12+30=", "7*8=", "100-1="]
    prompts = [policy.tokenizer(text)["input_ids"] for text in texts for _ in range(4)]
    generator = torch.Generator().manual_seed(1)
    lengths = [1 + (row * 5) % 9 for row in range(len(prompts))]
    if long_prompt:
        long = torch.randint(3, 30, (112,), generator=generator).tolist()
        prompts[8:12] = [long] * 4
        lengths[8:12] = [1] * 4
        lengths[0] = 20
    responses = [torch.randint(3, 30, (n,), generator=generator).tolist() for n in lengths]
    advantages = torch.randn(len(prompts), generator=generator)
    return LearnerBatch(prompts, responses, advantages)


def _update(policy: Policy, batch: LearnerBatch) -> tuple[dict[str, float], torch.Tensor]:
    """One update's metrics and the gradients it stepped with (learning rate 0 leaves
    the weights as they were)."""
    for group in policy.optimizer.param_groups:
        group["lr"] = 0.0
    grads: list[torch.Tensor] = []
    original = policy.optimizer.step

    def step(*args: object, **kwargs: object) -> object:
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters()]))
        return original(*args, **kwargs)

    policy.optimizer.step = step  # type: ignore[method-assign]
    try:
        metrics = policy.train_step(batch)
    finally:
        policy.optimizer.step = original  # type: ignore[method-assign]
    return metrics, torch.stack(grads)


@pytest.mark.parametrize("zoo_id", ZOO_MODELS)
@pytest.mark.parametrize("micro_batch_size", [16, 6])
def test_an_update_with_shared_prompts_equals_one_of_whole_rows(
    zoo_dir: Path, zoo_id: str, micro_batch_size: int
) -> None:
    # micro_batch_size 6 splits groups of 4 across micro-batches.
    shared = _policy(zoo_dir, zoo_id, micro_batch_size=micro_batch_size)
    whole = _policy(zoo_dir, zoo_id, micro_batch_size=micro_batch_size, update_prefix_reuse=False)
    assert all(
        torch.equal(a, b)
        for a, b in zip(shared.model.parameters(), whole.model.parameters(), strict=True)
    )
    batch = _batch(shared, long_prompt=zoo_id == "tiny-gpt2-unigram")
    widths: list[int] = []
    hook = shared.model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: widths.append(args[0].shape[0])
    )
    try:
        shared_metrics, shared_grads = _update(shared, batch)
    finally:
        hook.remove()
    whole_metrics, whole_grads = _update(whole, batch)

    # The shared path ran: per micro-batch, one encoding of its distinct prompts (one
    # row each), then its rows. Micro-batches of 6 hold prompts 0,0,0,0,1,1 /
    # 1,1,2,2,2,2 / 3,3,3,3.
    assert widths == ([4, 16] if micro_batch_size == 16 else [2, 6, 2, 6, 1, 4])
    assert shared_metrics.keys() == whole_metrics.keys()
    for key in (m.PG_LOSS, m.KL_LOSS, m.ENTROPY, m.GRAD_NORM):
        assert shared_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-5, abs=1e-7), key
    assert whole_metrics[m.KL_LOSS] > 0
    relative = (shared_grads - whole_grads).norm() / whole_grads.norm()
    assert float(relative) < 1e-5


@pytest.mark.parametrize("zoo_id", ZOO_MODELS)
def test_reference_log_probs_with_shared_prompts_equal_whole_rows(
    zoo_dir: Path, zoo_id: str
) -> None:
    policy = _policy(zoo_dir, zoo_id)
    batch = _batch(policy)
    input_ids, attention_mask, response_mask = policy._sequences(
        batch.prompt_ids, batch.response_ids
    )
    shared = policy._log_probs(policy.reference, input_ids, attention_mask, response_mask)
    policy.config = dataclasses.replace(policy.config, update_prefix_reuse=False)
    whole = policy._log_probs(policy.reference, input_ids, attention_mask, response_mask)

    scored = response_mask.bool()
    assert int(scored.sum()) == sum(len(r) for r in batch.response_ids)
    assert torch.allclose(shared[scored], whole[scored], atol=1e-5, rtol=0)
    # Nothing outside the responses is read; the shared path leaves it 0.
    assert not shared[~scored].any()


def test_gradient_checkpointing_encodes_whole_rows(zoo_dir: Path) -> None:
    policy = _policy(zoo_dir, "tiny-llama-char", gradient_checkpointing=True)
    batch = _batch(policy)
    rows: list[int] = []
    hook = policy.model.get_output_embeddings().register_forward_hook(
        lambda module, args, out: rows.append(args[0].shape[0])
    )
    try:
        reference = copy.deepcopy(policy.model.state_dict())
        policy.train_step(batch)
    finally:
        hook.remove()
    # One forward of all 16 rows (the reference is another module): no prompt encoding.
    assert rows == [16]
    assert any(
        not torch.equal(value, policy.model.state_dict()[key]) for key, value in reference.items()
    )

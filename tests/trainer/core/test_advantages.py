"""GRPO advantages against hand-computed numbers (SPEC section 3)."""

from __future__ import annotations

import statistics

import pytest
import torch

from trainer.core import grpo_advantages, grpo_advantages_from_groups


def test_two_right_two_wrong() -> None:
    # r = [1, 0, 0, 1]: mean 0.5, deviations +-0.5, unbiased var = 4 * 0.25 / 3 = 1/3,
    # std = 0.5773502692; A = +-0.5 / (0.5773502692 + 1e-6) = +-0.8660239038
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    expected = torch.tensor(
        [[0.8660239038, -0.8660239038, -0.8660239038, 0.8660239038]], dtype=torch.float64
    )
    torch.testing.assert_close(grpo_advantages(rewards), expected, atol=1e-9, rtol=0)


def test_one_right_of_four_uses_the_unbiased_std() -> None:
    # r = [1, 0, 0, 0]: mean 0.25, deviations 0.75, -0.25 x3, sum of squares
    # 0.5625 + 3 * 0.0625 = 0.75, unbiased var = 0.75 / 3 = 0.25, std = 0.5;
    # eps = 0: A = 0.75 / 0.5 = 1.5 and -0.25 / 0.5 = -0.5
    # (the biased std sqrt(0.75 / 4) = 0.4330 would give 1.7321 instead)
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    expected = torch.tensor([[1.5, -0.5, -0.5, -0.5]])
    torch.testing.assert_close(grpo_advantages(rewards, eps=0.0), expected)


def test_each_row_is_its_own_group() -> None:
    # row 0 as above with eps = 0: [1.5, -0.5, -0.5, -0.5]; row 1 is row 0 negated
    # (r = [0, 1, 1, 1]: mean 0.75, same std 0.5): [-1.5, 0.5, 0.5, 0.5]
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]])
    expected = torch.tensor([[1.5, -0.5, -0.5, -0.5], [-1.5, 0.5, 0.5, 0.5]])
    torch.testing.assert_close(grpo_advantages(rewards, eps=0.0), expected)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.3, 1e-7])
def test_a_group_with_equal_rewards_gets_exactly_zero(value: float) -> None:
    # 0.1 and 0.3 are not exact in binary: mean and std could round to non-zero noise
    rewards = torch.full((2, 7), value)
    assert torch.equal(grpo_advantages(rewards), torch.zeros(2, 7))
    flat = rewards.flatten()
    groups = torch.arange(2).repeat_interleave(7)
    assert torch.equal(grpo_advantages_from_groups(flat, groups), torch.zeros(14))


def test_integer_rewards_are_accepted() -> None:
    # as test_one_right_of_four_uses_the_unbiased_std
    advantages = grpo_advantages(torch.tensor([[1, 0, 0, 0]]), eps=0.0)
    torch.testing.assert_close(advantages, torch.tensor([[1.5, -0.5, -0.5, -0.5]]))


def test_a_group_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 rollouts"):
        grpo_advantages(torch.tensor([[1.0], [0.0]]))
    with pytest.raises(ValueError, match=r"groups \[7\] have 1"):
        grpo_advantages_from_groups(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([3, 3, 7]))


def test_ragged_groups_by_hand() -> None:
    # group 5 = [1, 0]: mean 0.5, unbiased std sqrt(0.5 / 1) = 0.7071067812,
    #   A = +-0.5 / 0.7071067812 = +-0.7071067812
    # group 2 = [1, 1, 0]: mean 2/3, deviations 1/3, 1/3, -2/3, sum of squares 6/9,
    #   unbiased var 6/9 / 2 = 1/3, std 0.5773502692,
    #   A = (1/3) / 0.5773502692 = 0.5773502692 and -(2/3) / 0.5773502692 = -1.1547005384
    # group 9 = [0.2, 0.2]: all equal -> 0
    # ids are neither sorted nor contiguous and groups interleave
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.2, 0.2], dtype=torch.float64)
    groups = torch.tensor([5, 2, 5, 2, 2, 9, 9])
    expected = torch.tensor(
        [0.7071067812, 0.5773502692, -0.7071067812, 0.5773502692, -1.1547005384, 0.0, 0.0],
        dtype=torch.float64,
    )
    advantages = grpo_advantages_from_groups(rewards, groups, eps=0.0)
    torch.testing.assert_close(advantages, expected, atol=1e-9, rtol=0)


def test_ragged_groups_equal_dense_groups_of_the_same_size() -> None:
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 5, generator=generator)
    rewards[2] = 1.0  # one all-equal group
    rewards[4] = (rewards[4] > 0.5).float()
    dense = grpo_advantages(rewards)
    groups = torch.arange(6).repeat_interleave(5)
    order = torch.randperm(30, generator=generator)
    ragged = torch.empty(30)
    ragged[order] = grpo_advantages_from_groups(rewards.flatten()[order], groups[order])
    torch.testing.assert_close(ragged.view(6, 5), dense, atol=1e-6, rtol=1e-5)


def test_vectorised_ragged_equals_a_python_loop() -> None:
    generator = torch.Generator().manual_seed(1)
    sizes = [2, 3, 7, 4, 2, 16]
    groups = torch.arange(len(sizes)).repeat_interleave(torch.tensor(sizes))
    groups = groups[torch.randperm(groups.numel(), generator=generator)] * 10 + 3
    rewards = torch.rand(groups.numel(), generator=generator, dtype=torch.float64)
    eps = 1e-6

    expected = torch.empty_like(rewards)
    for gid in groups.unique().tolist():
        members = [i for i in range(groups.numel()) if groups[i] == gid]
        values = [rewards[i].item() for i in members]
        mean, std = statistics.fmean(values), statistics.stdev(values)
        for i in members:
            expected[i] = (rewards[i].item() - mean) / (std + eps)

    torch.testing.assert_close(grpo_advantages_from_groups(rewards, groups, eps), expected)


def test_vectorised_dense_equals_a_python_loop() -> None:
    generator = torch.Generator().manual_seed(2)
    rewards = torch.rand(5, 8, generator=generator, dtype=torch.float64)
    expected = torch.tensor(
        [
            [(r - statistics.fmean(row)) / (statistics.stdev(row) + 1e-6) for r in row]
            for row in rewards.tolist()
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(grpo_advantages(rewards), expected)


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"\[n_groups, G\]"):
        grpo_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match=r"\[N\]"):
        grpo_advantages_from_groups(torch.zeros(4), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        grpo_advantages_from_groups(torch.zeros(4), torch.zeros(4))

"""GRPO advantages (SPEC section 3) as pure tensor functions.

``A_i = (r_i - mean(r)) / (std(r) + eps)`` within each group of rollouts of one prompt,
the same ``A_i`` on every response token. ``std`` is the *unbiased* (Bessel-corrected,
divide by ``G - 1``) standard deviation, i.e. ``torch.std``'s default, as verl
(``compute_grpo_outcome_advantage``) and TRL do; hence every group needs ``G >= 2``.
A group whose rewards are all equal gets exactly 0 (checked explicitly, not left to
floating point).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from trainer.registry import Registry

AdvantageEstimator = Callable[..., Tensor]
"""``(rewards: Tensor[n_groups, G], *, eps: float) -> Tensor[n_groups, G]``."""

ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def _as_float(rewards: Tensor) -> Tensor:
    return rewards if rewards.is_floating_point() else rewards.to(torch.get_default_dtype())


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """Group-normalised advantages for equally sized groups.

    Args:
        rewards: ``Tensor[n_groups, G]``, one row per prompt, ``G >= 2`` rollouts each.
            Integer/bool rewards are converted to the default float dtype.
        eps: added to the standard deviation before dividing.

    Returns:
        ``Tensor[n_groups, G]``: ``(r - mean) / (std + eps)`` per row, with ``std`` the
        unbiased standard deviation (``torch.std`` default, as verl/TRL). Rows whose
        rewards are all equal are exactly 0.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [n_groups, G], got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < 2:
        raise ValueError(
            f"GRPO needs at least 2 rollouts per group (unbiased std), got G={rewards.shape[1]}"
        )
    rewards = _as_float(rewards)
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, keepdim=True)
    advantages = (rewards - mean) / (std + eps)
    all_equal = (rewards == rewards[:, :1]).all(dim=-1, keepdim=True)
    return torch.where(all_equal, torch.zeros_like(advantages), advantages)


def grpo_advantages_from_groups(rewards: Tensor, group_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """Group-normalised advantages for ragged groups given by a group id per rollout.

    Used when groups have different sizes (e.g. a policy's own rollouts pooled with its
    peers'). Vectorised with ``index_add``/``scatter_reduce``; matches
    :func:`grpo_advantages` (up to float rounding) when all groups have the same size.

    Args:
        rewards: ``Tensor[N]``, one reward per rollout, in any order.
        group_ids: ``Tensor[N]`` (long), the group of each rollout; any integer values,
            not necessarily contiguous or sorted. Every group needs >= 2 rollouts.
        eps: added to the standard deviation before dividing.

    Returns:
        ``Tensor[N]``: ``(r_i - mean_g) / (std_g + eps)`` with ``g = group_ids[i]`` and
        ``std_g`` the unbiased standard deviation of group ``g``; exactly 0 for every
        rollout of a group whose rewards are all equal.
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            "rewards and group_ids must both be [N], got "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    rewards = _as_float(rewards)
    if rewards.numel() == 0:
        return rewards.clone()
    unique_ids, index = torch.unique(group_ids, return_inverse=True)
    n_groups = unique_ids.numel()
    counts = torch.bincount(index, minlength=n_groups)
    if bool((counts < 2).any()):
        lonely = unique_ids[counts < 2].tolist()
        raise ValueError(
            f"GRPO needs at least 2 rollouts per group (unbiased std); groups {lonely} have 1"
        )
    zeros = rewards.new_zeros(n_groups)
    mean = zeros.index_add(0, index, rewards) / counts.to(rewards.dtype)
    centred = rewards - mean[index]
    var = zeros.index_add(0, index, centred * centred) / (counts - 1).to(rewards.dtype)
    std = var.sqrt()
    advantages = centred / (std[index] + eps)
    group_max = zeros.scatter_reduce(0, index, rewards, reduce="amax", include_self=False)
    group_min = zeros.scatter_reduce(0, index, rewards, reduce="amin", include_self=False)
    all_equal = (group_max == group_min)[index]
    return torch.where(all_equal, torch.zeros_like(advantages), advantages)

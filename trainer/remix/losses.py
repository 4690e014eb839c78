"""ReMix's objective (SPEC 5) as pure tensor functions.

Shapes and masking follow :mod:`trainer.core.losses`: ``N`` sequences x ``T`` response
positions, ``mask`` true on response tokens, masked values never matter.

Three log-prob tensors describe each token:

- ``logp``: ``log pi_theta``, the policy being optimised (with gradient);
- ``behaviour_logp``: ``log pi_{k-i}``, the version that sampled the token (``i = 0`` for
  a fresh sample, whose behaviour policy is ``pi_k``);
- ``current_logp``: ``log pi_k``, the policy at the start of this step, before any of
  the batch's updates (no gradient). For a fresh sample it *is* its behaviour log-prob.

``pi_prev`` of the KL-convex constraint is ``pi_k`` too: "the previous policy" is the one
the batch's updates started from, i.e. the behaviour policy of the fresh samples. So the
``(1 - lambda)`` term keeps the UTD's ``m`` updates close to where the step began, while
``lambda`` keeps the whole run close to the base (reference) policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.core.losses import KL_ESTIMATORS, LOSS_AGGREGATIONS, _bool_mask, _masked, token_mean


@dataclass(frozen=True)
class RemixObjective:
    """What a ReMix step asks of the policy update besides the GRPO settings."""

    kl_lambda: float
    """lambda(t) of this step."""
    c_bar: float
    updates_per_batch: int
    """m: passes of updates over the batch (each split into ``grpo.mini_batches``)."""


def vtrace_truncation(q: Tensor, c_bar: float = 1.0) -> Tensor:
    """V-trace-style truncated importance weight ``min(q_t, c_bar)``, per token."""
    if c_bar <= 0:
        raise ValueError(f"c_bar must be > 0, got {c_bar}")
    return torch.clamp(q, max=c_bar)


def _per_token(advantages: Tensor, like: Tensor) -> Tensor:
    if advantages.dim() == 1:
        if advantages.shape[0] != like.shape[0]:
            raise ValueError(
                f"advantages {tuple(advantages.shape)} do not match logp {tuple(like.shape)}"
            )
        return advantages.unsqueeze(-1).expand_as(like)
    if advantages.shape != like.shape:
        raise ValueError(
            f"advantages must be [N] or [N, T]; got {tuple(advantages.shape)} "
            f"for logp {tuple(like.shape)}"
        )
    return advantages


@dataclass(frozen=True)
class MixSurrogate:
    """The mix-policy surrogate: ``loss`` (with graph), ``clip_frac`` and the per-token
    ratio ``r_t = pi_theta / pi_behaviour`` (``[N, T]``, no graph) for diagnostics."""

    loss: Tensor
    clip_frac: Tensor
    ratio: Tensor


def mix_policy_surrogate(
    logp: Tensor,
    behaviour_logp: Tensor,
    current_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    c_bar: float = 1.0,
    replayed: Tensor | None = None,
    agg: str = "token-mean",
    token_weights: Tensor | None = None,
) -> MixSurrogate:
    """Generalized PPO clipped surrogate with sample reuse (SPEC 5).

    Per token, with ``r_t = pi_theta / pi_{k-i}`` and ``q_t = pi_k / pi_{k-i}``:
    ``L = -min(r_t A_t, clip(r_t, q_t - eps, q_t + eps) A_t)``, where
    ``A_t = A * min(q_t, c_bar)`` on replayed samples (V-trace-style truncation) and
    ``A_t = A`` on fresh ones. For a fresh sample ``q_t = 1`` and this is exactly
    :func:`trainer.core.clipped_surrogate`. Where the clipped branch is strictly active
    the token gets no gradient.

    Args:
        logp: ``Tensor[N, T]`` log-probs under the policy being optimised (with grad).
        behaviour_logp: ``Tensor[N, T]`` log-probs under the version that sampled each
            sample (for fresh samples: ``current_logp``).
        current_logp: ``Tensor[N, T]`` log-probs under ``pi_k`` (start of the step).
        advantages: ``Tensor[N]`` or ``Tensor[N, T]``.
        mask: ``Tensor[N, T]`` bool or 0/1.
        clip_eps: half-width ``eps`` of the clip range around ``q_t``.
        c_bar: truncation of the replayed samples' importance weight.
        replayed: ``Tensor[N]`` bool, true on replayed samples (default: none).
        agg: name in :data:`trainer.core.LOSS_AGGREGATIONS`.
        token_weights: optional ``Tensor[N, T]`` (no grad) multiplying each token's loss
            (PRP's peer weights), as in :func:`trainer.core.clipped_surrogate`.

    Returns:
        :class:`MixSurrogate`; ``clip_frac`` is a token-mean whatever ``agg`` is.
    """
    mask = _bool_mask(mask, logp)
    advantages = _per_token(advantages, logp)
    log_ratio = _masked(logp, mask) - _masked(behaviour_logp, mask)
    ratio = torch.exp(log_ratio)
    q = torch.exp(_masked(current_logp, mask) - _masked(behaviour_logp, mask)).detach()
    advantages = _masked(advantages.to(log_ratio.dtype), mask)
    if replayed is not None:
        truncate = replayed.to(torch.bool).unsqueeze(-1).expand_as(mask) & mask
        advantages = torch.where(truncate, advantages * vtrace_truncation(q, c_bar), advantages)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, q - clip_eps, q + clip_eps)
    clipped_active = clipped > unclipped
    per_token = torch.where(clipped_active, clipped, unclipped)
    if token_weights is not None:
        per_token = per_token * _masked(token_weights.detach().to(per_token.dtype), mask)
    loss = LOSS_AGGREGATIONS.get(agg)(per_token, mask)
    clip_frac = token_mean(clipped_active.to(log_ratio.dtype), mask).detach()
    return MixSurrogate(loss, clip_frac, ratio.detach())


def kl_convex(
    logp: Tensor,
    base_logp: Tensor,
    prev_logp: Tensor,
    kl_lambda: float,
    *,
    clamp: float = 10.0,
    estimator: str = "k3",
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token ``lambda KL(pi_theta || pi_base) + (1 - lambda) KL(pi_theta || pi_prev)``.

    Each KL is the per-token estimate of ``estimator`` (k3, clamped). Returns
    ``(convex, kl_base, kl_prev)``, all ``Tensor[N, T]`` and unmasked.
    """
    if not 0.0 <= kl_lambda <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {kl_lambda}")
    kl_fn = KL_ESTIMATORS.get(estimator)
    kl_base = kl_fn(logp, base_logp, clamp=clamp)
    kl_prev = kl_fn(logp, prev_logp, clamp=clamp)
    return kl_lambda * kl_base + (1.0 - kl_lambda) * kl_prev, kl_base, kl_prev


@dataclass(frozen=True)
class RemixLossOutput:
    """``loss`` to backpropagate and its parts (``Tensor[]``; ``ratio`` is ``[N, T]``).

    ``kl_loss`` is the aggregated KL-convex term (``actor/kl_loss``); ``kl_base`` and
    ``kl_prev`` its two KLs (``remix/kl_base``, ``remix/kl_prev``), without graph.
    """

    loss: Tensor
    pg_loss: Tensor
    kl_loss: Tensor
    kl_base: Tensor
    kl_prev: Tensor
    entropy: Tensor
    clip_frac: Tensor
    ratio: Tensor


def remix_policy_loss(
    *,
    logp: Tensor,
    behaviour_logp: Tensor,
    current_logp: Tensor,
    base_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    replayed: Tensor | None,
    entropy: Tensor | None,
    clip_eps: float,
    c_bar: float,
    kl_coef: float,
    kl_lambda: float,
    kl_clamp: float,
    entropy_coef: float,
    agg: str,
    kl_estimator: str = "k3",
    token_weights: Tensor | None = None,
) -> RemixLossOutput:
    """ReMix's loss: ``L_mix + kl_coef * KL_convex - entropy_coef * entropy``.

    ``L_mix`` is :func:`mix_policy_surrogate`; ``KL_convex`` is :func:`kl_convex` with
    ``pi_base`` = ``base_logp`` (the reference) and ``pi_prev`` = ``current_logp``
    (``pi_k``), aggregated over ``mask`` with ``agg`` like every other term.
    """
    if entropy is None and entropy_coef != 0:
        raise ValueError(
            f"entropy_coef is {entropy_coef} but entropy is None; pass entropy or set 0"
        )
    aggregate_fn = LOSS_AGGREGATIONS.get(agg)
    bool_mask = _bool_mask(mask, logp)
    surrogate = mix_policy_surrogate(
        logp,
        behaviour_logp,
        current_logp,
        advantages,
        bool_mask,
        clip_eps=clip_eps,
        c_bar=c_bar,
        replayed=replayed,
        agg=agg,
        token_weights=token_weights,
    )
    convex, kl_base, kl_prev = kl_convex(
        _masked(logp, bool_mask),
        _masked(base_logp, bool_mask),
        _masked(current_logp, bool_mask),
        kl_lambda,
        clamp=kl_clamp,
        estimator=kl_estimator,
    )
    kl_loss = aggregate_fn(convex, bool_mask)
    loss = surrogate.loss
    if kl_coef != 0:
        loss = loss + kl_coef * kl_loss
    entropy_mean = surrogate.loss.new_zeros(())
    if entropy is not None:
        entropy_mean = aggregate_fn(entropy, bool_mask)
        if entropy_coef != 0:
            loss = loss - entropy_coef * entropy_mean
    return RemixLossOutput(
        loss=loss,
        pg_loss=surrogate.loss,
        kl_loss=kl_loss,
        kl_base=aggregate_fn(kl_base, bool_mask).detach(),
        kl_prev=aggregate_fn(kl_prev, bool_mask).detach(),
        entropy=entropy_mean,
        clip_frac=surrogate.clip_frac,
        ratio=surrogate.ratio,
    )

"""GRPO policy losses (SPEC section 3) as pure tensor functions behind name registries.

Shapes: ``N`` sequences (rollouts) x ``T`` response positions (x ``V`` vocabulary for
logits). ``mask`` is ``[N, T]``, bool or 0/1 float, true/1 on response tokens; any
nonzero value counts as a token. Values at masked positions never matter, not even
NaN/inf: they are replaced with ``torch.where`` (never multiplied by 0), before any
arithmetic that could turn them into NaN gradients.

The trainer builds keyword arguments from the run config and calls :func:`policy_loss`;
the names in ``LOSS_AGGREGATIONS`` and ``KL_ESTIMATORS`` are the config's values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.core.registry import Registry

LossAggregation = Callable[[Tensor, Tensor], Tensor]
"""``(values: Tensor[N, T], mask: Tensor[N, T]) -> Tensor[]``."""

KLEstimator = Callable[..., Tensor]
"""``(logp: Tensor[N, T], ref_logp: Tensor[N, T], *, clamp: float) -> Tensor[N, T]``."""

LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry("loss aggregation")
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")

DEFAULT_CHUNK_TOKENS = 1024


def _bool_mask(mask: Tensor, values: Tensor) -> Tensor:
    if mask.shape != values.shape:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)} but values have {tuple(values.shape)}"
        )
    return mask if mask.dtype == torch.bool else mask != 0


def _masked(values: Tensor, mask: Tensor) -> Tensor:
    """``values`` with 0 at masked positions (``mask`` bool); gradient 0 there."""
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))


# --- aggregation -------------------------------------------------------------------


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over every response token of the batch: ``sum(v * m) / sum(m)``.

    Args:
        values: ``Tensor[N, T]`` per-token values.
        mask: ``Tensor[N, T]`` bool or 0/1.

    Returns:
        ``Tensor[]``; 0 when the mask is empty.
    """
    mask = _bool_mask(mask, values)
    count = mask.sum().clamp(min=1).to(values.dtype)
    return _masked(values, mask).sum() / count


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean.

    Sequences without any response token are left out of the outer mean.

    Args:
        values: ``Tensor[N, T]`` per-token values.
        mask: ``Tensor[N, T]`` bool or 0/1.

    Returns:
        ``Tensor[]``: ``mean_{i: sum_t m_it > 0} (sum_t v_it m_it / sum_t m_it)``; 0 when
        the mask is empty.
    """
    mask = _bool_mask(mask, values)
    tokens_per_seq = mask.sum(dim=-1)
    seq_sums = _masked(values, mask).sum(dim=-1)
    seq_means = seq_sums / tokens_per_seq.clamp(min=1).to(values.dtype)
    has_tokens = tokens_per_seq > 0
    n_seqs = has_tokens.sum().clamp(min=1).to(values.dtype)
    return _masked(seq_means, has_tokens).sum() / n_seqs


def aggregate(values: Tensor, mask: Tensor, mode: str = "token-mean") -> Tensor:
    """Reduce per-token ``values: Tensor[N, T]`` over ``mask: Tensor[N, T]`` to ``Tensor[]``.

    ``mode`` is a name in :data:`LOSS_AGGREGATIONS` (``"token-mean"``,
    ``"seq-mean-token-mean"``); an unknown name raises ``KeyError`` listing the known ones.
    """
    return LOSS_AGGREGATIONS.get(mode)(values, mask)


# --- policy-gradient surrogate ------------------------------------------------------


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    agg: str = "token-mean",
    token_weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO/GRPO clipped surrogate loss and clip fraction.

    Per token ``rho = exp(logp - old_logp)`` and
    ``L = -min(rho * A, clip(rho, 1 - clip_eps, 1 + clip_eps) * A)``. Where the clipped
    branch is strictly the active one (verl: ``pg_losses2 > pg_losses``) the loss does not
    depend on ``logp``, so those tokens get zero gradient.

    Args:
        logp: ``Tensor[N, T]`` log-probs of the response tokens under the current policy.
        old_logp: ``Tensor[N, T]`` log-probs under the policy that sampled them.
        advantages: ``Tensor[N]`` (one per sequence, broadcast over tokens) or
            ``Tensor[N, T]``.
        mask: ``Tensor[N, T]`` bool or 0/1, true on response tokens.
        clip_eps: clipping range ``eps_clip``.
        agg: name in :data:`LOSS_AGGREGATIONS` for the loss.
        token_weights: optional ``Tensor[N, T]`` (no gradient) multiplying each token's
            surrogate: PRP's truncated importance weights on peer tokens (1 elsewhere).

    Returns:
        ``(loss: Tensor[], clip_frac: Tensor[])``; ``clip_frac`` is the token-mean (whatever
        ``agg`` is) of the indicator "clipped branch active", without gradient.
    """
    mask = _bool_mask(mask, logp)
    if advantages.dim() == 1:
        if advantages.shape[0] != logp.shape[0]:
            raise ValueError(
                f"advantages {tuple(advantages.shape)} do not match logp {tuple(logp.shape)}"
            )
        advantages = advantages.unsqueeze(-1).expand_as(logp)
    elif advantages.shape != logp.shape:
        raise ValueError(
            f"advantages must be [N] or [N, T]; got {tuple(advantages.shape)} "
            f"for logp {tuple(logp.shape)}"
        )
    log_ratio = _masked(logp, mask) - _masked(old_logp, mask)
    advantages = _masked(advantages.to(log_ratio.dtype), mask)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    clipped_active = clipped > unclipped
    per_token = torch.where(clipped_active, clipped, unclipped)
    if token_weights is not None:
        per_token = per_token * _masked(token_weights.detach().to(per_token.dtype), mask)
    loss = aggregate(per_token, mask, agg)
    clip_frac = token_mean(clipped_active.to(log_ratio.dtype), mask).detach()
    return loss, clip_frac


# --- KL to the reference policy -----------------------------------------------------


@KL_ESTIMATORS.register("k3")
def kl_k3(logp: Tensor, ref_logp: Tensor, clamp: float = 10.0) -> Tensor:
    """Low-variance (k3) per-token KL estimate of ``KL(pi || pi_ref)``, clamped.

    ``kl = exp(ref_logp - logp) - (ref_logp - logp) - 1``, clamped to
    ``[-clamp, clamp]`` (it is always >= 0, so only the upper bound bites).

    The log-ratio is first clamped to ``[-(clamp + 1), clamp + 1]``, which cannot change
    the result (``|d| >= clamp + 1`` already gives ``kl >= clamp``) but keeps ``exp``
    finite, so clamped tokens get a zero gradient rather than NaN.

    Args:
        logp: ``Tensor[N, T]`` current-policy log-probs.
        ref_logp: ``Tensor[N, T]`` reference-policy log-probs.
        clamp: bound on the per-token estimate (SPEC: 10).

    Returns:
        ``Tensor[N, T]`` per-token KL estimates (not masked; aggregate with a mask).
    """
    if clamp <= 0:
        raise ValueError(f"kl clamp must be > 0, got {clamp}")
    log_ratio = torch.clamp(ref_logp - logp, min=-(clamp + 1.0), max=clamp + 1.0)
    kl = torch.exp(log_ratio) - log_ratio - 1.0
    return torch.clamp(kl, min=-clamp, max=clamp)


# --- quantities from logits ---------------------------------------------------------


def _row_chunks(logits: Tensor, chunk_tokens: int) -> tuple[Tensor, ...]:
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    return logits.reshape(-1, logits.shape[-1]).split(chunk_tokens)


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return logits.dtype if logits.dtype in (torch.float32, torch.float64) else torch.float32


def entropy_from_logits(logits: Tensor, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> Tensor:
    """Entropy of the softmax distribution at each position.

    ``H = logsumexp(z) - sum_v softmax(z)_v z_v`` (stable for large logits). Computed in
    chunks of ``chunk_tokens`` positions, in float32 for half-precision logits, so at most
    a chunk-sized temporary is materialised besides ``logits`` (autograd still keeps what
    backward needs). Logits must be finite.

    Args:
        logits: ``Tensor[N, T, V]``.
        chunk_tokens: positions per chunk.

    Returns:
        ``Tensor[N, T]`` in ``logits``' dtype, or float32 for half-precision logits.
    """
    dtype = _compute_dtype(logits)
    if logits.numel() == 0:
        return logits.new_zeros(logits.shape[:-1], dtype=dtype)
    parts = []
    for chunk in _row_chunks(logits, chunk_tokens):
        z = chunk.to(dtype)
        probs = torch.softmax(z, dim=-1)
        parts.append(torch.logsumexp(z, dim=-1) - (probs * z).sum(dim=-1))
    return torch.cat(parts).view(logits.shape[:-1])


def token_log_probs(
    logits: Tensor, tokens: Tensor, chunk_tokens: int = DEFAULT_CHUNK_TOKENS
) -> Tensor:
    """``log_softmax(logits)[..., tokens]`` without materialising the full log-softmax.

    Gathers the selected logits, then subtracts ``logsumexp`` computed in chunks of
    ``chunk_tokens`` positions (float32 for half-precision logits), as TRL's
    ``selective_log_softmax`` does.

    Args:
        logits: ``Tensor[N, T, V]``.
        tokens: ``Tensor[N, T]`` (long) token ids in ``[0, V)``; pad masked positions
            with any valid id (e.g. the pad token), never -100.
        chunk_tokens: positions per chunk.

    Returns:
        ``Tensor[N, T]`` log-probs, in ``logits``' dtype, or float32 for half precision.
    """
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(
            f"tokens have shape {tuple(tokens.shape)}, expected {tuple(logits.shape[:-1])}"
        )
    dtype = _compute_dtype(logits)
    if logits.numel() == 0:
        return logits.new_zeros(tokens.shape, dtype=dtype)
    selected = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1).to(dtype)
    lse = torch.cat(
        [torch.logsumexp(chunk.to(dtype), dim=-1) for chunk in _row_chunks(logits, chunk_tokens)]
    )
    return selected - lse.view(tokens.shape)


def sft_nll_sum(logp: Tensor, mask: Tensor) -> Tensor:
    """SGT's auxiliary NLL (SPEC 4.3) of a micro-batch, summed: ``-sum(logp)`` over the
    masked tokens (the rescued responses' tokens).

    The trainer divides the sums of all micro-batches by the auxiliary token count, which
    makes the token-mean NLL ``L_NLL(rescued)`` that ``lambda_sgt`` weights. ``logp`` are
    the target tokens' log-probs at temperature 1 (:func:`token_log_probs` of the plain
    logits: a supervised cross-entropy, as in SFT).

    Args:
        logp: ``Tensor[N, T]``.
        mask: ``Tensor[N, T]`` bool or 0/1.

    Returns:
        ``Tensor[]``, >= 0; 0 for an empty mask. Masked-out positions get no gradient,
        whatever they hold (NaN included).
    """
    return -_masked(logp, _bool_mask(mask, logp)).sum()


# --- the full GRPO policy loss ------------------------------------------------------


@dataclass(frozen=True)
class PolicyLossOutput:
    """The loss to backpropagate and its parts (all ``Tensor[]``).

    ``loss``, ``pg_loss``, ``kl_loss`` and ``entropy`` keep their graphs (call
    ``.item()``/``.detach()`` for metrics ``actor/pg_loss``, ``actor/kl_loss``,
    ``actor/entropy``); ``clip_frac`` (``actor/clip_frac``) has none.
    """

    loss: Tensor
    pg_loss: Tensor
    kl_loss: Tensor
    entropy: Tensor
    clip_frac: Tensor


def policy_loss(
    *,
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    entropy: Tensor | None,
    clip_eps: float,
    kl_coef: float,
    kl_clamp: float,
    entropy_coef: float,
    agg: str,
    kl_estimator: str = "k3",
    token_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """GRPO loss ``pg_loss + kl_coef * kl_loss - entropy_coef * entropy``.

    Each term is aggregated over ``mask`` with ``agg``. A term whose coefficient is 0 is
    still reported when its input is given (``ref_logp`` / ``entropy``) but does not enter
    ``loss``; when the input is ``None`` the term is reported as 0.

    Args:
        logp: ``Tensor[N, T]`` current-policy log-probs (with grad).
        old_logp: ``Tensor[N, T]`` log-probs of the sampling policy.
        ref_logp: ``Tensor[N, T]`` reference-policy log-probs; may be ``None`` only if
            ``kl_coef == 0``.
        advantages: ``Tensor[N]`` or ``Tensor[N, T]``.
        mask: ``Tensor[N, T]`` bool or 0/1, true on response tokens.
        entropy: ``Tensor[N, T]`` per-token policy entropy (see
            :func:`entropy_from_logits`); may be ``None`` only if ``entropy_coef == 0``.
        clip_eps: surrogate clipping range.
        kl_coef: ``beta``.
        kl_clamp: per-token bound of the KL estimate.
        entropy_coef: entropy bonus coefficient.
        agg: name in :data:`LOSS_AGGREGATIONS`.
        kl_estimator: name in :data:`KL_ESTIMATORS`.
        token_weights: optional ``Tensor[N, T]`` weights of the surrogate per token
            (see :func:`clipped_surrogate`); the KL and entropy terms are unweighted.

    Returns:
        :class:`PolicyLossOutput` of ``Tensor[]``.
    """
    if ref_logp is None and kl_coef != 0:
        raise ValueError(f"kl_coef is {kl_coef} but ref_logp is None; pass ref_logp or set 0")
    if entropy is None and entropy_coef != 0:
        raise ValueError(
            f"entropy_coef is {entropy_coef} but entropy is None; pass entropy or set 0"
        )
    aggregate_fn = LOSS_AGGREGATIONS.get(agg)
    kl_fn = KL_ESTIMATORS.get(kl_estimator)
    bool_mask = _bool_mask(mask, logp)

    pg_loss, clip_frac = clipped_surrogate(
        logp, old_logp, advantages, bool_mask, clip_eps, agg, token_weights=token_weights
    )
    loss = pg_loss
    zero = pg_loss.new_zeros(())

    kl_loss = zero
    if ref_logp is not None:
        per_token_kl = kl_fn(_masked(logp, bool_mask), _masked(ref_logp, bool_mask), clamp=kl_clamp)
        kl_loss = aggregate_fn(per_token_kl, bool_mask)
        if kl_coef != 0:
            loss = loss + kl_coef * kl_loss

    entropy_mean = zero
    if entropy is not None:
        entropy_mean = aggregate_fn(entropy, bool_mask)
        if entropy_coef != 0:
            loss = loss - entropy_coef * entropy_mean

    return PolicyLossOutput(
        loss=loss, pg_loss=pg_loss, kl_loss=kl_loss, entropy=entropy_mean, clip_frac=clip_frac
    )

"""The loss terms (SPEC 3, 4.3, 5) as pure tensor functions behind name registries.

- the clipped surrogate, one body (:func:`clipped_surrogate`) for GRPO's plain one and
  ReMix's mix-policy one (:func:`mix_policy_surrogate`: its ratio against the behaviour
  version, its clip range centred on ``q_t``, its V-trace-truncated advantages);
- the KL terms: the per-token estimators (:data:`KL_ESTIMATORS`, k3), GRPO's KL to the
  reference (:func:`kl_to_reference`) and ReMix's KL-convex constraint
  (:func:`kl_convex`);
- auxiliary losses on sequences of their own (:data:`AUX_LOSSES`): SGT's NLL;
- the aggregations (:data:`LOSS_AGGREGATIONS`) and the per-token quantities of logits.

The objectives that combine them, chosen by name, are in :mod:`trainer.core.objectives`.

Shapes: ``N`` sequences (rollouts) x ``T`` response positions (x ``V`` vocabulary for
logits). ``mask`` is ``[N, T]``, bool or 0/1 float, true/1 on response tokens; any
nonzero value counts as a token. Values at masked positions never matter, not even
NaN/inf: they are replaced with ``torch.where`` (never multiplied by 0), before any
arithmetic that could turn them into NaN gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trainer.registry import Registry

LossAggregation = Callable[[Tensor, Tensor], Tensor]
"""``(values: Tensor[N, T], mask: Tensor[N, T]) -> Tensor[]``."""

KLEstimator = Callable[..., Tensor]
"""``(logp: Tensor[N, T], ref_logp: Tensor[N, T], *, clamp: float) -> Tensor[N, T]``."""

AuxLoss = Callable[[Tensor, Tensor], Tensor]
"""``(logp: Tensor[N, T], mask: Tensor[N, T]) -> Tensor[]``: a micro-batch's loss summed
over its masked tokens; the trainer divides the sums by the set's token count."""

LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry("loss aggregation")
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")
AUX_LOSSES: Registry[AuxLoss] = Registry("auxiliary loss")

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


# --- the clipped surrogate, GRPO's and ReMix's --------------------------------------


@dataclass(frozen=True)
class Surrogate:
    """A clipped surrogate: ``loss`` (``Tensor[]``, with graph), ``clip_frac``
    (``Tensor[]``, the token-mean of "clipped branch active", no graph) and the per-token
    ratio ``rho`` (``Tensor[N, T]``, no graph; 1 at masked positions) for diagnostics."""

    loss: Tensor
    clip_frac: Tensor
    ratio: Tensor


def _per_token(advantages: Tensor, like: Tensor) -> Tensor:
    """``advantages`` (``[N]``, broadcast over tokens, or ``[N, T]``) as ``[N, T]``."""
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


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    agg: str = "token-mean",
    token_weights: Tensor | None = None,
    *,
    clip_center: Tensor | None = None,
    advantage_weights: Tensor | None = None,
) -> Surrogate:
    """PPO/GRPO clipped surrogate loss, the one body behind GRPO's and ReMix's.

    Per token ``rho = exp(logp - old_logp)``, ``A_t = A * advantage_weights`` and
    ``L = -min(rho * A_t, clip(rho, c - clip_eps, c + clip_eps) * A_t) * token_weights``
    with the clip centre ``c = clip_center`` (1 when None: plain PPO/GRPO, SPEC 3).
    Where the clipped branch is strictly the active one (verl: ``pg_losses2 >
    pg_losses``) the loss does not depend on ``logp``, so those tokens get zero gradient.

    Args:
        logp: ``Tensor[N, T]`` log-probs of the response tokens under the current policy.
        old_logp: ``Tensor[N, T]`` the ratio's denominator: log-probs under the policy
            that sampled them (ReMix: the behaviour version ``pi_{k-i}``).
        advantages: ``Tensor[N]`` (one per sequence, broadcast over tokens) or
            ``Tensor[N, T]``.
        mask: ``Tensor[N, T]`` bool or 0/1, true on response tokens.
        clip_eps: clipping half-width ``eps_clip``.
        agg: name in :data:`LOSS_AGGREGATIONS` for the loss.
        token_weights: optional ``Tensor[N, T]`` (no gradient) multiplying each token's
            surrogate: PRP's truncated importance weights on peer tokens (1 elsewhere).
        clip_center: optional ``Tensor[N, T]`` (no gradient), the centre of the clip
            range per token: ReMix's ``q_t = pi_k / pi_{k-i}`` (SPEC 5).
        advantage_weights: optional ``Tensor[N, T]`` (no gradient) multiplying the
            advantage per token: ReMix's V-trace truncation ``min(q_t, c_bar)`` on
            replayed samples (1 on fresh ones).

    Returns:
        :class:`Surrogate`; ``clip_frac`` is a token-mean whatever ``agg`` is.
    """
    mask = _bool_mask(mask, logp)
    advantages = _per_token(advantages, logp)
    log_ratio = _masked(logp, mask) - _masked(old_logp, mask)
    advantages = _masked(advantages.to(log_ratio.dtype), mask)
    if advantage_weights is not None:
        advantages = advantages * _masked(advantage_weights.detach().to(log_ratio.dtype), mask)
    ratio = torch.exp(log_ratio)
    if clip_center is None:
        clipped_ratio = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    else:
        center = clip_center.detach()
        clipped_ratio = torch.clamp(ratio, center - clip_eps, center + clip_eps)
    unclipped = -advantages * ratio
    clipped = -advantages * clipped_ratio
    clipped_active = clipped > unclipped
    per_token = torch.where(clipped_active, clipped, unclipped)
    if token_weights is not None:
        per_token = per_token * _masked(token_weights.detach().to(per_token.dtype), mask)
    loss = aggregate(per_token, mask, agg)
    clip_frac = token_mean(clipped_active.to(log_ratio.dtype), mask).detach()
    return Surrogate(loss, clip_frac, ratio.detach())


def vtrace_truncation(q: Tensor, c_bar: float = 1.0) -> Tensor:
    """V-trace-style truncated importance weight ``min(q_t, c_bar)``, per token (SPEC 5).

    Args:
        q: ``Tensor[N, T]`` importance ratios ``pi_k / pi_{k-i}``.
        c_bar: the truncation, > 0.

    Returns:
        ``Tensor[N, T]``.
    """
    if c_bar <= 0:
        raise ValueError(f"c_bar must be > 0, got {c_bar}")
    return torch.clamp(q, max=c_bar)


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
) -> Surrogate:
    """ReMix's generalized PPO clipped surrogate with sample reuse (SPEC 5).

    Per token, with ``r_t = pi_theta / pi_{k-i}`` and ``q_t = pi_k / pi_{k-i}``:
    ``L = -min(r_t A_t, clip(r_t, q_t - eps, q_t + eps) A_t)``, where
    ``A_t = A * min(q_t, c_bar)`` on replayed samples (V-trace-style truncation) and
    ``A_t = A`` on fresh ones: :func:`clipped_surrogate` with ``old_logp =
    behaviour_logp``, ``clip_center = q`` and ``advantage_weights``. For a fresh sample
    ``q_t = 1`` and this is exactly plain PPO.

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
        agg: name in :data:`LOSS_AGGREGATIONS`.
        token_weights: optional ``Tensor[N, T]`` (no grad) multiplying each token's loss
            (PRP's peer weights), as in :func:`clipped_surrogate`.

    Returns:
        :class:`Surrogate`; ``ratio`` is ``r_t``.
    """
    mask = _bool_mask(mask, logp)
    q = torch.exp(_masked(current_logp, mask) - _masked(behaviour_logp, mask)).detach()
    advantage_weights = None
    if replayed is not None:
        truncate = replayed.to(torch.bool).unsqueeze(-1).expand_as(mask) & mask
        advantage_weights = torch.where(
            truncate, vtrace_truncation(q, c_bar), torch.ones((), dtype=q.dtype)
        )
    return clipped_surrogate(
        logp,
        behaviour_logp,
        advantages,
        mask,
        clip_eps,
        agg,
        token_weights,
        clip_center=q,
        advantage_weights=advantage_weights,
    )


# --- KL ------------------------------------------------------------------------------


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


def kl_to_reference(
    logp: Tensor, ref_logp: Tensor, mask: Tensor, *, clamp: float = 10.0, estimator: str = "k3"
) -> Tensor:
    """Per-token ``KL(pi_theta || pi_ref)`` by the :data:`KL_ESTIMATORS` entry
    ``estimator`` (SPEC 3: k3, clamped to ``[-clamp, clamp]``), NaN-safe: masked
    positions compare 0 with 0.

    Args:
        logp: ``Tensor[N, T]`` current-policy log-probs.
        ref_logp: ``Tensor[N, T]`` reference-policy log-probs.
        mask: ``Tensor[N, T]`` bool or 0/1.
        clamp: bound on the per-token estimate.
        estimator: name in :data:`KL_ESTIMATORS`.

    Returns:
        ``Tensor[N, T]``; 0 at masked positions, whatever the inputs hold there.
    """
    mask = _bool_mask(mask, logp)
    kl_fn = KL_ESTIMATORS.get(estimator)
    return kl_fn(_masked(logp, mask), _masked(ref_logp, mask), clamp=clamp)


def kl_convex(
    logp: Tensor,
    base_logp: Tensor,
    prev_logp: Tensor,
    kl_lambda: float,
    *,
    clamp: float = 10.0,
    estimator: str = "k3",
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """ReMix's KL-convex constraint (SPEC 5), per token:
    ``lambda KL(pi_theta || pi_base) + (1 - lambda) KL(pi_theta || pi_prev)``.

    Each KL is the per-token estimate of ``estimator`` (k3, clamped), as in
    :func:`kl_to_reference`.

    Args:
        logp: ``Tensor[N, T]`` current-policy log-probs.
        base_logp: ``Tensor[N, T]`` log-probs of the base (reference) policy.
        prev_logp: ``Tensor[N, T]`` log-probs of the previous policy ``pi_k``.
        kl_lambda: ``lambda(t)`` in ``[0, 1]``.
        clamp: bound on each per-token estimate.
        estimator: name in :data:`KL_ESTIMATORS`.
        mask: optional ``Tensor[N, T]`` bool or 0/1; given, masked positions compare 0
            with 0 (whatever the inputs hold there) and give 0.

    Returns:
        ``(convex, kl_base, kl_prev)``, all ``Tensor[N, T]``.
    """
    if not 0.0 <= kl_lambda <= 1.0:
        raise ValueError(f"lambda must be in [0, 1], got {kl_lambda}")
    if mask is not None:
        mask = _bool_mask(mask, logp)
        logp, base_logp, prev_logp = (_masked(x, mask) for x in (logp, base_logp, prev_logp))
    kl_fn = KL_ESTIMATORS.get(estimator)
    kl_base = kl_fn(logp, base_logp, clamp=clamp)
    kl_prev = kl_fn(logp, prev_logp, clamp=clamp)
    return kl_lambda * kl_base + (1.0 - kl_lambda) * kl_prev, kl_base, kl_prev


# --- auxiliary losses on sequences of their own (SGT) --------------------------------


@AUX_LOSSES.register("nll")
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
    """``log_softmax(logits)[..., tokens]`` without keeping the full log-softmax.

    :func:`token_log_probs_and_entropy` without the entropy: one fused log-softmax per
    chunk of ``chunk_tokens`` positions (float32 for half-precision logits), of which only
    the selected column is kept, as TRL's ``selective_log_softmax`` does.

    Args:
        logits: ``Tensor[N, T, V]``.
        tokens: ``Tensor[N, T]`` (long) token ids in ``[0, V)``; pad masked positions
            with any valid id (e.g. the pad token), never -100.
        chunk_tokens: positions per chunk.

    Returns:
        ``Tensor[N, T]`` log-probs, in ``logits``' dtype, or float32 for half precision.
    """
    return token_log_probs_and_entropy(logits, tokens, chunk_tokens, with_entropy=False)[0]


def token_log_probs_and_entropy(
    logits: Tensor,
    tokens: Tensor,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    *,
    with_entropy: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """The selected tokens' log-probs and the entropy at each position, from one
    log-softmax of ``logits`` per chunk of ``chunk_tokens`` positions.

    ``logp = log_softmax(z)[token]`` and ``H = -sum_v p_v log p_v`` with ``p =
    softmax(z)``: the same values as :func:`entropy_from_logits` and a gather of
    ``log_softmax`` (to float rounding), at a fraction of their cost: torch's fused
    log-softmax kernel runs once per chunk, where ``logsumexp`` and a separate softmax
    each made several passes and temporaries over ``[positions, V]``.

    Autograd: nothing of size ``[positions, V]`` is kept besides ``logits`` themselves
    (already alive). The backward recomputes each chunk's log-softmax and returns
    ``g_logp * (onehot(token) - p) - g_H * p * (log p + H)``; a term whose output does
    not reach the loss (the entropy, when its coefficient is 0) costs nothing there.
    Logits must be finite.

    Args:
        logits: ``Tensor[N, T, V]``.
        tokens: ``Tensor[N, T]`` (long) token ids in ``[0, V)``; pad masked positions
            with any valid id, never -100.
        chunk_tokens: positions per chunk.
        with_entropy: False: the entropy is not computed (returned as None).

    Returns:
        ``(logp, entropy)``, each ``Tensor[N, T]`` in ``logits``' dtype, or float32 for
        half-precision logits; ``entropy`` None when ``with_entropy`` is False.
    """
    if tokens.shape != logits.shape[:-1]:
        raise ValueError(
            f"tokens have shape {tuple(tokens.shape)}, expected {tuple(logits.shape[:-1])}"
        )
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    dtype = _compute_dtype(logits)
    if logits.numel() == 0:
        empty = logits.new_zeros(tokens.shape, dtype=dtype)
        return empty, (empty.clone() if with_entropy else None)
    logp, entropy = _SelectedLogSoftmax.apply(logits, tokens, chunk_tokens, with_entropy)
    return logp, (entropy if with_entropy else None)


class _SelectedLogSoftmax(torch.autograd.Function):
    """:func:`token_log_probs_and_entropy`'s forward and backward (see there)."""

    @staticmethod
    def forward(
        ctx: Any, logits: Tensor, tokens: Tensor, chunk_tokens: int, with_entropy: bool
    ) -> tuple[Tensor, Tensor]:
        dtype = _compute_dtype(logits)
        flat = logits.reshape(-1, logits.shape[-1])
        index = tokens.reshape(-1, 1).long()
        logp = torch.empty(flat.shape[0], dtype=dtype, device=logits.device)
        entropy = torch.zeros(
            flat.shape[0] if with_entropy else 0, dtype=dtype, device=logits.device
        )
        for start in range(0, flat.shape[0], chunk_tokens):
            stop = start + chunk_tokens
            log_p = torch.log_softmax(flat[start:stop].to(dtype), dim=-1)
            logp[start:stop] = log_p.gather(-1, index[start:stop]).squeeze(-1)
            if with_entropy:
                entropy[start:stop] = -(log_p.exp().mul_(log_p)).sum(dim=-1)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(logits, index, entropy)
        ctx.chunk_tokens = chunk_tokens
        return logp.view(tokens.shape), entropy.view(tokens.shape if with_entropy else (0,))

    @staticmethod
    def backward(
        ctx: Any, grad_logp: Tensor | None, grad_entropy: Tensor | None
    ) -> tuple[Tensor | None, None, None, None]:
        logits, index, entropy = ctx.saved_tensors
        if grad_logp is None and (grad_entropy is None or not entropy.numel()):
            return None, None, None, None
        dtype = _compute_dtype(logits)
        flat = logits.reshape(-1, logits.shape[-1])
        g_logp = None if grad_logp is None else grad_logp.reshape(-1, 1).to(dtype)
        g_entropy = (
            None
            if grad_entropy is None or not entropy.numel()
            else grad_entropy.reshape(-1, 1).to(dtype)
        )
        grad = torch.empty(flat.shape, dtype=dtype, device=logits.device)
        for start in range(0, flat.shape[0], ctx.chunk_tokens):
            stop = start + ctx.chunk_tokens
            log_p = torch.log_softmax(flat[start:stop].to(dtype), dim=-1)
            p = log_p.exp()
            part = grad[start:stop]
            if g_entropy is not None:
                # dH/dz = -p * (log p + H)
                log_p.add_(entropy[start:stop, None])
                torch.mul(p, log_p, out=part)
                part.mul_(-g_entropy[start:stop])
                if g_logp is not None:
                    part.addcmul_(p, g_logp[start:stop], value=-1.0)
            else:
                assert g_logp is not None
                torch.mul(p, g_logp[start:stop], out=part)
                part.neg_()
            if g_logp is not None:
                part.scatter_add_(-1, index[start:stop], g_logp[start:stop])
        return grad.to(logits.dtype).view(logits.shape), None, None, None

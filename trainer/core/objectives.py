"""The policy objectives (SPEC 3, 5) as pure functions chosen by name from :data:`OBJECTIVES`.

An objective scores one micro-batch: from the current policy's log-probs and entropy
and the micro-batch's :class:`ObjectiveInputs`, under :class:`ObjectiveSettings`, it
returns the loss to backpropagate and the metrics it reports (:class:`ObjectiveOutput`).
The trainer slices the inputs, calls the objective once per micro-batch and sums what it
reports; it knows no objective's terms or metric names. What it must score for an
objective beyond the current log-probs (``log pi_old``, the reference's log-probs) is
declared beside it in :data:`OBJECTIVE_NEEDS`. The terms a sharing regime
attaches beside it (SGT's NLL on rescued successes) are
:data:`trainer.core.losses.AUX_LOSSES`.

- ``grpo`` (:func:`grpo_loss`): clipped surrogate ``+ beta KL(pi || ref) - ent_coef H``;
- ``remix`` (:func:`remix_loss`): mix-policy surrogate ``+ beta KL-convex - ent_coef H``.

Both build on the terms of :mod:`trainer.core.losses` (one clipped-surrogate body, the
KL estimators) and aggregate every term over the mask with ``settings.agg``.

Shapes: ``n`` sequences x ``T`` response positions; masked values never matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from trainer import metrics as m
from trainer.core.losses import (
    LOSS_AGGREGATIONS,
    _bool_mask,
    clipped_surrogate,
    kl_convex,
    kl_to_reference,
    mix_policy_surrogate,
)
from trainer.registry import Registry


@dataclass(frozen=True)
class ObjectiveInputs:
    """What an objective scores besides the current log-probs: ``[n, T]`` tensors (``[n]``
    where noted), none with a gradient.

    The trainer builds them once for the whole batch and hands each micro-batch a view
    (:meth:`rows`), never a copy.
    """

    mask: Tensor
    """``[n, T]`` bool or 0/1, true on response tokens."""
    advantages: Tensor
    """``[n, T]`` (or ``[n]``), the same ``A_i`` on every token of sample ``i``."""
    old_logp: Tensor | None = None
    """``[n, T]`` ``log pi_old`` (ReMix: ``log pi_k``, the policy at the start of the step).
    None (GRPO only): the first and only pass over the batch, whose ratio's denominator
    is the current log-probs themselves, detached."""
    ref_logp: Tensor | None = None
    """``[n, T]`` log-probs of the reference (ReMix: the base policy); None without KL."""
    token_weights: Tensor | None = None
    """``[n, T]`` surrogate weight per token (PRP's truncated importance weights)."""
    behaviour_logp: Tensor | None = None
    """``[n, T]`` ReMix: log-probs of the version that sampled each sample (``old_logp``
    on fresh samples); None: ``old_logp``."""
    replayed: Tensor | None = None
    """``[n]`` bool, ReMix: true on replayed samples."""

    def rows(self, rows: slice, positions: int | None = None, start: int = 0) -> ObjectiveInputs:
        """The inputs of sequences ``rows``, positions ``[start, positions)`` (to the end
        when None): views of these tensors. ``[n]`` tensors are cut by rows only."""
        columns = slice(start, positions)

        def cut(tensor: Tensor) -> Tensor:
            return tensor[rows] if tensor.dim() == 1 else tensor[rows, columns]

        def cut_or_none(tensor: Tensor | None) -> Tensor | None:
            return None if tensor is None else cut(tensor)

        return ObjectiveInputs(
            mask=self.mask[rows, columns],
            advantages=cut(self.advantages),
            old_logp=cut_or_none(self.old_logp),
            ref_logp=cut_or_none(self.ref_logp),
            token_weights=cut_or_none(self.token_weights),
            behaviour_logp=cut_or_none(self.behaviour_logp),
            replayed=cut_or_none(self.replayed),
        )


@dataclass(frozen=True)
class ObjectiveSettings:
    """An objective's constants (defaults: SPEC 3 and 5)."""

    clip_eps: float = 0.2
    """Half-width of the surrogate's clip range."""
    kl_coef: float = 0.001
    """``beta``, weight of the KL term."""
    kl_clamp: float = 10.0
    """Bound of each per-token KL estimate."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    agg: str = "token-mean"
    """Name in :data:`trainer.core.losses.LOSS_AGGREGATIONS`, for every term."""
    kl_estimator: str = "k3"
    """Name in :data:`trainer.core.losses.KL_ESTIMATORS`."""
    c_bar: float = 1.0
    """ReMix: truncation ``min(q_t, c_bar)`` of the replayed samples' advantages."""
    kl_lambda: float = 1.0
    """ReMix: ``lambda(t)`` of the KL-convex constraint at this step."""


@dataclass(frozen=True)
class TokenStat:
    """A per-token diagnostic: the step reports the mean of ``values`` over all its
    response tokens (every micro-batch and update) as ``mean_key``, their max as
    ``max_key``."""

    values: Tensor
    """``[k]``, no graph: one value per response token of the micro-batch."""
    mean_key: str
    max_key: str


@dataclass(frozen=True)
class ObjectiveOutput:
    """One micro-batch's loss and what it reports."""

    loss: Tensor
    """``Tensor[]`` with graph: the aggregated loss to backpropagate."""
    metrics: dict[str, Tensor]
    """Metric name -> ``Tensor[]`` (no graph), aggregated over the micro-batch like the
    loss; the step reports each weighted by the micro-batch's share of the mini-batch,
    averaged over optimizer steps."""
    token_stats: tuple[TokenStat, ...] = ()


class Objective(Protocol):
    """``(*, logp: Tensor[n, T], entropy: Tensor[n, T] | None, inputs: ObjectiveInputs,
    settings: ObjectiveSettings) -> ObjectiveOutput``; ``logp`` with gradient."""

    def __call__(
        self,
        *,
        logp: Tensor,
        entropy: Tensor | None,
        inputs: ObjectiveInputs,
        settings: ObjectiveSettings,
    ) -> ObjectiveOutput: ...


OBJECTIVES: Registry[Objective] = Registry("objective")


@dataclass(frozen=True)
class ObjectiveNeeds:
    """What an objective asks of the trainer besides the current log-probs, declared
    under its name in :data:`OBJECTIVE_NEEDS` (an objective without an entry needs what
    ``grpo`` needs)."""

    old_logp: bool = False
    """``inputs.old_logp`` always. False: only when the update makes more than one
    optimizer step of the batch; in a single one the update's own log-probs, detached,
    are ``log pi_old``, and ``inputs.old_logp`` is None."""
    ref_logp: bool = False
    """``inputs.ref_logp`` whatever ``settings.kl_coef`` is. False: only when it is > 0."""
    extra_inputs: frozenset[str] = frozenset()
    """The fields of :class:`ObjectiveInputs` it reads beyond ``mask``, ``advantages``,
    ``old_logp``, ``ref_logp`` and ``token_weights``; the trainer refuses a batch whose
    hooks give any other (it would be silently ignored)."""


OBJECTIVE_NEEDS: Registry[ObjectiveNeeds] = Registry("objective's needs")


def objective_needs(name: str) -> ObjectiveNeeds:
    """The :class:`ObjectiveNeeds` of objective ``name`` (the defaults without an entry)."""
    return OBJECTIVE_NEEDS.get(name) if name in OBJECTIVE_NEEDS else ObjectiveNeeds()


def _regularised(
    pg_loss: Tensor,
    per_token_kl: Tensor | None,
    entropy: Tensor | None,
    mask: Tensor,
    settings: ObjectiveSettings,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss, kl_loss, entropy_mean)`` with ``loss = pg_loss + kl_coef * kl_loss -
    entropy_coef * entropy_mean``, each term aggregated over ``mask`` (bool ``[n, T]``).

    A term whose coefficient is 0 is still reported when its input is given but does not
    enter ``loss``; without its input (None) it is reported as 0.
    """
    if entropy is None and settings.entropy_coef != 0:
        raise ValueError(
            f"entropy_coef is {settings.entropy_coef} but entropy is None; pass entropy or set 0"
        )
    aggregate_fn = LOSS_AGGREGATIONS.get(settings.agg)
    loss = pg_loss
    zero = pg_loss.new_zeros(())
    kl_loss = zero
    if per_token_kl is not None:
        kl_loss = aggregate_fn(per_token_kl, mask)
        if settings.kl_coef != 0:
            loss = loss + settings.kl_coef * kl_loss
    entropy_mean = zero
    if entropy is not None:
        entropy_mean = aggregate_fn(entropy, mask)
        if settings.entropy_coef != 0:
            loss = loss - settings.entropy_coef * entropy_mean
    return loss, kl_loss, entropy_mean


def _actor_metrics(
    pg_loss: Tensor, kl_loss: Tensor, entropy: Tensor, clip_frac: Tensor
) -> dict[str, Tensor]:
    return {
        m.PG_LOSS: pg_loss.detach(),
        m.KL_LOSS: kl_loss.detach(),
        m.ENTROPY: entropy.detach(),
        m.CLIP_FRAC: clip_frac,
    }


OBJECTIVE_NEEDS.register("grpo")(ObjectiveNeeds())
"""``grpo`` takes ``log pi_old`` and the reference's log-probs only when it uses them."""


@OBJECTIVES.register("grpo")
def grpo_loss(
    *,
    logp: Tensor,
    entropy: Tensor | None,
    inputs: ObjectiveInputs,
    settings: ObjectiveSettings,
) -> ObjectiveOutput:
    """GRPO's loss (SPEC 3): ``pg_loss + kl_coef * kl_loss - entropy_coef * entropy``.

    ``pg_loss`` is :func:`~trainer.core.losses.clipped_surrogate` of ``logp`` against
    ``inputs.old_logp`` (``logp`` detached when None), weighted by
    ``inputs.token_weights``; ``kl_loss`` is
    :func:`~trainer.core.losses.kl_to_reference` against ``inputs.ref_logp`` (the KL and
    entropy terms are unweighted).

    Args:
        logp: ``Tensor[n, T]`` current-policy log-probs (with grad).
        entropy: ``Tensor[n, T]`` per-token policy entropy; may be None only if
            ``settings.entropy_coef == 0``.
        inputs: the micro-batch; ``ref_logp`` may be None only if
            ``settings.kl_coef == 0``.
        settings: the constants.

    Returns:
        ``loss`` and the metrics ``actor/pg_loss``, ``actor/kl_loss``,
        ``actor/entropy``, ``actor/clip_frac``.
    """
    if inputs.ref_logp is None and settings.kl_coef != 0:
        raise ValueError(
            f"kl_coef is {settings.kl_coef} but ref_logp is None; pass ref_logp or set 0"
        )
    mask = _bool_mask(inputs.mask, logp)
    old_logp = logp.detach() if inputs.old_logp is None else inputs.old_logp
    surrogate = clipped_surrogate(
        logp,
        old_logp,
        inputs.advantages,
        mask,
        settings.clip_eps,
        settings.agg,
        inputs.token_weights,
    )
    per_token_kl = (
        None
        if inputs.ref_logp is None
        else kl_to_reference(
            logp, inputs.ref_logp, mask, clamp=settings.kl_clamp, estimator=settings.kl_estimator
        )
    )
    loss, kl_loss, entropy_mean = _regularised(
        surrogate.loss, per_token_kl, entropy, mask, settings
    )
    return ObjectiveOutput(
        loss, _actor_metrics(surrogate.loss, kl_loss, entropy_mean, surrogate.clip_frac)
    )


OBJECTIVE_NEEDS.register("remix")(
    ObjectiveNeeds(
        old_logp=True, ref_logp=True, extra_inputs=frozenset({"behaviour_logp", "replayed"})
    )
)
"""``remix`` needs ``log pi_k`` and the base policy's log-probs always, and reads the
replayed samples' behaviour log-probs and flags."""


@OBJECTIVES.register("remix")
def remix_loss(
    *,
    logp: Tensor,
    entropy: Tensor | None,
    inputs: ObjectiveInputs,
    settings: ObjectiveSettings,
) -> ObjectiveOutput:
    """ReMix's loss (SPEC 5): ``L_mix + kl_coef * KL_convex - entropy_coef * entropy``.

    ``L_mix`` is :func:`~trainer.core.losses.mix_policy_surrogate` with ``pi_k`` =
    ``inputs.old_logp`` and the behaviour versions ``inputs.behaviour_logp``;
    ``KL_convex`` is :func:`~trainer.core.losses.kl_convex` with ``pi_base`` =
    ``inputs.ref_logp`` and ``pi_prev`` = ``pi_k``, ``lambda = settings.kl_lambda``.

    Args:
        logp: ``Tensor[n, T]`` current-policy log-probs (with grad).
        entropy: ``Tensor[n, T]`` or None (only if ``settings.entropy_coef == 0``).
        inputs: the micro-batch; ``old_logp`` and ``ref_logp`` are required.
        settings: the constants.

    Returns:
        ``loss``; the metrics of :func:`grpo_loss` (``actor/kl_loss``: the KL-convex
        term) plus ``remix/kl_base`` and ``remix/kl_prev``; the token statistic
        ``r_t = pi_theta / pi_behaviour`` as ``remix/is_ratio_mean`` and
        ``remix/is_ratio_max``.
    """
    if inputs.old_logp is None or inputs.ref_logp is None:
        raise ValueError("the remix objective needs old_logp (log pi_k) and ref_logp (base)")
    mask = _bool_mask(inputs.mask, logp)
    behaviour_logp = inputs.old_logp if inputs.behaviour_logp is None else inputs.behaviour_logp
    surrogate = mix_policy_surrogate(
        logp,
        behaviour_logp,
        inputs.old_logp,
        inputs.advantages,
        mask,
        clip_eps=settings.clip_eps,
        c_bar=settings.c_bar,
        replayed=inputs.replayed,
        agg=settings.agg,
        token_weights=inputs.token_weights,
    )
    convex, kl_base, kl_prev = kl_convex(
        logp,
        inputs.ref_logp,
        inputs.old_logp,
        settings.kl_lambda,
        clamp=settings.kl_clamp,
        estimator=settings.kl_estimator,
        mask=mask,
    )
    loss, kl_loss, entropy_mean = _regularised(surrogate.loss, convex, entropy, mask, settings)
    aggregate_fn = LOSS_AGGREGATIONS.get(settings.agg)
    metrics = _actor_metrics(surrogate.loss, kl_loss, entropy_mean, surrogate.clip_frac)
    metrics[m.REMIX_KL_BASE] = aggregate_fn(kl_base, mask).detach()
    metrics[m.REMIX_KL_PREV] = aggregate_fn(kl_prev, mask).detach()
    ratio = TokenStat(surrogate.ratio[mask], m.REMIX_IS_RATIO_MEAN, m.REMIX_IS_RATIO_MAX)
    return ObjectiveOutput(loss, metrics, (ratio,))

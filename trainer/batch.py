"""What a policy trains on at one step, and the pure functions that turn it into tensors.

- :class:`LearnerBatch`: the samples (prompt and response ids, one advantage each), their
  optional per-token weights and already-scored old log-probs, the auxiliary terms
  (:class:`AuxTerm`), and the hooks (:class:`BatchHook`) through which a sharing regime
  or an off-policy method takes part in the update;
- :class:`Update`: which objective of :data:`trainer.core.OBJECTIVES` a step optimises,
  with which constants and how many passes;
- :func:`build_sequences` and :func:`scatter_per_token`: the batch as padded tensors.

Where each method's part lives: PRP's truncated importance weights are the hook
:class:`trainer.regimes.prp.weights.ImportanceWeights`; ReMix's replayed samples and
their behaviour log-probs the hook :class:`trainer.remix.reuse.ReplayedSamples`; SGT's
NLL on rescued successes an :class:`AuxTerm`. The policy's update
(:meth:`trainer.policy.Policy.train_step`) knows none of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:
    from trainer.core import ObjectiveInputs
    from trainer.policy import Rollouts

H = TypeVar("H", bound="BatchHook")


@dataclass(frozen=True)
class AuxTerm:
    """An auxiliary loss on sequences of its own, which a regime attaches to a
    :class:`LearnerBatch` (SGT: the NLL of the rescued successes, weight ``lambda_sgt``).

    Every optimizer step of the update adds ``coef`` times the token-mean of the
    :data:`trainer.core.AUX_LOSSES` entry ``loss`` over the response tokens of these
    sequences, scored on the model's plain logits (temperature 1, a supervised loss as
    in SFT). The step reports that token-mean as ``metric``, averaged over its optimizer
    steps. A term without sequences or with ``coef`` 0 changes nothing and costs nothing.
    """

    loss: str
    """Name in :data:`trainer.core.AUX_LOSSES` (``"nll"``)."""
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    coef: float
    metric: str
    """The metric the term's value is reported as (SGT: ``sgt/nll``)."""


@dataclass
class LearnerBatch:
    """What a policy optimises at one step: what every objective needs, and hooks.

    ``token_weights[i]`` is None for a sample whose surrogate is unweighted (or whose
    weights a hook computes during the update) and otherwise one weight per response
    token that multiplies its surrogate. ``aux_terms`` are losses on sequences of their
    own that the regime attaches (SGT's NLL on rescued successes); none, the objective is
    exactly the policy objective.

    ``old_logp[i]``, where the regime has already scored sample i with the policy as it
    is before the update, is that per-token ``log pi_old``; the update then takes it
    instead of scoring the sample again. None (or an empty list): the update computes it.

    ``hooks`` take part in the update (:class:`BatchHook`): they write per-token weights
    from the update's own log-probs (PRP's importance weights), add inputs that their
    objective reads (ReMix's behaviour log-probs of replayed samples) and read back what
    the update computed.
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    advantages: torch.Tensor  # [N]
    token_weights: list[list[float] | None] = field(default_factory=list)
    aux_terms: list[AuxTerm] = field(default_factory=list)
    old_logp: list[list[float] | None] = field(default_factory=list)
    hooks: list[BatchHook] = field(default_factory=list)

    @classmethod
    def on_policy(cls, rollouts: Rollouts, advantages: torch.Tensor) -> LearnerBatch:
        batch = rollouts.batch
        return cls(
            prompt_ids=batch.prompt_ids,
            response_ids=batch.response_ids,
            advantages=advantages,
            token_weights=[None] * len(batch),
        )

    def hook(self, kind: type[H]) -> H | None:
        """The batch's first hook of class ``kind``; None when it has none."""
        return next((hook for hook in self.hooks if isinstance(hook, kind)), None)

    def __len__(self) -> int:
        return len(self.response_ids)


@dataclass(frozen=True)
class Update:
    """How :meth:`trainer.policy.Policy.train_step` optimises a batch.

    The objective is looked up by name in :data:`trainer.core.OBJECTIVES` and called with
    the :class:`~trainer.core.ObjectiveSettings` of the GRPO config (``clip_eps``,
    ``kl_coef``, ...) with ``settings`` set over them."""

    objective: str | None = None
    """Name in :data:`trainer.core.OBJECTIVES`; None: the policy's own (the run config's
    objective, :attr:`trainer.config.RunConfig.objective`)."""
    settings: Mapping[str, float] = field(default_factory=dict)
    """Fields of :class:`~trainer.core.ObjectiveSettings` for this step beyond the GRPO
    config's (ReMix: ``c_bar`` and this step's ``kl_lambda``)."""
    passes: int | None = None
    """Passes over the batch, each split into ``grpo.mini_batches`` optimizer steps;
    None: ``grpo.epochs``."""


@dataclass
class UpdateTensors:
    """The update's view of a batch, which the hooks read and add to
    (:meth:`BatchHook.prepare`, :meth:`BatchHook.finish`): ``[N, L-1]`` tensors on the
    policy's device, in the frame of ``logits[:, :-1]`` (:func:`build_sequences`)."""

    batch: LearnerBatch
    objective: str
    """The name of the objective the update optimises."""
    response_mask: torch.Tensor
    """``[N, L-1]``, 1 on response tokens."""
    old_logp: torch.Tensor | None
    """``log pi_old`` of every sample, scored before the update; None when the update
    takes its own forward's detached log-probs instead (a single pass over a single
    mini-batch, when the objective does not ask for them): then
    :meth:`BatchHook.micro_batch` sees them."""
    token_weights: torch.Tensor | None
    """The surrogate's per-token weights (1 where the batch gives none); None: none at
    all. A hook that writes weights makes them with :meth:`weights`."""
    device: torch.device
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    """Fields of :class:`~trainer.core.ObjectiveInputs` that hooks add (ReMix:
    ``behaviour_logp``, ``replayed``); the objective must read them
    (:class:`~trainer.core.ObjectiveNeeds`)."""

    def weights(self) -> torch.Tensor:
        """:attr:`token_weights`, made all ones first when there are none."""
        if self.token_weights is None:
            self.token_weights = torch.ones_like(self.response_mask, dtype=torch.float32)
        return self.token_weights


class BatchHook:
    """A regime's or an off-policy method's part in the update of one batch.

    The policy calls, per :meth:`~trainer.policy.Policy.train_step` of a batch with
    samples: :meth:`prepare` once, after ``log pi_old`` is scored (if at all) and before
    the first optimizer step; :meth:`micro_batch` at every micro-batch of every optimizer
    step, after its forward and before the objective reads its inputs; :meth:`finish`
    once, after the last optimizer step. Every method does nothing by default.
    """

    def prepare(self, update: UpdateTensors) -> None:
        """Add to the objective's inputs: write :meth:`UpdateTensors.weights`, or set
        :attr:`UpdateTensors.inputs`."""

    def micro_batch(
        self, rows: slice, columns: slice, logp: torch.Tensor, inputs: ObjectiveInputs
    ) -> None:
        """Micro-batch ``rows`` of the batch, target columns ``columns``: ``logp`` is its
        forward's detached log-probs (``[rows, columns]``), ``inputs`` the views of the
        objective's inputs the objective is about to read (writable in place)."""

    def finish(self, update: UpdateTensors) -> dict[str, float]:
        """Read back what the update computed; the metrics the hook reports (none by
        default)."""
        return {}


def build_sequences(
    prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + response`` sequences for a teacher-forced forward pass.

    Returns ``input_ids [N, L]``, ``attention_mask [N, L]`` and ``response_mask
    [N, L-1]``, where ``response_mask[i, t] = 1`` iff token ``t + 1`` of sequence ``i``
    is a response token, i.e. in the frame of ``logits[:, :-1]`` predicting
    ``input_ids[:, 1:]``. Right padding keeps positions 0..len-1 for every real token.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError("one prompt per response is needed")
    lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(lengths), width), dtype=torch.long)
    response_mask = torch.zeros((len(lengths), width - 1), dtype=torch.float32)
    for row, (prompt, response) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        if not prompt:
            raise ValueError(f"sequence {row} has an empty prompt")
        tokens = list(prompt) + list(response)
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
        response_mask[row, len(prompt) - 1 : len(tokens) - 1] = 1.0
    return input_ids, attention_mask, response_mask


def scatter_per_token(
    target: torch.Tensor,
    rows: Sequence[Sequence[float] | None],
    response_mask: torch.Tensor,
    what: str,
) -> torch.Tensor:
    """``target`` (``[N, L-1]``) with row i's response positions set to ``rows[i]``
    (in place); rows given as None keep their values. ``what`` names the values in the
    error of a row whose length is not its response's."""
    for row, values in enumerate(rows):
        if values is None:
            continue
        positions = response_mask[row].nonzero().squeeze(-1)
        if len(values) != len(positions):
            raise ValueError(f"sample {row}: {len(values)} {what} for {len(positions)} tokens")
        target[row, positions] = torch.tensor(values, dtype=target.dtype, device=target.device)
    return target

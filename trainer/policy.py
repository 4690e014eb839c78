"""One policy of the pool: model, reference, tokenizer, optimizer, and its update.

The update is plumbing around the pure functions of :mod:`trainer.core`: per micro-batch
one forward and one call of an objective chosen by name from
:data:`trainer.core.OBJECTIVES` (``grpo``; ``remix`` under ReMix), then the auxiliary
terms the batch carries, each scored by its :data:`trainer.core.AUX_LOSSES` entry. What
it trains on is a :class:`LearnerBatch` that the sharing regime assembles: the policy's
own rollouts, possibly peer rollouts (PRP, with per-token importance weights) and
auxiliary terms on sequences of their own (:class:`AuxTerm`: SGT's NLL on rescued
successes). Under ReMix (SPEC 5) the batch also carries replayed samples with their
behaviour log-probs, and :meth:`Policy.train_step_remix` optimises the ``remix``
objective instead of ``grpo``. The objectives and terms name the metrics they report.

Log-probs are those of the sampling distribution (SPEC 9). The engine samples from
``softmax(logits / T)`` at the policy's ``temperature`` T (no top-k, no top-p), so every
log-prob that enters a ratio, an importance weight or the KL term is
``log_softmax(logits / T)`` of that same T, as in TRL's ``GRPOTrainer`` and verl:

- the update's current log-probs ``logp_theta`` and GRPO's old log-probs;
- the behaviour log-probs this policy hands out (:meth:`Policy.response_logprobs`: PRP's
  ``mu`` of its published rollouts) and ReMix's stored ones (``log pi_k``);
- the reference model's log-probs for the KL term: TRL scores its reference with the
  policy's temperature too, so ``KL(pi_T || ref_T)`` compares the two models' tempered
  distributions and is 0 while the policy equals its reference;
- ``actor/entropy`` (and the entropy bonus), the entropy of the tempered distribution
  that is being sampled, as TRL and verl compute it.

Each policy scores with its own temperature: PRP's learner scores a peer's tokens under
the learner's tempered distribution (the learner's side of ``pi_learner / mu``), while
``mu`` is the peer's own, at the peer's temperature. Two things keep temperature 1: the
auxiliary terms (SGT's NLL), supervised losses on the model's plain logits (as in SFT; no
ratio involves them), and greedy validation, where the temperature changes no argmax.

Precision and memory (:class:`~trainer.config.PolicyConfig`'s ``dtype``,
``gradient_checkpointing``, ``reference_on_cpu``, ``micro_batch_tokens``):

- master weights, gradients and the AdamW moments are float32 whatever ``dtype`` is:
  the model is loaded in float32 and the optimizer steps float32 parameters, so small
  updates are not rounded away. ``dtype`` is the *compute* dtype of the forward passes;
- ``float32``: no autocast at all (the CPU path is the plain float32 computation);
- ``bfloat16``: every forward (generation, the log-probs of the current policy, the
  update's forward, the auxiliary terms' forward, the reference's) runs under
  ``torch.autocast(device_type, dtype=torch.bfloat16)``; no loss scaling is needed
  (bfloat16 has float32's exponent range). Works on the CPU (tested against float32);
- ``float16``: the same under float16 autocast, with a ``torch.amp.GradScaler``
  (the losses are scaled before backward, the gradients unscaled before clipping, a
  step with inf/NaN gradients skipped and the scale lowered). Refused on a CPU device
  at setup (:class:`PrecisionError`): CPU float16 autocast is poorly supported and slow;
  use ``bfloat16`` there;
- whatever the compute dtype, the logits are cast to float32 before anything reads them
  (:meth:`Policy._forward`), so the log-softmax, log-probs, entropy, ratios, KL and the
  loss reductions are float32 (they are computed outside the autocast region);
- the reference model keeps float32 weights too and runs under the same autocast, so it
  computes exactly the policy's function while the two are equal (the KL term is 0
  there, as with ``float32``). ``reference_on_cpu`` keeps it in CPU memory instead of on
  the policy's device: its inputs move to the CPU for its forward and its log-probs come
  back. An offloaded reference runs in float32 without autocast (CPU half precision is
  slow); on a CPU device the option changes nothing. It saves ``4 x P`` bytes of
  accelerator memory at the cost of a CPU forward of the batch per step;
- ``gradient_checkpointing``: the model's layers recompute their activations in the
  backward (``torch.utils.checkpoint`` with ``use_reentrant=False``), during the update
  only (its forward passes with gradients). Hugging Face checkpoints a layer only in
  training mode, and the policy keeps dropout off (eval mode), so the update switches on
  the ``training`` flag of the checkpointed layers alone (not of their dropout modules)
  while it runs; generation and the no-grad scoring passes never checkpoint. Every
  scoring forward passes ``use_cache=False`` (no KV cache is built outside generation);
- ``micro_batch_tokens``: micro-batches by a token budget instead of
  ``micro_batch_size`` sequences (:func:`token_budget_micro_batches`); the micro-batches'
  losses are weighted by their share of the mini-batch's tokens (or sequences) as
  before, so the loss and gradient are those of one big batch.

Generation runs through :class:`~trainer.rollout.HFRolloutEngine` with the policy's
``rollout_cache`` (``dynamic`` or ``static`` KV cache) and ``rollout_compile`` (a
compiled decoding forward: static cache and a CUDA device only; a CPU policy refuses it
at setup with :class:`RolloutSetupError`). Neither changes the sampled distribution.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainer import metrics as m
from trainer.batch import build_sequences
from trainer.chat import format_prompt
from trainer.config import GRPOConfig, PolicyConfig
from trainer.core import (
    ADVANTAGE_ESTIMATORS,
    AUX_LOSSES,
    OBJECTIVES,
    AuxLoss,
    Objective,
    ObjectiveInputs,
    ObjectiveSettings,
    TokenStat,
    token_log_probs,
    token_log_probs_and_entropy,
)
from trainer.models import fuse_activations, load_causal_lm, load_tokenizer
from trainer.remix.losses import RemixObjective
from trainer.rollout import HFRolloutEngine, RolloutBatch
from trainer.rollout.engine import CacheKind
from trainer.tasks import Problem
from trainer.tasks.rewards import RewardFn
from trainer.thl import encode_text


class PrecisionError(ValueError):
    """A precision setting the policy's device cannot run; the message says what to use."""


class RolloutSetupError(ValueError):
    """A rollout engine setting the policy's device cannot run; the message says what to
    change (``rollout_compile`` on a CPU device)."""


COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
""":attr:`PolicyConfig.dtype` -> the autocast dtype of the forward passes."""


@dataclass
class Rollouts:
    """A step's rollouts for one policy, scored: ``G`` samples per prompt, prompt-major."""

    problems: list[Problem]
    batch: RolloutBatch
    rewards: torch.Tensor  # [B * G], on the CPU (bookkeeping; the update moves advantages)
    group_size: int
    success_threshold: float

    @property
    def successes(self) -> torch.Tensor:
        """``[B * G]`` bool: reward reached the success threshold."""
        return self.rewards >= self.success_threshold

    def rows_of(self, prompt_index: int) -> range:
        """Sample indices of prompt ``prompt_index``."""
        return range(prompt_index * self.group_size, (prompt_index + 1) * self.group_size)


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
    """What a policy optimises at one step.

    ``token_weights[i]`` is None for on-policy samples and, for an off-policy (peer)
    sample, one weight per response token that multiplies its surrogate (PRP's truncated
    importance weight). ``aux_terms`` are losses on sequences of their own that the
    regime attaches (SGT's NLL on rescued successes); none, the objective is exactly
    the policy objective.

    ``behaviour_logp[i]`` (ReMix) is None for a sample whose ratio is taken against the
    current policy ``pi_k`` (own fresh rollouts; PRP's peer rollouts, whose
    off-policyness ``token_weights`` correct) and, for a replayed sample, the per-token
    log-probs of the past version that sampled it. An empty list: nothing replayed.

    ``old_logp[i]``, where the regime has already scored sample i with the policy as it
    is before the update, is that per-token ``log pi_old``; the update then takes it
    instead of scoring the sample again. None (or an empty list): the update computes it.

    ``is_behaviour_logp[i]`` (PRP with its importance correction) is, for a peer sample
    whose ``token_weights[i]`` is None, the peer's behaviour log-prob ``mu`` of each of
    its response tokens: the update then computes the sample's weights itself,
    ``w_t = min(pi_old(t) / mu(t), is_c_bar)`` (:func:`truncated_importance_weights`), from the
    ``log pi_old`` it has in hand (in a single pass its own forward's detached log-probs:
    no forward of its own for the weights), and writes them into ``token_weights[i]``.
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    advantages: torch.Tensor  # [N]
    token_weights: list[list[float] | None] = field(default_factory=list)
    aux_terms: list[AuxTerm] = field(default_factory=list)
    behaviour_logp: list[list[float] | None] = field(default_factory=list)
    old_logp: list[list[float] | None] = field(default_factory=list)
    is_behaviour_logp: list[list[float] | None] = field(default_factory=list)
    is_c_bar: float = 1.0

    @property
    def deferred_weights(self) -> list[int]:
        """The samples whose token weights the update computes (``is_behaviour_logp``
        given, ``token_weights`` not yet)."""
        weights = list(self.token_weights) or [None] * len(self)
        return [
            row
            for row, (mu, given) in enumerate(zip(self.is_behaviour_logp, weights, strict=False))
            if mu is not None and given is None
        ]

    @property
    def replayed(self) -> list[bool]:
        """Per sample: is it a ReMix replayed sample?"""
        if not self.behaviour_logp:
            return [False] * len(self)
        return [b is not None for b in self.behaviour_logp]

    @classmethod
    def on_policy(cls, rollouts: Rollouts, advantages: torch.Tensor) -> LearnerBatch:
        batch = rollouts.batch
        return cls(
            prompt_ids=batch.prompt_ids,
            response_ids=batch.response_ids,
            advantages=advantages,
            token_weights=[None] * len(batch),
        )

    def __len__(self) -> int:
        return len(self.response_ids)


class Policy:
    """A policy worker's model state and its training step."""

    def __init__(
        self,
        config: PolicyConfig,
        grpo: GRPOConfig,
        *,
        model_dir: Path,
        tokenizer_dir: Path,
        reward_fn: RewardFn,
        success_threshold: float = 1.0,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config
        self.device = torch.device(device)
        self.model_dir = Path(model_dir)
        """Where the base model's weights are (:meth:`restart_from_base` reads them again)."""
        self.grpo = grpo
        self.reward_fn = reward_fn
        self.success_threshold = success_threshold
        self.compute_dtype = _compute_dtype(config.dtype, self.device)
        _check_rollout_device(config, self.device)  # before any model is loaded
        self.tokenizer = load_tokenizer(tokenizer_dir)
        # float32 master weights whatever the compute dtype (module docstring). Loaded on
        # the CPU and copied there, then moved: the reference never passes through the
        # device when it stays on the CPU.
        model = load_causal_lm(model_dir, "float32", device="cpu")
        # gelu_new as torch's fused kernel: the same function to float rounding, faster
        # (the reference, copied below, gets it too: KL 0 while the two are equal).
        fuse_activations(model)
        # Dropout off, as in every RL fine-tuning recipe: rollouts, old log-probs and the
        # update must see the same function. Gradients flow in eval mode all the same.
        model.eval()
        reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.model = model if self.device.type == "cpu" else model.to(self.device)
        # The reference is a copy on the same device (or on the CPU: reference_on_cpu),
        # and AdamW allocates its moments beside each parameter: the rest of the training
        # state lives on ``device``.
        self.reference_device = torch.device("cpu") if config.reference_on_cpu else self.device
        self.reference = (
            reference if self.reference_device.type == "cpu" else reference.to(self.device)
        )
        if config.gradient_checkpointing:
            _enable_checkpointing(self.model)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.lr, weight_decay=grpo.weight_decay
        )
        self.scaler = (
            torch.amp.GradScaler(self.device.type) if self.compute_dtype == torch.float16 else None
        )
        self.engine = HFRolloutEngine(
            self.model,
            self.tokenizer,
            cache=typing.cast(CacheKind, config.rollout_cache),  # the engine refuses others
            compile=config.rollout_compile,
        )
        self.pad_id = self.engine.pad_id

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def temperature(self) -> float:
        """T of the sampling distribution ``softmax(logits / T)``, and of every log-prob."""
        return self.config.temperature

    def prompt_texts(self, problems: Sequence[Problem]) -> list[str]:
        return [
            format_prompt(self.tokenizer, p.prompt, self.config.chat_template) for p in problems
        ]

    def encode_response(self, text: str, *, with_eos: bool = True) -> list[int]:
        """``text`` as this policy's response ids, by THL's text path
        (:func:`trainer.thl.encode_text`: a literal ``</s>`` stays text), with the EOS
        appended when ``with_eos``."""
        return encode_text(text, self.tokenizer, ended_with_eos=with_eos).target_ids

    def restart_from_base(self) -> None:
        """The base model's weights again, read from :attr:`model_dir` as at construction,
        and a fresh optimizer (and gradient scaler) state; the reference is kept
        (``sequential_sft`` with ``sft_from: "base"`` starts its SFT stage here)."""
        base = load_causal_lm(self.model_dir, "float32", device="cpu")
        self.model.load_state_dict(base.state_dict())
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()
        if self.scaler is not None:
            self.scaler = torch.amp.GradScaler(self.device.type)

    def reincarnate(self) -> None:
        """ReMix's policy reincarnation: the reference (KL anchor) becomes the current policy."""
        self.reference.load_state_dict(self.model.state_dict())

    # --- rollouts -----------------------------------------------------------------------
    def rollout(self, problems: list[Problem]) -> Rollouts:
        """Sample G responses per problem and score them."""
        texts = self.prompt_texts(problems)
        with self._autocast(self.model):
            batch = self.engine.generate(
                texts,
                n=self.config.group_size,
                max_new_tokens=self.config.max_new_tokens,
                temperature=self.temperature,
            )
        g = self.config.group_size
        rewards = self.reward_fn(
            [t for t in texts for _ in range(g)],
            batch.response_texts,
            [p.answer for p in problems for _ in range(g)],
        )
        return Rollouts(
            problems,
            batch,
            torch.tensor(rewards, dtype=torch.float32),
            g,
            self.success_threshold,
        )

    def advantages(self, rollouts: Rollouts) -> torch.Tensor:
        """GRPO advantages [B * G], one per response (the same on all its tokens)."""
        estimator = ADVANTAGE_ESTIMATORS.get(self.grpo.advantage_estimator)
        grouped = rollouts.rewards.view(-1, rollouts.group_size)
        return estimator(grouped, eps=self.grpo.adv_eps).reshape(-1)

    def rollout_metrics(self, rollouts: Rollouts) -> dict[str, float]:
        lengths = [len(ids) for ids in rollouts.batch.response_ids]
        return {
            m.TRAIN_REWARD_MEAN: float(rollouts.rewards.mean()),
            m.TRAIN_ACCURACY: float(rollouts.successes.float().mean()),
            m.RESPONSE_LENGTH_MEAN: sum(lengths) / len(lengths),
            m.RESPONSE_LENGTH_MAX: float(max(lengths)),
        }

    @torch.no_grad()
    def response_logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]]
    ) -> list[list[float]]:
        """Per response token, its log-prob under the current policy's sampling
        distribution, ``log_softmax(logits / T)`` at this policy's temperature.

        For this policy's own rollouts it is the probability they were sampled with (PRP's
        ``mu``); for a peer's tokens it is this policy's side of the importance weight,
        at this policy's temperature (the peer's ``mu`` is at the peer's).
        """
        input_ids, attention_mask, response_mask = self._sequences(prompt_ids, response_ids)
        logp = self._log_probs(self.model, input_ids, attention_mask, response_mask)
        return [logp[row][response_mask[row].bool()].tolist() for row in range(len(response_ids))]

    def validate(self, problems: list[Problem], batch_size: int = 64) -> float:
        """``val/reward@1``: mean reward of one greedy sample per held-out problem."""
        rewards = self.validation_rewards(problems, batch_size)
        return sum(rewards) / len(rewards)

    def validation_metrics(self, problems: list[Problem], batch_size: int = 64) -> dict[str, float]:
        """``val/reward@1``, and ``val/reward@1/<skill>`` per skill when the problems
        exercise several (:attr:`Problem.skill`; one greedy sample each)."""
        rewards = self.validation_rewards(problems, batch_size)
        metrics = {m.VAL_REWARD_AT_1: sum(rewards) / len(rewards)}
        by_skill: dict[str, list[float]] = {}
        for problem, reward in zip(problems, rewards, strict=True):
            if problem.skill:
                by_skill.setdefault(problem.skill, []).append(reward)
        if len(by_skill) > 1:
            for skill, values in sorted(by_skill.items()):
                metrics[f"val/reward@1/{skill}"] = sum(values) / len(values)
        return metrics

    @torch.no_grad()
    def validation_rewards(self, problems: list[Problem], batch_size: int = 64) -> list[float]:
        """The reward of one greedy sample per held-out problem, in order."""
        rewards: list[float] = []
        for start in range(0, len(problems), batch_size):
            chunk = problems[start : start + batch_size]
            texts = self.prompt_texts(chunk)
            with self._autocast(self.model):
                out = self.engine.generate(
                    texts,
                    n=1,
                    max_new_tokens=self.config.max_new_tokens,
                    temperature=1.0,
                    greedy=True,
                )
            rewards += self.reward_fn(texts, out.response_texts, [p.answer for p in chunk])
        return rewards

    # --- the update ---------------------------------------------------------------------
    def train_step(self, batch: LearnerBatch) -> dict[str, float]:
        """Optimise the ``grpo`` objective (plus the batch's auxiliary terms); return the
        actor metrics and those of the terms."""
        if any(batch.replayed):
            raise ValueError("a batch with replayed samples needs train_step_remix")
        return self._train(batch, None)[0]

    def train_step_remix(
        self, batch: LearnerBatch, objective: RemixObjective
    ) -> tuple[dict[str, float], list[list[float]]]:
        """Optimise the ``remix`` objective on ``batch`` (fresh and replayed samples).

        ``objective.updates_per_batch`` passes over the batch (UTD), each split into
        ``grpo.mini_batches`` optimizer steps. Returns the actor and ``remix/*`` metrics,
        and per sample the log-probs of its response tokens under the policy as it was
        before the update (``log pi_k``): the behaviour log-probs of the fresh samples,
        which the replay keeps.
        """
        metrics, old_logp, response_mask = self._train(batch, objective)
        assert old_logp is not None  # ReMix always computes log pi_k
        behaviour = [old_logp[row][response_mask[row].bool()].tolist() for row in range(len(batch))]
        return metrics | {m.REMIX_LAMBDA: objective.kl_lambda}, behaviour

    def _train(
        self, batch: LearnerBatch, remix: RemixObjective | None
    ) -> tuple[dict[str, float], torch.Tensor | None, torch.Tensor]:
        """The update of :meth:`train_step` (``remix`` None: the ``grpo`` objective) or
        :meth:`train_step_remix` (``remix``); also returns ``old_logp`` (None when no
        separate forward was needed) and ``response_mask``. A batch without samples
        trains its auxiliary terms alone (:meth:`_train_aux_only`)."""
        if not len(batch):
            if remix is not None:
                raise ValueError("a ReMix update needs the policy's own samples")
            return self._train_aux_only(batch), None, torch.zeros((0, 0))
        input_ids, attention_mask, response_mask = self._sequences(
            batch.prompt_ids, batch.response_ids
        )
        bounds = _split_bounds(len(batch), self.grpo.mini_batches)
        passes = self.grpo.epochs if remix is None else remix.updates_per_batch
        # One pass of one mini-batch: the policy that sampled is the one being updated, so
        # the ratio's denominator is the update's own log-probs, detached (``None`` here);
        # a separate forward for them would compute the same numbers again. Otherwise one
        # forward scores the rows whose old log-probs the batch does not carry.
        old_logp = (
            None
            if remix is None and passes == 1 and len(bounds) == 1
            else self._old_logp(batch, input_ids, attention_mask, response_mask)
        )
        ref_logp = (
            self._log_probs(self.reference, input_ids, attention_mask, response_mask)
            if self.grpo.kl_coef > 0 or remix is not None
            else None
        )
        token_weights = self._token_weights(batch, response_mask)
        deferred = self._deferred_weights(batch, response_mask)
        if deferred is not None:
            if token_weights is None:
                token_weights = torch.ones_like(response_mask, dtype=torch.float32)
            if old_logp is not None:  # in hand before the update: weigh now
                deferred.weigh(token_weights, old_logp)
        inputs = ObjectiveInputs(
            mask=response_mask,
            advantages=batch.advantages.to(self.device)[:, None].expand_as(response_mask),
            old_logp=old_logp,
            ref_logp=ref_logp,
            token_weights=token_weights,
        )
        if remix is not None:
            assert old_logp is not None
            inputs = dataclasses.replace(
                inputs,
                behaviour_logp=self._behaviour_logp(batch, old_logp, response_mask),
                replayed=torch.tensor(batch.replayed, dtype=torch.bool, device=self.device),
            )
        objective = OBJECTIVES.get("grpo" if remix is None else "remix")
        settings = self._objective_settings(remix)
        aux_sets = self._aux_sets(batch)

        totals = _Tally()
        updates = 0
        for _ in range(passes):
            for start, stop in bounds:
                rows = slice(start, stop)
                totals.merge(
                    self._update(
                        input_ids[rows],
                        attention_mask[rows],
                        inputs.rows(rows),
                        objective,
                        settings,
                        aux_sets,
                        deferred.rows(rows) if deferred and old_logp is None else None,
                    )
                )
                updates += 1
        if deferred is not None:
            assert inputs.token_weights is not None
            if not batch.token_weights:
                batch.token_weights = [None] * len(batch)
            for row in deferred.samples:
                batch.token_weights[row] = inputs.token_weights[row][
                    response_mask[row].bool()
                ].tolist()
        metrics = totals.metrics(updates) | {
            m.KL_COEF: self.grpo.kl_coef,
            m.LR: self.optimizer.param_groups[0]["lr"],
        }
        return metrics, old_logp, response_mask

    def _aux_sets(self, batch: LearnerBatch) -> list[_AuxSet]:
        """The batch's auxiliary terms that train something, their sequences built."""
        return [
            _AuxSet(
                term,
                AUX_LOSSES.get(term.loss),
                *self._sequences(term.prompt_ids, term.response_ids),
            )
            for term in batch.aux_terms
            if term.response_ids and term.coef > 0
        ]

    def _train_aux_only(self, batch: LearnerBatch) -> dict[str, float]:
        """One optimizer step on the auxiliary terms alone, for a batch with no samples of
        its own: no policy-gradient, KL or entropy term (``sequential_sft``'s stage 2
        trains only the NLL of buffered peer successes). Reports each term's metric, the
        gradient norm and the learning rate; with no term to train, it steps nothing."""
        metrics = {m.LR: self.optimizer.param_groups[0]["lr"]}
        aux_sets = self._aux_sets(batch)
        if not aux_sets:
            return metrics
        self.optimizer.zero_grad(set_to_none=True)
        tally = _Tally()
        self._aux_and_step(tally, aux_sets)
        return tally.metrics(1) | metrics

    def _objective_settings(self, remix: RemixObjective | None) -> ObjectiveSettings:
        """The objective's constants: GRPO's config, and ReMix's of this step."""
        grpo = self.grpo
        settings = ObjectiveSettings(
            clip_eps=grpo.clip_eps,
            kl_coef=grpo.kl_coef,
            kl_clamp=grpo.kl_clamp,
            entropy_coef=grpo.entropy_coef,
            agg=grpo.loss_agg,
            kl_estimator=grpo.kl_estimator,
        )
        if remix is None:
            return settings
        return dataclasses.replace(settings, c_bar=remix.c_bar, kl_lambda=remix.kl_lambda)

    def _old_logp(
        self,
        batch: LearnerBatch,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``[N, L-1]`` ``log pi_old``: the batch's :attr:`LearnerBatch.old_logp` where it
        has them, one forward (:meth:`_log_probs`) over the other rows only."""
        given = list(batch.old_logp) or [None] * len(batch)
        missing = [row for row, values in enumerate(given) if values is None]
        old_logp = torch.zeros(
            (input_ids.shape[0], input_ids.shape[1] - 1),
            dtype=torch.float32,
            device=input_ids.device,
        )
        if missing:
            rows = torch.tensor(missing, dtype=torch.long, device=input_ids.device)
            old_logp[rows] = self._log_probs(
                self.model, input_ids[rows], attention_mask[rows], response_mask[rows]
            )
        return _scatter_per_token(old_logp, given, response_mask, "old log-probs")

    @staticmethod
    def _behaviour_logp(
        batch: LearnerBatch, old_logp: torch.Tensor, response_mask: torch.Tensor
    ) -> torch.Tensor:
        """``[N, L-1]``: ``old_logp`` (``log pi_k``) on fresh samples, the stored behaviour
        log-probs on replayed ones."""
        return _scatter_per_token(
            old_logp.clone(), batch.behaviour_logp, response_mask, "behaviour log-probs"
        )

    def _deferred_weights(
        self, batch: LearnerBatch, response_mask: torch.Tensor
    ) -> _DeferredWeights | None:
        """The samples whose importance weights the update computes
        (:attr:`LearnerBatch.deferred_weights`) with their ``mu``; None when there are none."""
        samples = batch.deferred_weights
        if not samples:
            return None
        wanted = set(samples)
        given = [mu if row in wanted else None for row, mu in enumerate(batch.is_behaviour_logp)]
        mu = _scatter_per_token(
            torch.zeros_like(response_mask, dtype=torch.float32),
            given + [None] * (len(batch) - len(given)),
            response_mask,
            "behaviour log-probs",
        )
        rows = torch.zeros(len(batch), dtype=torch.bool, device=response_mask.device)
        rows[samples] = True
        return _DeferredWeights(samples, rows[:, None] & response_mask.bool(), mu, batch.is_c_bar)

    def _token_weights(
        self, batch: LearnerBatch, response_mask: torch.Tensor
    ) -> torch.Tensor | None:
        """``[N, L-1]`` surrogate weights: 1 on own tokens, the given ones on peer tokens."""
        if all(w is None for w in batch.token_weights):
            return None
        return _scatter_per_token(
            torch.ones_like(response_mask), batch.token_weights, response_mask, "token weights"
        )

    def _update(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        inputs: ObjectiveInputs,
        objective: Objective,
        settings: ObjectiveSettings,
        aux_sets: Sequence[_AuxSet],
        deferred: _DeferredWeights | None = None,
    ) -> _Tally:
        """One optimizer step on a mini-batch, accumulated over micro-batches.

        Per micro-batch: one forward, one call of ``objective`` on that micro-batch's
        view of ``inputs``, one backward. Each micro-batch's aggregated loss (and each
        metric it reports) is weighted by its share of the mini-batch's tokens
        (token-mean) or sequences (seq-mean-token-mean), so the gradient equals that of
        the loss aggregated over the whole mini-batch. Then every auxiliary set adds its
        term (:meth:`_aux_backward`) to the same optimizer step.

        ``deferred`` (a single pass without old log-probs): the peer tokens' importance
        weights are computed from this forward's detached log-probs (the ratio's
        denominator too) and written into ``inputs.token_weights`` before the objective
        reads them.
        """
        self.optimizer.zero_grad(set_to_none=True)
        if settings.agg == "token-mean":
            weights = inputs.mask.sum(dim=1)
        else:
            weights = (inputs.mask.sum(dim=1) > 0).float()
        total_weight = float(weights.sum())
        tally = _Tally()
        with self._checkpointing():
            for rows in self._micro_batches(attention_mask):
                share = float(weights[rows].sum()) / total_weight
                if share == 0.0:
                    continue
                logits, targets, width = self._forward(
                    self.model,
                    input_ids[rows],
                    attention_mask[rows],
                    self.temperature,
                    first_scored_column(inputs.mask[rows]),
                )
                start = width - 1 - targets.shape[1]  # the first column scored
                # One log-softmax gives both; the entropy's backward runs only when it
                # enters the loss (entropy_coef != 0), else it is a metric only.
                logp, entropy = token_log_probs_and_entropy(logits, targets)
                micro = inputs.rows(rows, width - 1, start=start)
                if deferred is not None:
                    assert micro.token_weights is not None
                    deferred.rows(rows, width - 1, start).weigh(micro.token_weights, logp.detach())
                out = objective(
                    logp=logp,
                    entropy=entropy,
                    inputs=micro,
                    settings=settings,
                )
                self._backward(out.loss * share)
                for key, value in out.metrics.items():
                    tally.add(key, value.item() * share)
                for stat in out.token_stats:
                    tally.add_tokens(stat)
            self._aux_and_step(tally, aux_sets)
        return tally

    def _aux_and_step(self, tally: _Tally, aux_sets: list[_AuxSet]) -> None:
        """Backward the batch's aux terms onto the gradients already accumulated, clip,
        and step (a non-finite gradient norm skips the step)."""
        for aux in aux_sets:
            tally.add(aux.term.metric, self._aux_backward(aux))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grpo.max_grad_norm)
        )
        tally.add(m.GRAD_NORM, grad_norm)
        if self.scaler is not None:
            # Skips the step when the unscaled gradients hold an inf/NaN, and adapts the
            # scale either way.
            self.scaler.step(self.optimizer)
            self.scaler.update()
        elif math.isfinite(grad_norm):
            self.optimizer.step()

    def _backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; under float16, of the loss scaled by the gradient scaler."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def _aux_backward(self, aux: _AuxSet) -> float:
        """Backward ``coef`` x the token-mean of the term's loss over its sequences (its
        :data:`trainer.core.AUX_LOSSES` entry sums each micro-batch's tokens); return
        that token-mean.

        A supervised loss on the model's logits at temperature 1, as in SFT: no ratio or
        importance weight involves it, so the sampling temperature plays no part.
        """
        total_tokens = float(aux.response_mask.sum())
        total = 0.0
        for rows in self._micro_batches(aux.attention_mask):
            logits, targets, width = self._forward(
                self.model,
                aux.input_ids[rows],
                aux.attention_mask[rows],
                1.0,
                first_scored_column(aux.response_mask[rows]),
            )
            mask = aux.response_mask[rows, width - 1 - targets.shape[1] : width - 1]
            loss_sum = aux.loss_fn(token_log_probs(logits, targets), mask)
            self._backward(aux.term.coef * loss_sum / total_tokens)
            total += loss_sum.item()
        return total / total_tokens

    def _sequences(
        self, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`trainer.batch.build_sequences` on the policy's device."""
        tensors = build_sequences(prompt_ids, response_ids, self.pad_id)
        input_ids, attention_mask, response_mask = (t.to(self.device) for t in tensors)
        return input_ids, attention_mask, response_mask

    def _micro_batches(self, attention_mask: torch.Tensor) -> list[slice]:
        """The rows of ``attention_mask`` (``[n, L]``, right-padded) in consecutive
        micro-batches: of ``micro_batch_tokens`` padded tokens at most
        (:func:`token_budget_micro_batches`) when set, else of ``micro_batch_size`` rows."""
        budget = self.config.micro_batch_tokens
        if budget is not None:
            return token_budget_micro_batches(attention_mask.sum(dim=1).tolist(), budget)
        size = self.config.micro_batch_size
        n = attention_mask.shape[0]
        return [slice(start, start + size) for start in range(0, n, size)]

    def _autocast(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """The precision context of a forward of ``model``: none under float32, and for a
        model away from the policy's device (an offloaded reference, which runs float32);
        else ``torch.autocast`` to the compute dtype."""
        if self.compute_dtype == torch.float32 or _device_of(model).type != self.device.type:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.compute_dtype)

    @contextlib.contextmanager
    def _checkpointing(self) -> Iterator[None]:
        """While the update runs, with ``gradient_checkpointing``: the checkpointed layers
        in training mode, which is when Hugging Face checkpoints them; their dropout
        modules (and the rest of the model) stay in eval mode. A no-op otherwise."""
        if not self.config.gradient_checkpointing:
            yield
            return
        layers = [
            module
            for module in self.model.modules()
            if getattr(module, "gradient_checkpointing", False)
        ]
        for layer in layers:
            layer.training = True
        try:
            yield
        finally:
            for layer in layers:
                layer.training = False

    def _forward(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        temperature: float,
        first: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Logits ``[n, w-1-first, V]`` (float32) divided by ``temperature``, predicting
        ``targets = input_ids[:, first+1:w]``; trims padding. Their softmax is the
        distribution the engine samples from at that temperature (its log-softmax: the
        tokens' log-probs).

        ``first`` (:func:`first_scored_column`): the model still reads every position,
        but its LM head (and everything after it: log-softmax, entropy) runs only from
        target column ``first`` on, through transformers' ``logits_to_keep``; no prompt
        position's ``[V]`` logits are made. A model without ``logits_to_keep`` makes all
        of them (first 0); the caller reads where the targets start from their width:
        ``width - 1 - targets.shape[1]``. Only the model's forward runs under the
        compute dtype's autocast (:meth:`_autocast`); the logits are cast to float32
        before anything else."""
        width = int(attention_mask.sum(dim=1).max())
        first = first if 0 < first < width - 1 and _keeps_logits(model) else 0
        extra = {"logits_to_keep": width - first} if first else {}
        with self._autocast(model):
            logits = model(
                input_ids=input_ids[:, :width],
                attention_mask=attention_mask[:, :width],
                use_cache=False,
                **extra,
            ).logits[:, :-1]
        logits = logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        return logits, input_ids[:, first + 1 : width], width

    @torch.no_grad()
    def _log_probs(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-token log-probs [N, L-1] of ``input_ids[:, 1:]`` under ``model``'s logits at
        this policy's temperature: the current model (old and behaviour log-probs) and the
        reference (the KL anchor) alike. With ``response_mask`` ([N, L-1]) only the
        columns from each micro-batch's first response token on are scored (the others
        stay 0: nothing reads them). A model on another device (the reference under
        ``reference_on_cpu``) gets its inputs there; the log-probs come back to
        ``input_ids``' device."""
        out = torch.zeros(
            (input_ids.shape[0], input_ids.shape[1] - 1),
            dtype=torch.float32,
            device=input_ids.device,
        )
        device = _device_of(model)
        for rows in self._micro_batches(attention_mask):
            first = 0 if response_mask is None else first_scored_column(response_mask[rows])
            logits, targets, width = self._forward(
                model,
                input_ids[rows].to(device),
                attention_mask[rows].to(device),
                self.temperature,
                first,
            )
            out[rows, width - 1 - targets.shape[1] : width - 1] = token_log_probs(
                logits, targets
            ).to(out.device)
        return out


def truncated_importance_weights(
    learner_logp: torch.Tensor, behaviour_logp: torch.Tensor, c_bar: float
) -> torch.Tensor:
    """PRP's truncated importance weights ``w_t = min(pi_old(t) / mu(t), c_bar)`` per token
    (SPEC 4.1), from the log-probs: ``min(exp(min(log pi_old - log mu, 50)), c_bar)`` (the
    log-ratio bounded so that ``exp`` stays finite; ``c_bar`` bounds it far lower)."""
    return torch.clamp(torch.exp(torch.clamp(learner_logp - behaviour_logp, max=50.0)), max=c_bar)


@dataclass(frozen=True)
class _DeferredWeights:
    """Peer tokens whose importance weights the update computes: ``mask`` (``[n, L-1]``)
    true on them, ``mu`` their behaviour log-probs there; ``samples`` the batch's rows."""

    samples: list[int]
    mask: torch.Tensor
    mu: torch.Tensor
    c_bar: float

    def rows(self, rows: slice, positions: int | None = None, start: int = 0) -> _DeferredWeights:
        """Views of rows ``rows``, positions ``[start, positions)``, as
        :meth:`ObjectiveInputs.rows` cuts the objective's inputs."""
        columns = slice(start, positions)
        return _DeferredWeights(
            self.samples, self.mask[rows, columns], self.mu[rows, columns], self.c_bar
        )

    def weigh(self, token_weights: torch.Tensor, old_logp: torch.Tensor) -> None:
        """Write the weights against ``old_logp`` (``log pi_old``, same shape) into
        ``token_weights`` (in place) on the masked tokens."""
        weights = truncated_importance_weights(old_logp, self.mu, self.c_bar).to(
            token_weights.dtype
        )
        token_weights.copy_(torch.where(self.mask, weights, token_weights))


@dataclass(frozen=True)
class _AuxSet:
    """An :class:`AuxTerm` with its loss function looked up and its sequences built:
    ``input_ids [n, L]``, ``attention_mask [n, L]``, ``response_mask [n, L-1]``."""

    term: AuxTerm
    loss_fn: AuxLoss
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor


class _Tally:
    """Metric sums over micro-batches or optimizer steps.

    ``values`` add up (the step reports their mean over its optimizer steps); the
    per-token statistics of :class:`trainer.core.TokenStat` keep their sum, count and max
    over every token.
    """

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.tokens: dict[tuple[str, str], list[float]] = {}

    def add(self, key: str, value: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + value

    def add_tokens(self, stat: TokenStat) -> None:
        entry = self.tokens.setdefault((stat.mean_key, stat.max_key), [0.0, 0.0, 0.0])
        entry[0] += float(stat.values.sum())
        entry[1] += float(stat.values.numel())
        if stat.values.numel():
            entry[2] = max(entry[2], float(stat.values.max()))

    def merge(self, other: _Tally) -> None:
        for key, value in other.values.items():
            self.add(key, value)
        for keys, (total, count, peak) in other.tokens.items():
            entry = self.tokens.setdefault(keys, [0.0, 0.0, 0.0])
            entry[0] += total
            entry[1] += count
            entry[2] = max(entry[2], peak)

    def metrics(self, steps: int) -> dict[str, float]:
        """``values`` averaged over ``steps``; each token statistic's mean and max."""
        result = {key: value / steps for key, value in self.values.items()}
        for (mean_key, max_key), (total, count, peak) in self.tokens.items():
            result[mean_key] = total / max(count, 1.0)
            result[max_key] = peak
        return result


def _scatter_per_token(
    target: torch.Tensor,
    rows: Sequence[Sequence[float] | None],
    response_mask: torch.Tensor,
    what: str,
) -> torch.Tensor:
    """``target`` (``[N, L-1]``) with row i's response positions set to ``rows[i]``; rows
    given as None keep their values."""
    for row, values in enumerate(rows):
        if values is None:
            continue
        positions = response_mask[row].nonzero().squeeze(-1)
        if len(values) != len(positions):
            raise ValueError(f"sample {row}: {len(values)} {what} for {len(positions)} tokens")
        target[row, positions] = torch.tensor(values, dtype=target.dtype, device=target.device)
    return target


def token_budget_micro_batches(lengths: Sequence[int], budget: int) -> list[slice]:
    """Consecutive micro-batches of the sequences of ``lengths`` (real tokens of each,
    right-padded), each as large as its padded size allows: a micro-batch of rows
    ``i..j`` is padded to its longest sequence, so it costs ``(j - i + 1) x max(lengths
    [i..j])`` tokens, and a sequence joins the current micro-batch while that stays
    within ``budget``. Every micro-batch has one sequence at least (a sequence longer
    than the budget goes alone); the order of the rows is kept."""
    if budget < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {budget}")
    batches: list[slice] = []
    start, longest = 0, 0
    for row, length in enumerate(lengths):
        widest = max(longest, int(length))
        if row > start and (row - start + 1) * widest > budget:
            batches.append(slice(start, row))
            start, widest = row, int(length)
        longest = widest
    if len(lengths) > start:
        batches.append(slice(start, len(lengths)))
    return batches


def _check_rollout_device(config: PolicyConfig, device: torch.device) -> None:
    """:class:`RolloutSetupError` when ``config.rollout_compile`` asks for a compiled
    decoding forward on a device other than CUDA (the config cannot tell where a policy
    runs, so :meth:`RunConfig.validate` leaves this rule to the policy's setup)."""
    if config.rollout_compile and device.type != "cuda":
        raise RolloutSetupError(
            f"policy {config.name!r}: rollout_compile compiles the decoding forward on CUDA "
            f"only, and this policy runs on {device}; set rollout_compile to false (keep "
            "rollout_cache 'static' if you like), or give the policy a GPU"
        )


def _compute_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The autocast dtype of ``dtype`` on ``device``; :class:`PrecisionError` for float16
    on the CPU or an unknown name."""
    if dtype not in COMPUTE_DTYPES:
        raise PrecisionError(f"unknown dtype {dtype!r}; use one of {tuple(COMPUTE_DTYPES)}")
    if dtype == "float16" and device.type == "cpu":
        raise PrecisionError(
            "dtype 'float16' needs an accelerator (float16 autocast with a gradient "
            "scaler); on the CPU use 'bfloat16' (autocast, no scaler) or 'float32'"
        )
    return COMPUTE_DTYPES[dtype]


def _device_of(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters (one device per model here)."""
    return next(model.parameters()).device


def _enable_checkpointing(model: torch.nn.Module) -> None:
    """Hugging Face activation checkpointing with ``use_reentrant=False``
    (``activation_checkpointing_enable``, or ``gradient_checkpointing_enable`` on
    transformers before 5); it acts only on layers in training mode
    (:meth:`Policy._checkpointing`)."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)  # type: ignore[operator]


def _split_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, near-equal ``[start, stop)`` ranges covering ``range(n)``."""
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for index in range(parts):
        stop = start + base + (1 if index < extra else 0)
        if stop > start:
            bounds.append((start, stop))
        start = stop
    return bounds


def first_scored_column(response_mask: torch.Tensor) -> int:
    """The first target column that any row of ``response_mask`` (``[n, L-1]``) scores:
    the earliest response token of these rows (right-padded sequences put each row's
    prompt first); 0 when no row scores any."""
    columns = response_mask.any(dim=0).nonzero()
    return int(columns[0]) if len(columns) else 0


def _keeps_logits(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward takes transformers' ``logits_to_keep`` (every causal
    LM of transformers 5 does; a custom model may not: it then makes all logits). Read
    once per model class: this runs on every forward."""
    return _class_keeps_logits(type(model))


@functools.cache
def _class_keeps_logits(model_class: type) -> bool:
    forward = getattr(model_class, "forward", None)
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False

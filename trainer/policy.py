"""One policy of the pool: model, reference, tokenizer, optimizer, and its update.

The policy is model state (model, reference, optimizer, rollout engine) and the
forward/backward loop of its update, which is plumbing around the pure functions of
:mod:`trainer.core`: per micro-batch one forward and one call of the objective that the
run config names (:attr:`trainer.config.RunConfig.objective`), looked up in
:data:`trainer.core.OBJECTIVES` and called with that objective's settings
(:class:`~trainer.batch.Update`), then the auxiliary terms the batch carries, each scored
by its :data:`trainer.core.AUX_LOSSES` entry. The objectives and terms name the metrics
they report.

What it trains on is a :class:`~trainer.batch.LearnerBatch` that the sharing regime
assembles: samples with their advantages, optional per-token weights, auxiliary terms on
sequences of their own (:class:`~trainer.batch.AuxTerm`) and hooks
(:class:`~trainer.batch.BatchHook`). The update knows no regime and no off-policy method:
whatever one adds to the objective's inputs (per-token weights computed from the
update's own log-probs, behaviour log-probs of stored samples) it adds through its hook,
which lives with it (:mod:`trainer.batch` says where each one is).

Log-probs are those of the sampling distribution (SPEC 9). The engine samples from
``softmax(logits / T)`` at the policy's ``temperature`` T (no top-k, no top-p), so every
log-prob that enters a ratio, an importance weight or the KL term is
``log_softmax(logits / T)`` of that same T, as in TRL's ``GRPOTrainer`` and verl:

- the update's current log-probs ``logp_theta`` and GRPO's old log-probs;
- the behaviour log-probs this policy hands out (:meth:`Policy.response_logprobs`: the
  ``mu`` of its rollouts that cross to peers) and those stored for reuse (``log pi_k``);
- the reference model's log-probs for the KL term: TRL scores its reference with the
  policy's temperature too, so ``KL(pi_T || ref_T)`` compares the two models' tempered
  distributions and is 0 while the policy equals its reference;
- ``actor/entropy`` (and the entropy bonus), the entropy of the tempered distribution
  that is being sampled, as TRL and verl compute it.

Each policy scores with its own temperature: a learner scores a peer's tokens under the
learner's tempered distribution (the learner's side of ``pi_learner / mu``), while ``mu``
is the peer's own, at the peer's temperature. Two things keep temperature 1: the
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
  while it runs; generation and the no-grad scoring passes never checkpoint. A scoring
  forward of whole rows passes ``use_cache=False``;
- ``update_prefix_reuse`` (on by default): the update's teacher-forced forwards (the
  reference's log-probs, old log-probs, the policy's forward and backward) encode each
  prompt once for the rows that share it, into a KV cache that each row's ``last prompt
  token + response`` then reads (:mod:`trainer.shared_prompts`,
  :meth:`Policy._forward_shared`); the gradients of all G rows flow back into the one
  prompt encoding. The values are the whole rows' up to float rounding. Not under
  ``gradient_checkpointing`` (its layers take no cache in training);
- ``micro_batch_tokens``: micro-batches by a token budget instead of
  ``micro_batch_size`` sequences (:func:`token_budget_micro_batches`); the micro-batches'
  losses are weighted by their share of the mini-batch's tokens (or sequences) as
  before, so the loss and gradient are those of one big batch.

Generation runs through :class:`~trainer.rollout.HFRolloutEngine` with the policy's
``rollout_cache`` (``dynamic`` or ``static`` KV cache), ``rollout_compile`` (a
compiled decoding forward: static cache and a CUDA device only; a CPU policy refuses it
at setup with :class:`RolloutSetupError`) and ``rollout_prefix_reuse`` (each prompt
encoded once, its KV cache copied to the G samples). With the dynamic cache the engine
decodes in its own loop, which stops computing the rows that finished (HF ``generate``
with the static cache); the tokens are ``generate``'s for a given seed
(tests/trainer/rollout/test_finished_rows.py). None changes the sampled distribution.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import logging
import math
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache

from trainer import metrics as m
from trainer.batch import (
    AuxTerm,
    BatchHook,
    LearnerBatch,
    Update,
    UpdateTensors,
    build_sequences,
    scatter_per_token,
)
from trainer.chat import PromptContext, format_prompt
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
    objective_needs,
    token_log_probs,
    token_log_probs_and_entropy,
)
from trainer.models import fuse_activations, load_causal_lm, load_tokenizer
from trainer.rollout import HFRolloutEngine, RolloutBatch
from trainer.rollout.engine import CacheKind
from trainer.shared_prompts import SharedPrompts
from trainer.shared_prompts import plan as shared_prompt_plan
from trainer.tasks import Problem
from trainer.tasks.rewards import RewardFn, keep_finished
from trainer.tasks.task_metrics import task_validation_metrics
from trainer.thl import encode_text


class PrecisionError(ValueError):
    """A precision setting the policy's device cannot run; the message says what to use."""


class RolloutSetupError(ValueError):
    """A rollout engine setting the policy's device cannot run; the message says what to
    change (``rollout_compile`` on a CPU device)."""


log = logging.getLogger("trainer.policy")

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


@dataclass
class ValidationOutputs:
    """One greedy sample per validation problem, in the problems' order."""

    completions: list[str]
    finished: list[bool]
    """The sample stopped with EOS (not cut off at ``max_new_tokens``)."""
    rewards: list[float]


class Policy:
    """A policy worker's model state and its training step.

    ``objective`` names the objective of its update in :data:`trainer.core.OBJECTIVES`
    (the run config's :attr:`~trainer.config.RunConfig.objective`); an unknown name is
    refused here (:class:`~trainer.core.UnknownNameError`, which lists the known ones)."""

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
        objective: str = "grpo",
        prompt_context: PromptContext | None = None,
        finished_only: bool = False,
    ) -> None:
        self.config = config
        self.finished_only = finished_only
        """Score only finished responses (the run's ``task.finished_only``, resolved over
        the pool): one cut off at ``max_new_tokens`` without a closed box scores 0
        (:meth:`score_responses`)."""
        self.prompt_context = PromptContext() if prompt_context is None else prompt_context
        """What every prompt starts with (the task config's system prompt and worked
        examples), rendered by this policy's chat template (:meth:`prompt_texts`)."""
        self.device = torch.device(device)
        self.model_dir = Path(model_dir)
        """Where the base model's weights are (:meth:`restart_from_base` reads them again)."""
        self.grpo = grpo
        OBJECTIVES.get(objective)  # an unknown name fails before any model is loaded
        self.objective = objective
        """The objective :meth:`train_step` optimises unless its :class:`Update` names
        another."""
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
            prefix_reuse=config.rollout_prefix_reuse,
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
        """Each problem's prompt in this policy's chat template, after the run's system
        prompt and worked examples (:attr:`prompt_context`)."""
        return [
            format_prompt(self.tokenizer, p.prompt, self.config.chat_template, self.prompt_context)
            for p in problems
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
        """Policy reincarnation: the reference (KL anchor) becomes the current policy."""
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
        rewards = self.score_responses(
            [t for t in texts for _ in range(g)],
            batch.response_texts,
            [p.answer for p in problems for _ in range(g)],
            batch.finished,
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

        For this policy's own rollouts it is the probability they were sampled with (the
        ``mu`` of a rollout that crosses to peers); for a peer's tokens it is this
        policy's side of the importance weight, at this policy's temperature (the peer's
        ``mu`` is at the peer's).
        """
        input_ids, attention_mask, response_mask = self._sequences(prompt_ids, response_ids)
        logp = self._log_probs(self.model, input_ids, attention_mask, response_mask)
        return [logp[row][response_mask[row].bool()].tolist() for row in range(len(response_ids))]

    def validate(self, problems: list[Problem], batch_size: int = 64) -> float:
        """``val/reward@1``: mean reward of one greedy sample per held-out problem."""
        rewards = self.validation_rewards(problems, batch_size)
        return sum(rewards) / len(rewards)

    def validation_metrics(self, problems: list[Problem], batch_size: int = 64) -> dict[str, float]:
        """``val/reward@1``, ``val/reward@1/<skill>`` per skill when the problems
        exercise several (:attr:`Problem.skill`; one greedy sample each), and what the
        problems' task adds from the answers (:func:`task_validation_metrics`: the
        addition slices' error classes and discrimination)."""
        outputs = self.validation_outputs(problems, batch_size)
        rewards = outputs.rewards
        metrics = {m.VAL_REWARD_AT_1: sum(rewards) / len(rewards)}
        by_skill: dict[str, list[float]] = {}
        for problem, reward in zip(problems, rewards, strict=True):
            if problem.skill:
                by_skill.setdefault(problem.skill, []).append(reward)
        if len(by_skill) > 1:
            for skill, values in sorted(by_skill.items()):
                metrics[f"val/reward@1/{skill}"] = sum(values) / len(values)
        return metrics | task_validation_metrics(problems, outputs.completions, rewards)

    def score_responses(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        answers: Sequence[str],
        finished: Sequence[bool],
    ) -> list[float]:
        """The reward of each response (``finished``: it stopped with EOS rather than at
        ``max_new_tokens``), for rollouts and validation alike: :attr:`reward_fn`'s, and
        under :attr:`finished_only` 0 for a response that did not finish
        (:func:`~trainer.tasks.rewards.counts_as_finished`: no EOS and no closed box)."""
        rewards = self.reward_fn(prompts, completions, answers)
        if self.finished_only:
            return keep_finished(rewards, completions, finished)
        return rewards

    def validation_rewards(self, problems: list[Problem], batch_size: int = 64) -> list[float]:
        """The reward of one greedy sample per held-out problem, in order."""
        return self.validation_outputs(problems, batch_size).rewards

    @torch.no_grad()
    def validation_outputs(
        self, problems: list[Problem], batch_size: int = 64
    ) -> ValidationOutputs:
        """One greedy sample per held-out problem, in order: its text, whether it
        finished, and its reward (:meth:`score_responses`)."""
        outputs = ValidationOutputs([], [], [])
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
            outputs.completions += out.response_texts
            outputs.finished += out.finished
            outputs.rewards += self.score_responses(
                texts, out.response_texts, [p.answer for p in chunk], out.finished
            )
        return outputs

    # --- the update ---------------------------------------------------------------------
    def train_step(self, batch: LearnerBatch, update: Update | None = None) -> dict[str, float]:
        """Optimise ``batch``: the objective of ``update`` (None: this policy's
        :attr:`objective`, with the GRPO config's settings and ``grpo.epochs`` passes),
        plus the batch's auxiliary terms; return the metrics of the objective, of the
        terms and of the batch's hooks.

        Each pass over the batch is split into ``grpo.mini_batches`` optimizer steps. A
        batch without samples trains its auxiliary terms alone (:meth:`_train_aux_only`).
        """
        return self._train(batch, Update() if update is None else update)[0]

    def _train(
        self, batch: LearnerBatch, update: Update
    ) -> tuple[dict[str, float], UpdateTensors | None]:
        """The update of :meth:`train_step`; also returns the tensors the hooks saw (with
        ``old_logp``, None when no separate forward was needed, and ``response_mask``),
        None for a batch without samples."""
        if not len(batch):
            return self._train_aux_only(batch), None
        name = self.objective if update.objective is None else update.objective
        objective = OBJECTIVES.get(name)
        needs = objective_needs(name)
        settings = self._objective_settings(update)
        input_ids, attention_mask, response_mask = self._sequences(
            batch.prompt_ids, batch.response_ids
        )
        bounds = _split_bounds(len(batch), self.grpo.mini_batches)
        passes = self.grpo.epochs if update.passes is None else update.passes
        # One pass of one mini-batch: the policy that sampled is the one being updated, so
        # the ratio's denominator is the update's own log-probs, detached (``None`` here);
        # a separate forward for them would compute the same numbers again. Otherwise (or
        # when the objective asks for them) one forward scores the rows whose old
        # log-probs the batch does not carry.
        old_logp = (
            None
            if not needs.old_logp and passes == 1 and len(bounds) == 1
            else self._old_logp(batch, input_ids, attention_mask, response_mask)
        )
        ref_logp = (
            self._log_probs(self.reference, input_ids, attention_mask, response_mask)
            if settings.kl_coef > 0 or needs.ref_logp
            else None
        )
        tensors = UpdateTensors(
            batch=batch,
            objective=name,
            response_mask=response_mask,
            old_logp=old_logp,
            token_weights=self._token_weights(batch, response_mask),
            device=self.device,
        )
        for hook in batch.hooks:
            hook.prepare(tensors)
        unread = sorted(set(tensors.inputs) - needs.extra_inputs)
        if unread:
            raise ValueError(
                f"the batch's hooks give the objective {', '.join(unread)}, which objective "
                f"{name!r} does not read; train this batch with an objective that does"
            )
        inputs = ObjectiveInputs(
            mask=response_mask,
            advantages=batch.advantages.to(self.device)[:, None].expand_as(response_mask),
            old_logp=old_logp,
            ref_logp=ref_logp,
            token_weights=tensors.token_weights,
        )
        if tensors.inputs:
            inputs = dataclasses.replace(inputs, **tensors.inputs)
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
                        batch.hooks,
                        start,
                    )
                )
                updates += 1
        metrics = totals.metrics(updates) | {
            m.KL_COEF: self.grpo.kl_coef,
            m.LR: self.optimizer.param_groups[0]["lr"],
        }
        for hook in batch.hooks:
            metrics |= hook.finish(tensors)
        return metrics, tensors

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

    def _objective_settings(self, update: Update) -> ObjectiveSettings:
        """The objective's constants: the GRPO config's, with the update's own set over
        them."""
        grpo = self.grpo
        settings = ObjectiveSettings(
            clip_eps=grpo.clip_eps,
            kl_coef=grpo.kl_coef,
            kl_clamp=grpo.kl_clamp,
            entropy_coef=grpo.entropy_coef,
            agg=grpo.loss_agg,
            kl_estimator=grpo.kl_estimator,
        )
        if not update.settings:
            return settings
        return dataclasses.replace(settings, **update.settings)  # type: ignore[arg-type]

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
        return scatter_per_token(old_logp, given, response_mask, "old log-probs")

    def _token_weights(
        self, batch: LearnerBatch, response_mask: torch.Tensor
    ) -> torch.Tensor | None:
        """``[N, L-1]`` surrogate weights: the given ones, 1 on the tokens of samples
        without any; None when no sample has weights."""
        if all(w is None for w in batch.token_weights):
            return None
        return scatter_per_token(
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
        hooks: Sequence[BatchHook] = (),
        first_row: int = 0,
    ) -> _Tally:
        """One optimizer step on a mini-batch, accumulated over micro-batches.

        Per micro-batch: one forward, one call of ``objective`` on that micro-batch's
        view of ``inputs``, one backward. Each micro-batch's aggregated loss (and each
        metric it reports) is weighted by its share of the mini-batch's tokens
        (token-mean) or sequences (seq-mean-token-mean), so the gradient equals that of
        the loss aggregated over the whole mini-batch. Then every auxiliary set adds its
        term (:meth:`_aux_backward`) to the same optimizer step.

        Every hook sees each micro-batch after its forward, before the objective reads
        its inputs (:meth:`BatchHook.micro_batch`: its rows in the batch, from
        ``first_row``, the mini-batch's first, on), with the forward's detached log-probs:
        in a single pass without old log-probs, what a hook weighs by ``log pi_old`` it
        weighs there.
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
                # One log-softmax gives both; the entropy's backward runs only when it
                # enters the loss (entropy_coef != 0), else it is a metric only.
                logp, entropy, start, width = self._scores(
                    self.model,
                    input_ids[rows],
                    attention_mask[rows],
                    inputs.mask[rows],
                    with_entropy=True,
                )
                micro = inputs.rows(rows, width - 1, start=start)
                if hooks:
                    detached = logp.detach()
                    batch_rows = slice(first_row + rows.start, first_row + rows.stop)
                    columns = slice(start, width - 1)
                    for hook in hooks:
                        hook.micro_batch(batch_rows, columns, detached, micro)
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

    def _aux_and_step(self, tally: _Tally, aux_sets: Sequence[_AuxSet]) -> None:
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
        return [slice(start, min(start + size, n)) for start in range(0, n, size)]

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
            if response_mask is None:
                logits, targets, width = self._forward(
                    model,
                    input_ids[rows].to(device),
                    attention_mask[rows].to(device),
                    self.temperature,
                )
                logp, start = token_log_probs(logits, targets), width - 1 - targets.shape[1]
            else:
                logp, _, start, width = self._scores(
                    model,
                    input_ids[rows].to(device),
                    attention_mask[rows].to(device),
                    response_mask[rows].to(device),
                    with_entropy=False,
                )
            out[rows, start : width - 1] = logp.to(out.device)
        return out

    def _scores(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, int, int]:
        """``(logp, entropy, start, width)`` of one micro-batch under ``model`` at this
        policy's temperature: the log-probs (and, ``with_entropy``, the entropies) of
        target columns ``start .. width - 2`` (``[n, width - 1 - start]``, from the
        micro-batch's first response token on; ``width`` its longest row).

        Rows that share a prompt encode it once (:meth:`_forward_shared`) where
        ``update_prefix_reuse`` allows it; a column that is not a response token of its
        row then holds 0 (nothing reads it: the objective and the hooks mask by
        ``response_mask``). Else one forward of the whole rows (:meth:`_forward`)."""
        shared = self._shared_prompts(model, input_ids, attention_mask, response_mask)
        if shared is None:
            logits, targets, width = self._forward(
                model,
                input_ids,
                attention_mask,
                self.temperature,
                first_scored_column(response_mask),
            )
            logp, entropy = token_log_probs_and_entropy(logits, targets, with_entropy=with_entropy)
            return logp, entropy, width - 1 - targets.shape[1], width
        logits = self._forward_shared(model, shared, self.temperature)
        logp, entropy = token_log_probs_and_entropy(
            logits, shared.targets, with_entropy=with_entropy
        )
        return (
            shared.to_frame(logp),
            None if entropy is None else shared.to_frame(entropy),
            shared.start,
            shared.width,
        )

    def _shared_prompts(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> SharedPrompts | None:
        """The micro-batch's rows grouped by prompt (:func:`trainer.shared_prompts.plan`),
        or None: ``update_prefix_reuse`` off, gradient checkpointing on (Hugging Face
        layers take no KV cache while they checkpoint), a model that is not a
        transformers causal LM (no ``logits_to_keep``: it may take no cache either), or
        nothing shared."""
        if (
            not self.config.update_prefix_reuse
            or self.config.gradient_checkpointing
            or not _keeps_logits(model)
        ):
            return None
        return shared_prompt_plan(input_ids, attention_mask, response_mask, self.pad_id)

    def _forward_shared(
        self, model: torch.nn.Module, shared: SharedPrompts, temperature: float
    ) -> torch.Tensor:
        """Logits ``[n, R, V]`` (float32, divided by ``temperature``) predicting
        ``shared.targets``: each distinct prompt but its last token encoded once into a KV
        cache (``logits_to_keep=1``: its LM head runs on one position), the cache's rows
        picked for their samples (``owner``: an index, so autograd adds the samples'
        gradients back into their prompt's), then ``last prompt token + response`` of
        every row on top of it, at its positions in the whole sequence (the LM head on the
        positions that predict a response token only). Under the compute dtype's
        autocast (:meth:`_autocast`), as :meth:`_forward`."""
        cache = DynamicCache(config=model.config)
        cache_device = shared.prefix_ids.device
        prefix_positions = torch.arange(
            shared.prefix_ids.shape[1], device=shared.prefix_ids.device
        ).expand_as(shared.prefix_ids)
        with self._autocast(model):
            model(
                input_ids=shared.prefix_ids,
                attention_mask=shared.prefix_mask,
                position_ids=prefix_positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache.batch_select_indices(shared.owner)
            logits = model(
                input_ids=shared.segment_ids,
                attention_mask=torch.cat(
                    [shared.prefix_mask[shared.owner], shared.segment_mask], dim=1
                ),
                position_ids=shared.segment_positions,
                past_key_values=cache,
                use_cache=True,
                # not the last position's: it predicts nothing
                logits_to_keep=torch.arange(shared.targets.shape[1], device=cache_device),
            ).logits
        logits = logits.float()
        if temperature != 1.0:
            logits = logits / temperature
        return logits


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


def cpu_bf16_support() -> str | None:
    """The CPU's native bfloat16 instructions (``"AMX"``, ``"AVX512-BF16"``), or None:
    bfloat16 autocast then still works on the CPU, converting in software: on an AVX-512
    CPU without them it still cut forward + backward by about a third, on an AVX2-only CPU
    it made SmolLM2's forward 4.3x and backward 23x slower than float32 (16 rows x 100
    tokens, one thread: 47.5 / 283.5 s against 11.0 / 12.3 s)."""
    cpu = getattr(torch, "cpu", None)
    probes = (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        check = getattr(cpu, probe, None)
        try:
            if check is not None and check():
                return name
        except RuntimeError:  # a torch build without the probe's CPU support
            continue
    return None


def _compute_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The autocast dtype of ``dtype`` on ``device``; :class:`PrecisionError` for float16
    on the CPU or an unknown name. bfloat16 on the CPU is allowed on every CPU; the log
    says whether this one has native bfloat16 (:func:`cpu_bf16_support`)."""
    if dtype not in COMPUTE_DTYPES:
        raise PrecisionError(f"unknown dtype {dtype!r}; use one of {tuple(COMPUTE_DTYPES)}")
    if dtype == "float16" and device.type == "cpu":
        raise PrecisionError(
            "dtype 'float16' needs an accelerator (float16 autocast with a gradient "
            "scaler); on the CPU use 'bfloat16' (autocast, no scaler) or 'float32'"
        )
    if dtype == "bfloat16" and device.type == "cpu":
        native = cpu_bf16_support()
        if native is None:
            capability = torch.backends.cpu.get_cpu_capability()
            slower = (
                "on an AVX2-only CPU like this one a backward pass measured 23x slower than "
                "in float32"
                if "AVX512" not in capability
                else "steps gain less than on a CPU with them"
            )
            log.warning(
                "dtype 'bfloat16' on a CPU without native bfloat16 (no AVX512-BF16 or AMX): "
                "autocast converts in software, so %s (CPU capability: %s); set dtype to "
                "'float32' if they are slower",
                slower,
                capability,
            )
        else:
            log.info("dtype 'bfloat16' on the CPU uses its native %s instructions", native)
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

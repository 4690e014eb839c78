"""``prp``: Peer Rollout Pooling (SPEC 4.1), data level.

Learner m's group for prompt x is its own G rollouts plus up to ``k_peer`` peer rollouts
(drawn without replacement from all peers' rollouts of x, seeded by run seed, step,
learner and prompt), each retokenized into m's tokenizer by THL's text path. Advantages
are computed over the pooled (ragged) group. Peer tokens are off-policy: their surrogate
is the learner's own ratio ``pi_theta / pi_old_m`` times the truncated importance weight
``w_t = min(pi_old_m(t) / mu_peer(t), c_bar)``, where ``mu_peer`` is the peer's behaviour
probability moved onto m's tokens by THL's trace path. ``prp.is_correction = false``
gives naive pooling (``w_t = 1``), the paper's ablation.

The learner runs no forward for the weights: the batch carries each peer token's ``mu``
in its hook :class:`~trainer.regimes.prp.weights.ImportanceWeights`, with which the update
weighs the token with the ``pi_old_m`` it has in hand (in a single pass its own forward's
detached log-probs), writing the weights into the batch, from which the step's events and
metrics are read after the update. Read before it, they weigh the tokens then, with one
forward.

What crosses: per rollout its token ids, behaviour log-probs and reward (the learner
loads the source's tokenizer to decode them), whether it ended with EOS, and why its
reward is what it is (:meth:`trainer.tasks.rewards.Scoring.reason`: "\\boxed{85} = 85;
ended with EOS", "last number 1 = 1 (no box); cut off at max_new_tokens"); the transfer
events' samples carry both. Under ``task.finished_only`` the source scored a response
cut off at ``max_new_tokens`` without a closed box 0, so it joins the learner's group as
a failure and never counts as a correct answer.

The weights are logged as their mean over every peer token (``prp/is_weight_mean``), over
the tokens that hold the answer's digits alone (``prp/is_weight_mean/answer``: inside the
last ``\\boxed{...}``, found on the learner's tokens by
:func:`~trainer.regimes.prp.answer.answer_digit_positions`: the format tokens around
them, ``\\boxed{``, ``}`` and EOS, which every policy writes alike, would hide a low
weight on the digits), and, when the step's prompts span several skills, both per skill of
the prompt.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer import metrics as m
from trainer.batch import LearnerBatch
from trainer.config import RunConfig
from trainer.core import grpo_advantages_from_groups
from trainer.exchange import StepRecord
from trainer.models import load_tokenizer
from trainer.policy import Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.prp import (
    IS_WEIGHT_CLIPPED_FRAC,
    IS_WEIGHT_MEAN,
    IS_WEIGHT_MEAN_ANSWER,
    PEER_SAMPLES,
    ROLLOUT_EVENT,
    PRPConfig,
)
from trainer.regimes.prp.answer import answer_digit_positions
from trainer.regimes.prp.weights import ImportanceWeights, truncated_is_weights
from trainer.spool import Sample, make_event, make_sample
from trainer.tasks import run_scoring
from trainer.thl import align_response_logprobs

ROLLOUTS_TOPIC = "rollouts"


@dataclass(frozen=True)
class PublishedRollout:
    """One rollout as it crosses to peers."""

    prompt_id: str
    response_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    """Behaviour log-prob of each response token under the source policy."""
    reward: float
    finished: bool = True
    """The response ended with the source's EOS (False: cut off at ``max_new_tokens``)."""
    reason: str = ""
    """Why it scored ``reward`` (the run's scoring); blank: not said."""


@dataclass
class PeerSample:
    """A peer rollout on the learner's tokens."""

    source: str
    prompt_index: int
    prompt_id: str
    text: str
    """The peer's response text (decoded with the source's tokenizer)."""
    response_ids: list[int]
    behaviour_logp: list[float]
    reward: float
    residual_span_frac: float
    mass_error: float
    unk_frac: float
    text_mismatch_frac: float
    answer_positions: list[int]
    """Where ``response_ids`` hold the answer's digits (:func:`answer_digit_positions`)."""
    finished: bool = True
    """The peer's response ended with its EOS (False: cut off at ``max_new_tokens``)."""
    reason: str = ""
    """Why it scored ``reward`` (:attr:`PublishedRollout.reason`)."""


class _WeightedStep(RegimeStep):
    """PRP's step, whose events and metrics report the peer tokens' importance weights.

    With the correction, the update computes those weights from the log-probs of its own
    forward (the batch's hook :class:`ImportanceWeights`) and writes them into the batch,
    so the learner runs no forward of its own for them. Read after the update (as a run
    does), the events and metrics cost nothing more; read before it, or with no update,
    they weigh the peer tokens then, with one forward of the policy as it is, and hand
    those weights (and old log-probs) to the update, as before.
    """

    def __init__(
        self,
        batch: LearnerBatch,
        score: Callable[[], None],
        report: Callable[[], tuple[list[dict[str, Any]], dict[str, float]]],
    ) -> None:
        self.batch = batch
        self._score = score
        self._report = report
        self._reported: tuple[list[dict[str, Any]], dict[str, float]] | None = None

    def _reported_now(self) -> tuple[list[dict[str, Any]], dict[str, float]]:
        if self._reported is None:
            weights = self.batch.hook(ImportanceWeights)
            if weights is not None and weights.pending(self.batch):
                self._score()
            self._reported = self._report()
        return self._reported

    @property  # type: ignore[override]
    def events(self) -> list[dict[str, Any]]:
        return self._reported_now()[0]

    @property  # type: ignore[override]
    def metrics(self) -> dict[str, float]:
        return self._reported_now()[1]


def choose_peer_rollouts(
    candidates: list[tuple[str, PublishedRollout]], k: int, rng: random.Random
) -> list[tuple[str, PublishedRollout]]:
    """Up to ``k`` of ``candidates`` without replacement, in a seeded order."""
    return rng.sample(candidates, min(k, len(candidates)))


class PRP(Regime):
    settings: PRPConfig
    topics = {ROLLOUTS_TOPIC: list}

    def __init__(
        self, config: RunConfig, learner: str, tokenizer_dirs: dict[str, Path] | None = None
    ) -> None:
        super().__init__(config, learner, tokenizer_dirs)
        self._tokenizers: dict[str, PreTrainedTokenizerBase] = {}

    def _tokenizer(self, policy_name: str) -> PreTrainedTokenizerBase:
        if policy_name not in self._tokenizers:
            self._tokenizers[policy_name] = load_tokenizer(self.tokenizer_dirs[policy_name])
        return self._tokenizers[policy_name]

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        batch = rollouts.batch
        logprobs = policy.response_logprobs(batch.prompt_ids, batch.response_ids)
        rewards = rollouts.rewards.tolist()
        scoring = run_scoring(self.config)
        published = []
        for i in range(len(batch)):
            problem = rollouts.problems[i // rollouts.group_size]
            text, finished = batch.response_texts[i], batch.finished[i]
            published.append(
                PublishedRollout(
                    prompt_id=problem.id,
                    response_ids=tuple(batch.response_ids[i]),
                    logprobs=tuple(logprobs[i]),
                    reward=rewards[i],
                    finished=finished,
                    reason=scoring.reason(text, problem.answer, finished, rewards[i]),
                )
            )
        return {ROLLOUTS_TOPIC: published}

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        samples = self._peer_samples(policy, rollouts, peers, step)
        own = rollouts.batch
        g = rollouts.group_size
        prompt_ids = list(own.prompt_ids) + [own.prompt_ids[s.prompt_index * g] for s in samples]
        response_ids = list(own.response_ids) + [s.response_ids for s in samples]
        rewards = torch.cat([rollouts.rewards, torch.tensor([s.reward for s in samples])])
        groups = torch.tensor([i // g for i in range(len(own))] + [s.prompt_index for s in samples])
        advantages = grpo_advantages_from_groups(rewards, groups, eps=self.config.grpo.adv_eps)

        correction = self.settings.is_correction
        batch = LearnerBatch(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            advantages=advantages,
            # With the correction the update computes the peer tokens' weights from the
            # log-probs of its own forward (no forward of their own); without, they are 1.
            token_weights=[None] * len(own)
            + [None if correction else [1.0] * len(s.response_ids) for s in samples],
            hooks=[
                ImportanceWeights(
                    [None] * len(own) + [s.behaviour_logp for s in samples], self.settings.c_bar
                )
            ]
            if correction
            else [],
        )
        skills = [problem.skill for problem in rollouts.problems]

        def score() -> None:
            # Read before the update: weigh now, with one forward of the policy as it is,
            # and hand the update these weights and old log-probs.
            learner_logp = policy.response_logprobs(
                prompt_ids[len(own) :], response_ids[len(own) :]
            )
            batch.old_logp = [None] * len(own) + learner_logp
            for index, (old, sample) in enumerate(zip(learner_logp, samples, strict=True)):
                batch.token_weights[len(own) + index] = truncated_is_weights(
                    old, sample.behaviour_logp, self.settings.c_bar, correction
                )

        def report() -> tuple[list[dict[str, Any]], dict[str, float]]:
            weights = [list(w or []) for w in batch.token_weights[len(own) :]]
            return (
                self._events(policy, samples, weights, step),
                self._metrics(samples, weights, skills),
            )

        return _WeightedStep(batch, score, report)

    def _peer_samples(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> list[PeerSample]:
        by_prompt: dict[str, list[tuple[str, PublishedRollout]]] = {}
        for peer in peers:
            for published in peer.topics[ROLLOUTS_TOPIC]:
                by_prompt.setdefault(published.prompt_id, []).append((peer.policy, published))
        samples: list[PeerSample] = []
        for index, problem in enumerate(rollouts.problems):
            rng = self.rng(step, problem.id)
            chosen = choose_peer_rollouts(by_prompt.get(problem.id, []), self.settings.k_peer, rng)
            for source, published in chosen:
                retokenized, alignment = align_response_logprobs(
                    self._tokenizer(source),
                    published.response_ids,
                    published.logprobs,
                    policy.tokenizer,
                )
                if not retokenized.target_ids:
                    continue  # an empty response has no token to learn from
                samples.append(
                    PeerSample(
                        source=source,
                        prompt_index=index,
                        prompt_id=problem.id,
                        text=retokenized.text,
                        response_ids=retokenized.target_ids,
                        behaviour_logp=alignment.target_values,
                        reward=published.reward,
                        residual_span_frac=alignment.residual_span_frac,
                        mass_error=alignment.mass_error,
                        unk_frac=retokenized.unk_frac,
                        text_mismatch_frac=retokenized.text_mismatch_frac,
                        answer_positions=answer_digit_positions(
                            retokenized.target_ids, policy.tokenizer
                        ),
                        finished=published.finished,
                        reason=published.reason,
                    )
                )
        return samples

    def _events(
        self, policy: Policy, samples: list[PeerSample], weights: list[list[float]], step: int
    ) -> list[dict[str, Any]]:
        """One event per (source, prompt): how many of its rollouts joined the group, their
        mean IS weight, and what crossed (texts, and tokens on the learner's tokenizer)."""
        grouped: dict[tuple[str, str], list[float]] = {}
        shipped: dict[tuple[str, str], list[Sample]] = {}
        for sample, sample_weights in zip(samples, weights, strict=True):
            key = (sample.source, sample.prompt_id)
            grouped.setdefault(key, []).extend(sample_weights)
            tokens = policy.tokenizer.convert_ids_to_tokens(sample.response_ids)
            shipped.setdefault(key, []).append(
                make_sample(
                    sample.text,
                    tokens,
                    sample.reward,
                    finished=sample.finished,
                    reason=sample.reason or None,
                )
            )
        return [
            make_event(
                step,
                source,
                self.learner,
                ROLLOUT_EVENT,
                prompt_id,
                len(shipped[(source, prompt_id)]),
                sum(w) / len(w) if w else None,
                samples=shipped[(source, prompt_id)],
            )
            for (source, prompt_id), w in grouped.items()
        ]

    def _metrics(
        self, samples: list[PeerSample], weights: list[list[float]], skills: list[str]
    ) -> dict[str, float]:
        """The step's PRP and THL metrics; ``skills[i]`` is the skill of prompt i. When the
        prompts span several skills, ``prp/is_weight_mean/<skill>`` is the mean weight
        over the peer tokens of that skill's prompts (their token-weighted mean is the
        overall one), so that a weight near 0 on foreign-skill prompts shows.
        ``prp/is_weight_mean/answer`` (and ``.../answer/<skill>``) is the same mean over
        the tokens that hold the answer's digits alone (:attr:`PeerSample.answer_positions`;
        absent when no peer response has a boxed answer)."""
        answers = [
            [sample_weights[i] for i in sample.answer_positions] if sample_weights else []
            for sample, sample_weights in zip(samples, weights, strict=True)
        ]
        flat = [w for sample_weights in weights for w in sample_weights]
        answer_flat = [w for answer_weights in answers for w in answer_weights]
        c_bar = self.settings.c_bar
        metrics = {PEER_SAMPLES: float(len(samples))}
        if flat:
            metrics[IS_WEIGHT_MEAN] = _mean(flat)
            metrics[IS_WEIGHT_CLIPPED_FRAC] = (
                sum(w >= c_bar for w in flat) / len(flat) if self.settings.is_correction else 0.0
            )
        if answer_flat:
            metrics[IS_WEIGHT_MEAN_ANSWER] = _mean(answer_flat)
        if len({skill for skill in skills if skill}) > 1:
            for skill, values in _by_skill(samples, weights, skills).items():
                metrics[f"prp/is_weight_mean/{skill}"] = _mean(values)
            for skill, values in _by_skill(samples, answers, skills).items():
                metrics[f"prp/is_weight_mean/answer/{skill}"] = _mean(values)
        if samples:
            metrics |= {
                m.THL_RESIDUAL_SPAN_FRAC: _mean([s.residual_span_frac for s in samples]),
                m.THL_MASS_ERROR: _mean([s.mass_error for s in samples]),
                m.THL_UNK_FRAC: _mean([s.unk_frac for s in samples]),
                m.THL_TEXT_MISMATCH_FRAC: _mean([s.text_mismatch_frac for s in samples]),
            }
        return metrics


def _by_skill(
    samples: list[PeerSample], weights: list[list[float]], skills: list[str]
) -> dict[str, list[float]]:
    """``weights`` (one row per sample) pooled by the skill of each sample's prompt, in
    skill order; samples without a skill or without weights are left out."""
    by_skill: dict[str, list[float]] = {}
    for sample, sample_weights in zip(samples, weights, strict=True):
        skill = skills[sample.prompt_index]
        if skill and sample_weights:
            by_skill.setdefault(skill, []).extend(sample_weights)
    return dict(sorted(by_skill.items()))


def _mean(values: list[float]) -> float:
    """The mean of a non-empty list."""
    return sum(values) / len(values)

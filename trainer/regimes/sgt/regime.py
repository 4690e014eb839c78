"""``sgt``: Success-Gated Transfer (SPEC 4.3), outcome level.

Rescue set of learner m at a step: the prompts where all of m's G rollouts failed and at
least one peer rollout succeeded. For each, up to ``k_sgt`` verified peer successes
(shortest text first, ties by the source's rank in the pool, then by text; never set
or hash order, so seeded runs and exact resume hold across processes) are retokenized
into m's tokenizer by THL's text path (:func:`trainer.thl.encode_text`: a literal
``</s>`` in the text stays text; m's EOS is appended only when the peer's response ended
with its EOS, not when it was cut off at ``max_new_tokens``), after m's own
chat-formatted prompt, and trained with an auxiliary token-mean NLL:
``L_m = L_GRPO + lambda_sgt * L_NLL(rescued)``, an :class:`~trainer.policy.AuxTerm` on the
learner batch (loss ``nll``: :func:`trainer.core.sft_nll_sum`; its value is ``sgt/nll``).
With an empty rescue set the batch is exactly GRPO's. Only success texts (and whether
each ended with EOS) cross, and only for prompts a policy solved. ``thl/unk_frac`` and
``thl/text_mismatch_frac`` report how lossy the rescues' retokenization was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer import metrics as m
from trainer.exchange import StepRecord
from trainer.policy import AuxTerm, LearnerBatch, Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.sgt import NLL, RESCUE_RATE, RESCUE_SET_SIZE, SUCCESS_EVENT, SGTConfig
from trainer.spool import Sample, make_event, make_sample
from trainer.thl import encode_text

SUCCESSES_TOPIC = "successes"


@dataclass(frozen=True)
class Success:
    """A verified success as it crosses: its text and whether it ended with EOS."""

    text: str
    finished: bool
    """The response stopped with the source's EOS (not cut off at ``max_new_tokens``)."""


@dataclass(frozen=True)
class Rescue:
    """One peer success chosen for the learner."""

    prompt_index: int
    prompt_id: str
    source: str
    text: str
    finished: bool


def shortest_successes(rollouts: Rollouts, k: int) -> dict[str, list[Success]]:
    """Per solved prompt id, up to ``k`` distinct successful response texts, shortest
    first, equally short ones by text (never set or hash order: SPEC 9). A text that
    occurs both finished and cut off counts as finished."""
    published: dict[str, list[Success]] = {}
    texts = rollouts.batch.response_texts
    finished = rollouts.batch.finished
    successes = rollouts.successes.tolist()
    for index, problem in enumerate(rollouts.problems):
        ended: dict[str, bool] = {}
        for i in rollouts.rows_of(index):
            if successes[i]:
                ended[texts[i]] = ended.get(texts[i], False) or finished[i]
        if ended:
            solved = sorted((Success(text, end) for text, end in ended.items()), key=success_order)
            published[problem.id] = solved[:k]
    return published


def success_order(success: Success) -> tuple[int, str]:
    """Sort key of one source's successes: length, then the text itself."""
    return len(success.text), success.text


def rescue_set(
    rollouts: Rollouts,
    peer_successes: Mapping[str, Mapping[str, list[Success]]],
    k: int,
    ranks: Mapping[str, int] | None = None,
) -> tuple[list[Rescue], int]:
    """The chosen rescues and the number of prompts where the learner failed all G.

    ``peer_successes`` maps source policy -> prompt id -> successes; ``ranks`` maps
    each source to its rank in the pool (default: the order of ``peer_successes``, the
    exchange's rank order). Per prompt the ``k`` shortest win, equally short ones by
    source rank, then text (SPEC 9).
    """
    rank_of = dict(ranks) if ranks is not None else {s: i for i, s in enumerate(peer_successes)}
    successes = rollouts.successes.tolist()
    rescues: list[Rescue] = []
    failed_all = 0
    for index, problem in enumerate(rollouts.problems):
        if any(successes[i] for i in rollouts.rows_of(index)):
            continue
        failed_all += 1
        candidates = sorted(
            (len(success.text), rank_of[source], success.text, source, success.finished)
            for source, by_prompt in peer_successes.items()
            for success in by_prompt.get(problem.id, [])
        )
        rescues += [
            Rescue(index, problem.id, source, text, finished)
            for _, _, text, source, finished in candidates[:k]
        ]
    return rescues, failed_all


class SGT(Regime):
    name = "sgt"
    settings: SGTConfig
    topics = {SUCCESSES_TOPIC: dict}

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        return {SUCCESSES_TOPIC: shortest_successes(rollouts, self.settings.k_sgt)}

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        peer_successes = {peer.policy: peer.topics[SUCCESSES_TOPIC] for peer in peers}
        ranks = {member.name: rank for rank, member in enumerate(self.config.pool)}
        rescues, failed_all = rescue_set(rollouts, peer_successes, self.settings.k_sgt, ranks)
        batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
        encoded = [
            encode_text(r.text, policy.tokenizer, ended_with_eos=r.finished) for r in rescues
        ]
        response_ids = [e.target_ids for e in encoded]
        if rescues:
            group = rollouts.group_size
            batch.aux_terms.append(
                AuxTerm(
                    loss="nll",
                    prompt_ids=[rollouts.batch.prompt_ids[r.prompt_index * group] for r in rescues],
                    response_ids=response_ids,
                    coef=self.settings.lambda_sgt,
                    metric=NLL,
                )
            )
        shipped: dict[tuple[str, str], list[Sample]] = {}
        for rescue, ids in zip(rescues, response_ids, strict=True):
            tokens = policy.tokenizer.convert_ids_to_tokens(ids)
            shipped.setdefault((rescue.source, rescue.prompt_id), []).append(
                make_sample(rescue.text, tokens)
            )
        events = [
            make_event(
                step, source, self.learner, SUCCESS_EVENT, prompt_id, len(texts), samples=texts
            )
            for (source, prompt_id), texts in shipped.items()
        ]
        rescued_prompts = len({r.prompt_id for r in rescues})
        metrics = {
            RESCUE_SET_SIZE: float(rescued_prompts),
            RESCUE_RATE: rescued_prompts / failed_all if failed_all else 0.0,
        }
        if encoded:
            metrics[m.THL_UNK_FRAC] = _mean([e.unk_frac for e in encoded])
            metrics[m.THL_TEXT_MISMATCH_FRAC] = _mean([e.text_mismatch_frac for e in encoded])
        return RegimeStep(batch, events, metrics)


def _mean(values: list[float]) -> float:
    """The mean of a non-empty list."""
    return sum(values) / len(values)

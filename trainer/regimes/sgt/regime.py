"""``sgt``: Success-Gated Transfer (SPEC 4.3), outcome level.

Rescue set of learner m at a step: the prompts where all of m's G rollouts failed and at
least one peer rollout succeeded. For each, up to ``k_sgt`` verified peer successes
(shortest text first, ties by the source's rank in the pool, then by text; never set
or hash order, so seeded runs and exact resume hold across processes) are retokenized
into m's tokenizer by THL's text path (:func:`trainer.thl.encode_text`: a literal
``</s>`` in the text stays text; m's EOS is appended only when the peer's response ended
with its EOS, not when it was cut off at ``max_new_tokens``), after m's own
chat-formatted prompt, and trained with an auxiliary token-mean NLL:
``L_m = L_GRPO + lambda_sgt * L_NLL(rescued)``, an :class:`~trainer.batch.AuxTerm` on the
learner batch (loss ``nll``: :func:`trainer.core.sft_nll_sum`; its value is ``sgt/nll``).
With an empty rescue set the batch is exactly GRPO's. Only success texts (and whether
each ended with EOS) cross, and only for prompts a policy solved. ``thl/unk_frac`` and
``thl/text_mismatch_frac`` report how lossy the rescues' retokenization was.

What counts as a success is the run's scoring (:func:`trainer.tasks.run_scoring`): under
``task.finished_only`` a response cut off at ``max_new_tokens`` without a closed box
scored 0, so it is no success and never crosses; without it, it may, and its transfer
event's sample says so (``finished: false``). Every sample states why its response
counted (``reason``: :func:`trainer.tasks.rewards.score_reason`, "last number 1 = 1 (no
box); cut off at max_new_tokens"), written by the source when it publishes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from transformers import PreTrainedTokenizerBase

from trainer import metrics as m
from trainer.batch import AuxTerm, LearnerBatch
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.sgt import NLL, RESCUE_RATE, RESCUE_SET_SIZE, SUCCESS_EVENT, SGTConfig
from trainer.spool import Event, Sample, make_event, make_sample
from trainer.tasks import Scoring, run_scoring
from trainer.thl import Encoded, encode_text

SUCCESSES_TOPIC = "successes"


@dataclass(frozen=True)
class Success:
    """A verified success as it crosses: its text and whether it ended with EOS."""

    text: str
    finished: bool
    """The response stopped with the source's EOS (not cut off at ``max_new_tokens``)."""
    reason: str = ""
    """Why it counted (:meth:`trainer.tasks.rewards.Scoring.reason`); blank: not said."""


@dataclass(frozen=True)
class Rescue:
    """One peer success chosen for the learner."""

    prompt_index: int
    prompt_id: str
    source: str
    text: str
    finished: bool
    reason: str = ""


def shortest_successes(
    rollouts: Rollouts, k: int, scoring: Scoring | None = None
) -> dict[str, list[Success]]:
    """Per solved prompt id, up to ``k`` distinct successful response texts, shortest
    first, equally short ones by text (never set or hash order: SPEC 9). A text that
    occurs both finished and cut off counts as finished. A success is a rollout whose
    reward reached the threshold, so under ``finished_only`` (which scored the unfinished
    ones 0) no unfinished response is one. With ``scoring`` each says why it counted."""
    published: dict[str, list[Success]] = {}
    texts = rollouts.batch.response_texts
    finished = rollouts.batch.finished
    successes = rollouts.successes.tolist()
    rewards = rollouts.rewards.tolist()
    for index, problem in enumerate(rollouts.problems):
        ended: dict[str, tuple[bool, float]] = {}
        for i in rollouts.rows_of(index):
            if successes[i] and not ended.get(texts[i], (False, 0.0))[0]:
                ended[texts[i]] = (finished[i], rewards[i])
        if ended:
            solved = [
                Success(text, end, _reason(scoring, text, problem.answer, end, reward))
                for text, (end, reward) in ended.items()
            ]
            published[problem.id] = sorted(solved, key=success_order)[:k]
    return published


def _reason(scoring: Scoring | None, text: str, answer: str, finished: bool, reward: float) -> str:
    """Why a success counted, by ``scoring``; blank without one."""
    return "" if scoring is None else scoring.reason(text, answer, finished, reward)


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
        rescues += peer_candidates(index, problem.id, peer_successes, rank_of)[:k]
    return rescues, failed_all


def peer_candidates(
    prompt_index: int,
    prompt_id: str,
    peer_successes: Mapping[str, Mapping[str, list[Success]]],
    rank_of: Mapping[str, int],
) -> list[Rescue]:
    """Every peer success on prompt ``prompt_id``, in SGT's order: shortest text first,
    equally short ones by the source's rank in the pool, then by text (SPEC 9)."""
    candidates = sorted(
        (
            (source, success)
            for source, by_prompt in peer_successes.items()
            for success in by_prompt.get(prompt_id, [])
        ),
        key=lambda offer: (
            len(offer[1].text),
            rank_of[offer[0]],
            offer[1].text,
            offer[0],
            offer[1].finished,
        ),
    )
    return [
        Rescue(prompt_index, prompt_id, source, s.text, s.finished, s.reason)
        for source, s in candidates
    ]


def pool_ranks(config: RunConfig) -> dict[str, int]:
    """Each policy's rank in the pool (the exchange's order)."""
    return {member.name: rank for rank, member in enumerate(config.pool)}


def published_successes(peers: Sequence[StepRecord]) -> dict[str, dict[str, list[Success]]]:
    """Source policy -> prompt id -> the successes it published this step."""
    return {peer.policy: peer.topics[SUCCESSES_TOPIC] for peer in peers}


def translate(chosen: Sequence[Rescue], tokenizer: PreTrainedTokenizerBase) -> list[Encoded]:
    """Each chosen peer success in the learner's tokens, by THL's text path (the
    learner's EOS appended only where the peer's response ended with its EOS)."""
    return [encode_text(r.text, tokenizer, ended_with_eos=r.finished) for r in chosen]


def learner_prompt_ids(rollouts: Rollouts, prompt_index: int) -> list[int]:
    """The learner's own chat-formatted prompt ids of the step's prompt ``prompt_index``."""
    return rollouts.batch.prompt_ids[prompt_index * rollouts.group_size]


class Crossed(Protocol):
    """What a transfer event needs of a peer success that crossed."""

    @property
    def source(self) -> str: ...

    @property
    def prompt_id(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def finished(self) -> bool: ...


def transfer_events(
    step: int,
    learner: str,
    kind: str,
    crossed: Sequence[Crossed],
    response_ids: Sequence[Sequence[int]],
    tokenizer: PreTrainedTokenizerBase,
) -> list[Event]:
    """One event of ``kind`` per (source, prompt) of ``crossed``, in first-seen order,
    its samples the texts with their tokens in the learner's tokenizer, whether each
    ended with EOS, and why it counted (an item's ``reason``, where it has one)."""
    shipped: dict[tuple[str, str], list[Sample]] = {}
    for item, ids in zip(crossed, response_ids, strict=True):
        tokens = tokenizer.convert_ids_to_tokens(list(ids))
        sample = make_sample(
            item.text, tokens, finished=item.finished, reason=getattr(item, "reason", "") or None
        )
        shipped.setdefault((item.source, item.prompt_id), []).append(sample)
    return [
        make_event(step, source, learner, kind, prompt_id, len(texts), samples=texts)
        for (source, prompt_id), texts in shipped.items()
    ]


class Retokenization(Protocol):
    """How lossy one retokenization was (an :class:`~trainer.thl.Encoded` has both)."""

    @property
    def unk_frac(self) -> float: ...

    @property
    def text_mismatch_frac(self) -> float: ...


def thl_metrics(encoded: Sequence[Retokenization]) -> dict[str, float]:
    """``thl/unk_frac`` and ``thl/text_mismatch_frac``, means over the retokenized
    samples trained on (none without samples)."""
    if not encoded:
        return {}
    return {
        m.THL_UNK_FRAC: _mean([e.unk_frac for e in encoded]),
        m.THL_TEXT_MISMATCH_FRAC: _mean([e.text_mismatch_frac for e in encoded]),
    }


class SGT(Regime):
    settings: SGTConfig
    topics = {SUCCESSES_TOPIC: dict}

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        scoring = run_scoring(self.config)
        return {SUCCESSES_TOPIC: shortest_successes(rollouts, self.settings.k_sgt, scoring)}

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        peer_successes = published_successes(peers)
        ranks = pool_ranks(self.config)
        rescues, failed_all = rescue_set(rollouts, peer_successes, self.settings.k_sgt, ranks)
        batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
        encoded = translate(rescues, policy.tokenizer)
        response_ids = [e.target_ids for e in encoded]
        if rescues:
            batch.aux_terms.append(
                AuxTerm(
                    loss="nll",
                    prompt_ids=[learner_prompt_ids(rollouts, r.prompt_index) for r in rescues],
                    response_ids=response_ids,
                    coef=self.settings.lambda_sgt,
                    metric=NLL,
                )
            )
        events = transfer_events(
            step, self.learner, SUCCESS_EVENT, rescues, response_ids, policy.tokenizer
        )
        rescued_prompts = len({r.prompt_id for r in rescues})
        metrics = {
            RESCUE_SET_SIZE: float(rescued_prompts),
            RESCUE_RATE: rescued_prompts / failed_all if failed_all else 0.0,
        }
        metrics |= thl_metrics(encoded)
        return RegimeStep(batch, events, metrics)


def _mean(values: list[float]) -> float:
    """The mean of a non-empty list."""
    return sum(values) / len(values)

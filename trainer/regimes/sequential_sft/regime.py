"""``sequential_sft``: sequential peer SFT, the Mutual RL paper's Figure 11 baseline, as
the paper ran it: the peers' successes are fine-tuned in *after* standalone RL completes.

One run, two stages, continuous steps. With ``T = steps`` and ``S = sft_steps`` of the run
config, the run has ``T + S`` steps (:attr:`~trainer.config.RunConfig.total_steps`):

* **Stage 1** (steps 1 .. T, the full standalone RL schedule): each policy trains exactly
  as ``standalone`` does (its own rollouts, GRPO; the same batches, so the same updates
  and metrics as a standalone run of the same config and seed, step for step) and
  publishes its verified successes the way SGT does
  (:func:`~trainer.regimes.sgt.regime.shortest_successes`: distinct success texts per
  solved prompt, here all of them, not only ``k_sgt``). Each learner keeps every peer
  success of the step's prompts, in SGT's order (prompt by prompt; shortest text first,
  then the source's rank in the pool, then the text), retokenized by THL's text path
  after the learner's own chat-formatted prompt, exactly as SGT retokenizes a rescue
  (:func:`~trainer.regimes.sgt.regime.translate`). The buffer (:class:`SuccessBuffer`)
  holds at most ``max_buffer`` of them, deduplicated by (source, prompt id, text), in the
  order they entered; when full the oldest go first.
* **Stage 2** (S extra steps, T + 1 .. T + S): nothing crosses any more; each policy
  fine-tunes offline on its buffer. With ``sft_from: "rl"`` (the default, the paper's) it
  goes on from the policy RL left, optimizer state and all; with ``"base"`` the first
  stage-2 step first puts the base model's weights back
  (:meth:`trainer.policy.Policy.restart_from_base`: as loaded before step 1, with a fresh
  optimizer state), so the buffered successes are fine-tuned into the initial weights.
  That step's rollouts, drawn before it, are still those of the policy RL left (so
  ``train/*`` at T + 1 is RL's last policy under "base" as under "rl"); validation, which
  follows the update, sees the restarted one. The batch has no samples of its own, so no
  policy-gradient, KL or entropy term: only the auxiliary NLL (loss ``nll``, weight
  ``lambda_sft``) on the buffered successes, one optimizer step per step
  (:meth:`trainer.policy.Policy.train_step` on a batch without samples). The schedule
  (:func:`sft_schedule`) spreads ``sft_epochs`` passes over the buffer evenly over the S
  steps: stage-2 step j (from 0) trains on items ``[j*c, (j+1)*c)`` of the buffer
  repeated ``sft_epochs`` times, ``c = ceil(sft_epochs * len(buffer) / S)``, so the S
  steps cover every item exactly ``sft_epochs`` times, deterministically. Each trained
  item is a transfer event (``sft_sample``: one per peer and prompt per step, with the
  texts and their learner tokens, as SGT's). An empty buffer trains nothing.

Around the extra steps the trainer loop (:mod:`trainer.run`) behaves as for any run of
``total_steps`` steps, plus one rule for the end of the RL steps: rollouts go on every
step, so ``train/*`` stays continuous across the stages; validation runs every
``val_every`` steps counted over the whole run, at step T (where a standalone run of T
steps validates last) and at the last step; a checkpoint is written every
``checkpoint_every`` steps, at step T (the RL-trained policies with the full buffer) and
at the last step. ``python -m trainer run`` runs all T + S steps unless ``--steps`` stops
it earlier, and the run's progress reads "step N/T+S". The buffer is part of the
checkpoint (:meth:`SequentialSFT.state_dict`), and whether a step restarts from the base
weights depends only on its number, so ``--resume`` from a checkpoint of either stage
(step T included: the restart happens at T + 1 after the resume) trains as the run that
was not interrupted.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.batch import AuxTerm, LearnerBatch
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.sequential_sft import (
    BUFFER_SIZE,
    BUFFERED,
    NLL,
    SAMPLE_EVENT,
    SAMPLES,
    STAGE,
    SequentialSFTConfig,
)
from trainer.regimes.sgt.regime import (
    SUCCESSES_TOPIC,
    Rescue,
    learner_prompt_ids,
    peer_candidates,
    pool_ranks,
    published_successes,
    shortest_successes,
    thl_metrics,
    transfer_events,
    translate,
)
from trainer.tasks import run_scoring

log = logging.getLogger("trainer.regimes.sequential_sft")
Key = tuple[str, str, str]
"""(source policy, prompt id, text): what makes a buffered success the same."""


@dataclass(frozen=True)
class BufferedSuccess:
    """A peer's verified success as the learner keeps it: in the learner's tokens."""

    source: str
    prompt_id: str
    text: str
    finished: bool
    """The peer's response ended with its EOS (so the learner's EOS was appended)."""
    prompt_ids: tuple[int, ...]
    """The learner's own chat-formatted prompt."""
    response_ids: tuple[int, ...]
    """The text in the learner's tokenizer (THL's text path)."""
    unk_frac: float
    text_mismatch_frac: float
    reason: str = ""
    """Why the peer's response counted (its source's scoring); blank: not said (a
    checkpoint from before 2026-12)."""

    @property
    def key(self) -> Key:
        return (self.source, self.prompt_id, self.text)


class SuccessBuffer:
    """At most ``capacity`` peer successes, deduplicated by (source, prompt id, text),
    in the order they entered; past the capacity the oldest leave (an item that left may
    enter again later)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[Key, BufferedSuccess] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def add(self, items: Iterable[BufferedSuccess]) -> int:
        """Add the items not held yet, in order; return how many entered."""
        entered = 0
        for item in items:
            if item.key in self._items:
                continue
            self._items[item.key] = item
            entered += 1
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return entered

    def items(self) -> list[BufferedSuccess]:
        """The held items, oldest first."""
        return list(self._items.values())

    def state_dict(self) -> list[dict[str, Any]]:
        return [asdict(item) for item in self._items.values()]

    def load_state_dict(self, state: Sequence[dict[str, Any]]) -> None:
        self._items.clear()
        self.add(
            BufferedSuccess(
                **{
                    **row,
                    "prompt_ids": tuple(row["prompt_ids"]),
                    "response_ids": tuple(row["response_ids"]),
                }
            )
            for row in state
        )


def sft_chunk(buffer_size: int, epochs: int, sft_steps: int, index: int) -> list[int]:
    """The buffer positions stage-2 step ``index`` (0-based) trains on.

    The buffer repeated ``epochs`` times, cut into consecutive chunks of
    ``ceil(epochs * buffer_size / sft_steps)``: over ``sft_steps`` steps every position
    comes ``epochs`` times, in order; the last steps may get fewer (or none). An empty
    buffer, or an index past the schedule, gives nothing.
    """
    total = epochs * buffer_size
    if total == 0 or index < 0:
        return []
    per_step = math.ceil(total / sft_steps)
    start = index * per_step
    return [position % buffer_size for position in range(start, min(start + per_step, total))]


def sft_schedule(buffer_size: int, epochs: int, sft_steps: int) -> list[list[int]]:
    """:func:`sft_chunk` of every stage-2 step, in order."""
    return [sft_chunk(buffer_size, epochs, sft_steps, index) for index in range(sft_steps)]


def offered_successes(
    rollouts: Rollouts, peers: Sequence[StepRecord], ranks: dict[str, int]
) -> list[Rescue]:
    """Every peer success on the step's prompts, prompt by prompt in the step's order and
    within a prompt in SGT's order (:func:`~trainer.regimes.sgt.regime.peer_candidates`)."""
    published = published_successes(peers)
    return [
        offer
        for index, problem in enumerate(rollouts.problems)
        for offer in peer_candidates(index, problem.id, published, ranks)
    ]


class SequentialSFT(Regime):
    settings: SequentialSFTConfig
    topics = {SUCCESSES_TOPIC: dict}

    def __init__(
        self, config: RunConfig, learner: str, tokenizer_dirs: dict[str, Path] | None = None
    ) -> None:
        super().__init__(config, learner, tokenizer_dirs)
        self.buffer = SuccessBuffer(self.settings.max_buffer)
        """This learner's peer successes (stage 1 fills it, stage 2 trains on it)."""

    @property
    def first_sft_step(self) -> int:
        """The run's first stage-2 step, the one after its ``steps`` of RL (1-based)."""
        return self.config.steps + 1

    def stage(self, step: int) -> int:
        return 2 if step >= self.first_sft_step else 1

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        if self.stage(step) == 2:
            return {}  # stage 2 trains offline: nothing crosses
        scoring = run_scoring(self.config)
        return {SUCCESSES_TOPIC: shortest_successes(rollouts, rollouts.group_size, scoring)}

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        if self.stage(step) == 1:
            return self._collect(policy, rollouts, peers)
        return self._fine_tune(policy, step)

    def _collect(self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord]) -> RegimeStep:
        """Stage 1: standalone's batch; the peers' new successes enter the buffer."""
        batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
        offers = [
            offer
            for offer in offered_successes(rollouts, peers, pool_ranks(self.config))
            if (offer.source, offer.prompt_id, offer.text) not in self.buffer
        ]
        kept = [
            BufferedSuccess(
                source=offer.source,
                prompt_id=offer.prompt_id,
                text=offer.text,
                finished=offer.finished,
                prompt_ids=tuple(learner_prompt_ids(rollouts, offer.prompt_index)),
                response_ids=tuple(encoded.target_ids),
                unk_frac=encoded.unk_frac,
                text_mismatch_frac=encoded.text_mismatch_frac,
                reason=offer.reason,
            )
            for offer, encoded in zip(offers, translate(offers, policy.tokenizer), strict=True)
        ]
        entered = self.buffer.add(kept)
        metrics = {
            STAGE: 1.0,
            BUFFER_SIZE: float(len(self.buffer)),
            BUFFERED: float(entered),
            SAMPLES: 0.0,
        }
        return RegimeStep(batch, [], metrics)

    def _fine_tune(self, policy: Policy, step: int) -> RegimeStep:
        """Stage 2: the NLL of this step's share of the buffer, and nothing else; under
        ``sft_from: "base"`` the first stage-2 step starts over from the base weights."""
        if step == self.first_sft_step and self.settings.sft_from == "base":
            policy.restart_from_base()
            log.info("%s: the SFT stage starts from the base model's weights", self.learner)
        held = self.buffer.items()
        positions = sft_chunk(
            len(held), self.settings.sft_epochs, self.settings.sft_steps, step - self.first_sft_step
        )
        chosen = [held[position] for position in positions]
        batch = LearnerBatch(
            prompt_ids=[], response_ids=[], advantages=torch.zeros(0), token_weights=[]
        )
        response_ids = [list(item.response_ids) for item in chosen]
        if chosen:
            batch.aux_terms.append(
                AuxTerm(
                    loss="nll",
                    prompt_ids=[list(item.prompt_ids) for item in chosen],
                    response_ids=response_ids,
                    coef=self.settings.lambda_sft,
                    metric=NLL,
                )
            )
        events = transfer_events(
            step, self.learner, SAMPLE_EVENT, chosen, response_ids, policy.tokenizer
        )
        metrics = {
            STAGE: 2.0,
            BUFFER_SIZE: float(len(held)),
            BUFFERED: 0.0,
            SAMPLES: float(len(chosen)),
        }
        if not chosen:
            metrics[NLL] = 0.0  # the update reports the NLL of what it trained on
        metrics |= thl_metrics(chosen)
        return RegimeStep(batch, events, metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state.get("buffer", []))

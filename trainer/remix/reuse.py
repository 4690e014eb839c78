"""ReMix for one policy worker (SPEC 5): replay, batch mixing, UTD, reincarnation.

The run loop asks :meth:`ReMix.fresh_prompts` how many prompts to roll out, lets the
sharing regime build its batch from them as usual, and hands that batch to
:meth:`ReMix.train`, which

1. tops it up with replayed own samples (1..N versions old) so that a share ``p`` of
   the batch's prompts comes from the replay: with ``P = prompts_per_step`` the step
   rolls out ``round((1 - p) P)`` fresh prompts and replays ``(P - fresh) x G``
   samples (fewer while the replay is still filling, none at step 1);
2. trains with the mix-policy surrogate, V-trace truncation and the KL-convex
   constraint, ``m`` passes over the batch: :meth:`Policy.train_step` of the run
   config's objective (``remix``) with this step's :class:`RemixObjective`, the replayed
   samples' behaviour log-probs reaching it through the batch's hook
   :class:`ReplayedSamples`;
3. stores the step's own fresh rollouts with their behaviour log-probs (``log pi_k``)
   and the advantages the regime gave them, evicting versions older than N;
4. at the end of step ``T``, reincarnates: the reference becomes the current policy, the
   replay is dropped, and every later step is plain on-policy GRPO
   (:meth:`Policy.train_step` of the objective ``grpo``, all ``P`` prompts fresh) --
   exactly the loss of a run without ReMix.

Every sharing regime combines with this: the replay only ever holds the learner's own
rollouts, whose behaviour policy is one of its own versions, so ``q_t = pi_k / pi_{k-i}``
is defined. A PRP peer rollout is used only at the step it crosses (its ratio against
``pi_k`` times PRP's truncated weight, as without ReMix), and so are SGT's rescued
successes (their auxiliary NLL term joins each of the ``m`` passes' optimizer steps).

Replayed samples follow the regime's samples in the batch, so with
``grpo.mini_batches > 1`` the last mini-batches hold the replayed ones (as PRP's peer
rows come last). They are drawn uniformly without replacement by a ``random.Random``
seeded from (run seed, step, policy), so nothing about the draw needs checkpointing; the
replay itself and the reincarnation step do (:meth:`state_dict`).
"""

from __future__ import annotations

import random
from typing import Any

import torch

from trainer import metrics as m
from trainer.batch import BatchHook, LearnerBatch, Update, UpdateTensors, scatter_per_token
from trainer.config import OFF_POLICY_OBJECTIVES, RunConfig, remix_fresh_prompts
from trainer.policy import Policy, Rollouts
from trainer.remix.losses import RemixObjective
from trainer.remix.replay import ReplayBuffer, ReplaySample
from trainer.remix.schedule import kl_lambda, reincarnates_after

PLAIN_OBJECTIVE = OFF_POLICY_OBJECTIVES["none"]
"""The objective of the steps after reincarnation: plain on-policy GRPO."""


class ReplayedSamples(BatchHook):
    """ReMix's part in the update of a mixed batch: ``behaviour_logp[i]`` is, for a
    replayed sample, the per-token log-probs of the past version that sampled it, and
    None for a sample whose ratio is taken against the current policy ``pi_k`` (the
    regime's samples: own fresh rollouts, PRP's peer rollouts).

    It hands the ``remix`` objective ``behaviour_logp`` (``log pi_k`` on the fresh
    samples) and ``replayed``; after the update, :attr:`pi_k` holds every sample's
    ``log pi_k`` (the fresh samples' behaviour log-probs, which the replay keeps)."""

    def __init__(self, behaviour_logp: list[list[float] | None]) -> None:
        self.behaviour_logp = behaviour_logp
        self.pi_k: list[list[float]] = []
        """Per sample, its response tokens' log-probs under the policy before the update
        (filled by :meth:`finish`)."""

    @property
    def replayed(self) -> list[bool]:
        """Per sample: is it a replayed one?"""
        return [b is not None for b in self.behaviour_logp]

    def prepare(self, update: UpdateTensors) -> None:
        if update.old_logp is None:
            raise ValueError(
                f"replayed samples need log pi_k: objective {update.objective!r} does not "
                "score it; train a mixed batch with the objective 'remix'"
            )
        update.inputs["behaviour_logp"] = scatter_per_token(
            update.old_logp.clone(),
            self.behaviour_logp,
            update.response_mask,
            "behaviour log-probs",
        )
        update.inputs["replayed"] = torch.tensor(
            self.replayed, dtype=torch.bool, device=update.device
        )

    def finish(self, update: UpdateTensors) -> dict[str, float]:
        assert update.old_logp is not None
        mask = update.response_mask
        self.pi_k = [
            update.old_logp[row][mask[row].bool()].tolist() for row in range(len(update.batch))
        ]
        return {}


def with_replay(batch: LearnerBatch, replayed: list[ReplaySample]) -> LearnerBatch:
    """``batch`` followed by ``replayed`` samples (their stored advantages and behaviour
    log-probs, in the hook :class:`ReplayedSamples`); the batch's own rows have no
    behaviour log-probs (ratio against pi_k).

    The replayed advantages are made on the device of ``batch.advantages``: a replay
    restored from a checkpoint holds plain floats, whatever device the policy is on.

    The batch's own hooks and old log-probs come along (after ReMix's hook; the replayed
    rows have none): a PRP peer sample trains with its truncated importance weight
    against ``pi_k``, which PRP's hook writes into the mixed batch's ``token_weights``
    and :meth:`ReMix.train` hands back to ``batch``. (Until issue 35 they were dropped,
    and a peer sample trained unweighted under ReMix.)"""
    behaviour: list[list[float] | None] = [None] * len(batch)
    weights = list(batch.token_weights) or [None] * len(batch)
    old_logp = list(batch.old_logp) + [None] * len(replayed) if batch.old_logp else []
    return LearnerBatch(
        prompt_ids=list(batch.prompt_ids) + [list(s.prompt_ids) for s in replayed],
        response_ids=list(batch.response_ids) + [list(s.response_ids) for s in replayed],
        advantages=torch.cat(
            [
                batch.advantages,
                torch.tensor(
                    [s.advantage for s in replayed],
                    dtype=torch.float32,
                    device=batch.advantages.device,
                ),
            ]
        ),
        token_weights=weights + [None] * len(replayed),
        aux_terms=list(batch.aux_terms),
        old_logp=old_logp,
        hooks=[
            ReplayedSamples(behaviour + [list(s.behaviour_logp) for s in replayed]),
            *batch.hooks,
        ],
    )


class ReMix:
    """ReMix state and step logic of one policy."""

    def __init__(self, config: RunConfig, policy_name: str) -> None:
        self.config = config.remix
        self.objective = config.objective
        """The objective of its steps until reincarnation (the run config's: ``remix``)."""
        self.seed = config.seed
        self.policy_name = policy_name
        self.prompts_per_step = config.prompts_per_step
        self.replay = ReplayBuffer(self.config.replay_versions)
        self.reincarnated_at: int | None = None
        """The step ``T`` after which training became plain on-policy, once it has."""

    @property
    def reincarnated(self) -> bool:
        return self.reincarnated_at is not None

    def fresh_prompts(self) -> int:
        """Prompts to roll out this step: ``round((1 - p) P)``, all ``P`` once reincarnated."""
        if self.reincarnated:
            return self.prompts_per_step
        return remix_fresh_prompts(self.prompts_per_step, self.config.replay_fraction)

    def kl_lambda(self, step: int) -> float:
        c = self.config
        return kl_lambda(
            step,
            start=c.kl_lambda_start,
            decay=c.kl_lambda_decay,
            every=c.kl_lambda_every,
            floor=c.kl_lambda_floor,
        )

    def train(
        self, policy: Policy, batch: LearnerBatch, rollouts: Rollouts, step: int
    ) -> dict[str, float]:
        """Train ``policy`` on the regime's ``batch`` for ``step``; the step's metrics.

        The batch's first ``len(rollouts)`` samples must be the policy's own fresh
        rollouts (every regime puts them first). A batch without samples (only
        auxiliary terms: ``sequential_sft``'s stage 2) trains its terms alone, with
        nothing replayed or stored.
        """
        if not len(batch):
            return policy.train_step(batch) | {
                m.REMIX_OFFPOLICY_FRAC: 0.0,
                m.REMIX_REPLAY_SIZE: float(len(self.replay)),
            }
        if self.reincarnated:
            return policy.train_step(batch, Update(objective=PLAIN_OBJECTIVE)) | {
                m.REMIX_OFFPOLICY_FRAC: 0.0,
                m.REMIX_REPLAY_SIZE: 0.0,
            }
        own = len(rollouts.batch)
        if batch.response_ids[:own] != rollouts.batch.response_ids:
            raise ValueError("the regime's batch must start with the policy's own rollouts")
        wanted = (self.prompts_per_step - len(rollouts.problems)) * rollouts.group_size
        rng = random.Random(f"remix-{self.seed}-{step}-{self.policy_name}")
        replayed = self.replay.sample(wanted, step, rng)
        objective = RemixObjective(
            kl_lambda=self.kl_lambda(step),
            c_bar=self.config.c_bar,
            updates_per_batch=self.config.updates_per_batch,
        )
        mixed = with_replay(batch, replayed)
        metrics = policy.train_step(mixed, objective.update(self.objective)) | {
            m.REMIX_LAMBDA: objective.kl_lambda
        }
        # The weights the batch's hooks wrote in the update (PRP's on its peer tokens)
        # go back to the regime's batch, where its events and metrics read them.
        if any(w is not None for w in mixed.token_weights[: len(batch)]):
            batch.token_weights = list(mixed.token_weights[: len(batch)])
        hook = mixed.hook(ReplayedSamples)
        assert hook is not None
        behaviour = hook.pi_k
        advantages = batch.advantages.tolist()
        self.replay.add(
            step,
            [
                ReplaySample(
                    version=step,
                    prompt_ids=tuple(batch.prompt_ids[i]),
                    response_ids=tuple(batch.response_ids[i]),
                    behaviour_logp=tuple(behaviour[i]),
                    advantage=advantages[i],
                )
                for i in range(own)
            ],
        )
        if reincarnates_after(step, self.config.reincarnation_step):
            policy.reincarnate()
            self.replay.clear()
            self.reincarnated_at = step
        return metrics | {
            m.REMIX_OFFPOLICY_FRAC: len(replayed) / (len(replayed) + own),
            m.REMIX_REPLAY_SIZE: float(len(self.replay)),
        }

    # --- checkpoint ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The replay and the reincarnation step, as plain Python (ints, floats, lists):
        no tensor, so a checkpoint read with ``map_location="cpu"`` resumes on any device
        without moving anything (the reincarnated reference's weights are saved apart
        and load into the policy's reference where it lives)."""
        return {"replay": self.replay.state_dict(), "reincarnated_at": self.reincarnated_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (rebuilt as plain Python values)."""
        self.replay.load_state_dict(state["replay"])
        self.reincarnated_at = state["reincarnated_at"]

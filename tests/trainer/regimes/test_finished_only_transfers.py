"""Unfinished responses in SGT and PRP (issue 45, item 3), with real tokenizers of the tiny
zoo: the rollouts are scored the way a policy scores them (:meth:`Policy.score_responses`
under the run's scoring), then published and learned from by the regimes themselves.

The peer's one "success" is SmolLM2's response to "Compute 0+1.", cut off at
``max_new_tokens`` with no box, whose last number is the answer. With ``finished_only``
on it scores 0, so SGT rescues nothing and PRP's peer sample joins the group as a
failure; with it off it still crosses, and the transfer event's sample says it was
unfinished and why it counted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.models import load_tokenizer
from trainer.policy import Policy, Rollouts
from trainer.regimes import sgt
from trainer.regimes.prp.regime import PRP
from trainer.regimes.sgt.regime import SGT, rescue_set, shortest_successes
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem, get_reward, run_scoring

PROBLEM = Problem(id="arith-00001", prompt="Compute 0+1.", answer="1")
TRUNCATED = "Computing 1 (1 + 1) is a classic reminder that some"
WRONG = "0 + 1 = \\boxed{2}"
PEER, LEARNER = "smollm2", "llama"
LEARNER_ZOO_ID, PEER_STAND_IN = "tiny-llama-char", "tiny-qwen-bpe"
"""The learner's own tokenizer; the peer's tokens are a tiny byte-level BPE's (SmolLM2's
is byte-level BPE too; its entry is not built in the test zoo)."""
CUT_OFF_REASON = "last number 1 = 1 (no box); cut off at max_new_tokens"


def _config(regime: str, finished_only: str) -> RunConfig:
    pool = [
        {"name": PEER, "model": "zoo:smollm2-135m-instruct"},
        {"name": LEARNER, "model": f"zoo:{LEARNER_ZOO_ID}"},
    ]
    task = {"finished_only": finished_only}
    return RunConfig.from_dict({"pool": pool, "regime": regime, "task": task})


def _rollouts(
    config: RunConfig, texts: list[str], finished: list[bool], tokenizer: Any = None
) -> Rollouts:
    """One prompt's G = len(texts) rollouts, scored by a policy of the run ``config``
    (:meth:`Policy.score_responses` with the reward and ``finished_only`` trainer/run.py
    gives it); response ids in ``tokenizer`` (an EOS after each finished one)."""
    scoring = run_scoring(config)
    scorer = SimpleNamespace(
        reward_fn=get_reward(scoring.reward, strict_format=scoring.strict_format),
        finished_only=scoring.finished_only,
    )
    answers = [PROBLEM.answer] * len(texts)
    prompts = [PROBLEM.prompt] * len(texts)
    rewards = Policy.score_responses(scorer, prompts, texts, answers, finished)  # type: ignore[arg-type]
    ids = [[3]] * len(texts)
    if tokenizer is not None:
        ids = [
            tokenizer(text, add_special_tokens=False)["input_ids"]
            + ([tokenizer.eos_token_id] if ended else [])
            for text, ended in zip(texts, finished, strict=True)
        ]
    batch = RolloutBatch([[1, 2]] * len(texts), ids, list(texts), list(finished))
    return Rollouts([PROBLEM], batch, torch.tensor(rewards), len(texts), 1.0)


class _Learner:
    """What SGT and PRP need of a learner: its real tokenizer, GRPO advantages and (PRP)
    the log-probs of responses on its tokens."""

    encode_response = Policy.encode_response

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def advantages(self, rollouts: Rollouts) -> torch.Tensor:
        return torch.zeros(len(rollouts.batch))

    def response_logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]]
    ) -> list[list[float]]:
        return [[-1.0] * len(ids) for ids in response_ids]


@pytest.fixture(scope="module")
def tokenizers(zoo_dir: Path) -> dict[str, Any]:
    return {
        LEARNER: load_tokenizer(zoo_dir / LEARNER_ZOO_ID),
        PEER: load_tokenizer(zoo_dir / PEER_STAND_IN),
    }


def _sgt_step(config: RunConfig, tokenizers: dict[str, Any]) -> tuple[Rollouts, Any]:
    """The peer's rollouts and the learner's SGT step on them (the learner fails both)."""
    peer = _rollouts(config, [TRUNCATED, "I am not sure."], [False, True])
    published = SGT(config, PEER).publish(None, peer, step=1)  # type: ignore[arg-type]
    record = StepRecord(PEER, 1, (PROBLEM.id,), topics=published)
    own = _rollouts(config, [WRONG, "\\boxed{3}"], [True, True])
    learner = _Learner(tokenizers[LEARNER])
    return peer, SGT(config, LEARNER).learn(learner, own, [record], step=1)  # type: ignore[arg-type]


def test_sgt_rescues_no_unfinished_answer_with_finished_only(
    tokenizers: dict[str, Any],
) -> None:
    config = _config("sgt", "auto")  # a pool with SmolLM2: auto is on
    peer, step = _sgt_step(config, tokenizers)

    assert peer.rewards.tolist() == [0.0, 0.0]  # the cut-off "1" is no correct answer
    assert shortest_successes(peer, k=1, scoring=run_scoring(config)) == {}
    own = _rollouts(config, [WRONG, "\\boxed{3}"], [True, True])
    assert rescue_set(own, {PEER: shortest_successes(peer, k=1)}, k=1) == ([], 1)
    assert step.events == [] and step.batch.aux_terms == []
    assert step.metrics[sgt.RESCUE_SET_SIZE] == 0.0


def test_without_finished_only_the_rescue_crosses_marked_unfinished_with_its_reason(
    tokenizers: dict[str, Any],
) -> None:
    config = _config("sgt", "off")
    peer, step = _sgt_step(config, tokenizers)

    assert peer.rewards.tolist() == [1.0, 0.0]
    (event,) = step.events
    assert (event["source"], event["target"], event["prompt_id"]) == (PEER, LEARNER, PROBLEM.id)
    (sample,) = event["samples"]
    assert sample["text"] == TRUNCATED
    assert sample["finished"] is False
    assert sample["reason"] == CUT_OFF_REASON
    tokenizer = tokenizers[LEARNER]
    (rescued,) = step.batch.aux_terms[0].response_ids
    assert tokenizer.eos_token_id not in rescued  # cut off: nothing says it should stop
    assert sample["tokens"] == tokenizer.convert_ids_to_tokens(rescued)


def test_a_finished_rescue_says_it_ended_with_eos(tokenizers: dict[str, Any]) -> None:
    config = _config("sgt", "on")
    peer = _rollouts(config, ["0 + 1 = \\boxed{1}", TRUNCATED], [True, False])
    published = SGT(config, PEER).publish(None, peer, step=1)  # type: ignore[arg-type]
    record = StepRecord(PEER, 1, (PROBLEM.id,), topics=published)
    own = _rollouts(config, [WRONG, "\\boxed{3}"], [True, True])
    step = SGT(config, LEARNER).learn(_Learner(tokenizers[LEARNER]), own, [record], step=1)  # type: ignore[arg-type]

    (event,) = step.events
    assert event["samples"][0]["finished"] is True
    assert event["samples"][0]["reason"] == "\\boxed{1} = 1; ended with EOS"


@pytest.mark.parametrize(
    ("finished_only", "reward", "reason"),
    [
        (
            "on",
            0.0,
            "unfinished: cut off at max_new_tokens with no closed \\boxed{} "
            "(finished_only scores it 0)",
        ),
        ("off", 1.0, CUT_OFF_REASON),
    ],
)
def test_prp_peer_samples_say_they_were_unfinished_and_why_they_scored(
    tokenizers: dict[str, Any], zoo_dir: Path, finished_only: str, reward: float, reason: str
) -> None:
    config = _config("prp", finished_only)
    dirs = {PEER: zoo_dir / PEER_STAND_IN, LEARNER: zoo_dir / LEARNER_ZOO_ID}
    peer_policy = _Learner(tokenizers[PEER])
    peer = _rollouts(config, [TRUNCATED, WRONG], [False, True], tokenizers[PEER])
    published = PRP(config, PEER, dirs).publish(peer_policy, peer, step=1)  # type: ignore[arg-type]
    record = StepRecord(PEER, 1, (PROBLEM.id,), topics=published)
    own = _rollouts(config, ["\\boxed{3}", "\\boxed{4}"], [True, True], tokenizers[LEARNER])
    learner = _Learner(tokenizers[LEARNER])

    step = PRP(config, LEARNER, dirs).learn(learner, own, [record], step=1)  # type: ignore[arg-type]

    (event,) = step.events
    by_text = {sample["text"]: sample for sample in event["samples"]}
    cut_off = by_text[TRUNCATED]
    assert (cut_off["reward"], cut_off["finished"], cut_off["reason"]) == (reward, False, reason)
    wrong = by_text[WRONG]
    assert (wrong["reward"], wrong["finished"]) == (0.0, True)
    assert wrong["reason"] == "\\boxed{2} ≠ 1; ended with EOS"
    # The pooled group takes the published rewards: the cut-off answer is the group's one
    # success without finished_only, and with it every response failed (no signal).
    pooled = step.batch.advantages.tolist()
    if reward:
        peer_rows = [sample["text"] for sample in event["samples"]]  # after the learner's own
        assert max(pooled) == pooled[len(own.batch) + peer_rows.index(TRUNCATED)] > 0
    else:
        assert pooled == [0.0] * len(pooled)

"""SGT through THL's text path (issue 18, fix 4): a rescued text is encoded with
``split_special_tokens`` (a literal ``</s>`` in a peer's text stays text) and gets the
learner's EOS only if the peer's response ended with one (not when it was cut off)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.tokenizer_kinds import zoo
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes import sgt
from trainer.regimes.sgt.regime import SGT
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem

PROBLEMS = [Problem(id=f"p{i}", prompt=f"Compute {i}+0.", answer=str(i)) for i in (0, 1)]
FINISHED = "</s> is text: \\boxed{0}"  # the peer stopped with EOS after it
CUT_OFF = "\\boxed{1} and then"  # the peer hit max_new_tokens: no EOS


def _rollouts(texts: list[str], finished: list[bool], rewards: list[float]) -> Rollouts:
    batch = RolloutBatch([[1, 2]] * len(texts), [[3]] * len(texts), texts, finished)
    return Rollouts(PROBLEMS, batch, torch.tensor(rewards), len(texts) // 2, 1.0)


class _Learner:
    """What SGT needs of a learner: GRPO advantages, its (real) tokenizer, and the
    policy's own text encoder."""

    encode_response = Policy.encode_response

    def __init__(self, kind: str) -> None:
        self.tokenizer = zoo(kind)

    def advantages(self, rollouts: Rollouts) -> torch.Tensor:
        return torch.zeros(len(rollouts.batch))


@pytest.mark.parametrize("kind", ["char", "byte_bpe"])
def test_rescued_texts_keep_literal_specials_and_end_with_eos_only_if_finished(
    kind: str,
) -> None:
    pool = [{"name": n, "model": "zoo:tiny-llama-char"} for n in ("a", "b")]
    config = RunConfig.from_dict({"pool": pool, "regime": "sgt"})
    peer = _rollouts([FINISHED, "wrong", CUT_OFF, "no"], [True, True, False, True], [1, 0, 1, 0])
    published = SGT(config, "b").publish(None, peer, step=1)  # type: ignore[arg-type]
    record = StepRecord("b", 1, ("p0", "p1"), topics=published)
    learner = _Learner(kind)
    own = _rollouts(["x", "y", "z", "w"], [True] * 4, [0.0] * 4)

    result = SGT(config, "a").learn(learner, own, [record], step=1)  # type: ignore[arg-type]

    tokenizer = learner.tokenizer
    eos = tokenizer.eos_token_id
    finished_ids, cut_ids = result.batch.aux_terms[0].response_ids
    assert finished_ids.count(eos) == 1 and finished_ids[-1] == eos  # only the real end
    assert tokenizer.decode(finished_ids[:-1]) == FINISHED
    assert eos not in cut_ids  # cut off before finishing: nothing says it should stop
    assert tokenizer.decode(cut_ids) == CUT_OFF
    by_prompt = {e["prompt_id"]: e["samples"] for e in result.events}
    assert by_prompt["p0"][0]["text"] == FINISHED
    assert by_prompt["p0"][0]["tokens"] == tokenizer.convert_ids_to_tokens(finished_ids)
    assert by_prompt["p1"][0]["tokens"] == tokenizer.convert_ids_to_tokens(cut_ids)
    assert result.metrics[sgt.RESCUE_SET_SIZE] == 2.0
    assert result.metrics[m.THL_UNK_FRAC] == 0.0 == result.metrics[m.THL_TEXT_MISMATCH_FRAC]


def test_sgt_reports_what_the_learners_tokenizer_loses() -> None:
    pool = [{"name": n, "model": "zoo:tiny-llama-char"} for n in ("a", "b")]
    config = RunConfig.from_dict({"pool": pool, "regime": "sgt"})
    text = "한국어 \\boxed{0}"  # Hangul is <unk> for the char-level tokenizer
    peer = _rollouts([text, "wrong", "\\boxed{1}", "no"], [True] * 4, [1, 0, 1, 0])
    published = SGT(config, "b").publish(None, peer, step=1)  # type: ignore[arg-type]
    record = StepRecord("b", 1, ("p0", "p1"), topics=published)
    own = _rollouts(["x", "y", "z", "w"], [True] * 4, [0.0] * 4)

    result = SGT(config, "a").learn(_Learner("char"), own, [record], step=1)  # type: ignore[arg-type]

    assert result.metrics[m.THL_UNK_FRAC] == pytest.approx((3 / len(text)) / 2)
    assert result.metrics[m.THL_TEXT_MISMATCH_FRAC] == pytest.approx((3 / len(text)) / 2)

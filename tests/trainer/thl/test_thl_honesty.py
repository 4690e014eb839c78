"""THL's honesty metrics (issue 18, fix 2): a target tokenizer that maps text to ``<unk>``
or drops characters must show it in ``thl/unk_frac`` and ``thl/text_mismatch_frac``, where
the word-span metrics (``thl/residual_span_frac``, ``thl/mass_error``) still read 0 / 0."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.tokenizer_kinds import zoo
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Rollouts
from trainer.regimes.prp.regime import PRP, ROLLOUTS_TOPIC, PublishedRollout
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem
from trainer.thl import align_response_logprobs, retokenize

LOSSY = "한국어 数学 \\boxed{7}"  # Hangul is not in the zoo corpus: <unk> for char level
ACCENTED = "café naïve ñ"


def _source_ids(text: str) -> list[int]:
    source = zoo("byte_bpe")
    return [*source.encode(text, add_special_tokens=False), source.eos_token_id]


def test_unknown_and_dropped_characters_show_where_span_metrics_read_zero() -> None:
    ids = _source_ids(LOSSY)
    retokenized, alignment = align_response_logprobs(
        zoo("byte_bpe"), ids, [-0.5] * len(ids), zoo("char")
    )
    assert alignment.residual_span_frac == 0.0 and alignment.mass_error == 0.0  # blind to it
    unk = zoo("char").unk_token_id
    body = retokenized.target_ids[:-1]  # the appended EOS is not text
    assert retokenized.unk_frac == pytest.approx(body.count(unk) / len(body))
    assert retokenized.unk_frac == pytest.approx(3 / len(body))  # the three Hangul syllables
    # <unk> decodes to nothing: 3 of the 16 characters are lost on the round trip
    assert retokenized.text_mismatch_frac == pytest.approx(3 / len(LOSSY))
    assert {**alignment.metrics(), **retokenized.metrics()} == {
        m.THL_RESIDUAL_SPAN_FRAC: 0.0,
        m.THL_MASS_ERROR: 0.0,
        m.THL_UNK_FRAC: retokenized.unk_frac,
        m.THL_TEXT_MISMATCH_FRAC: retokenized.text_mismatch_frac,
    }


@pytest.mark.parametrize("text", [LOSSY, ACCENTED, "12 + 3 = \\boxed{15}", ""])
def test_a_lossless_pair_scores_exactly_zero(text: str) -> None:
    retokenized = retokenize(zoo("char"), _char_ids(text), zoo("byte_bpe"))
    assert retokenized.unk_frac == 0.0 and retokenized.text_mismatch_frac == 0.0


def _char_ids(text: str) -> list[int]:
    return zoo("char")(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def test_inserted_characters_count_as_a_mismatch_too() -> None:
    # WordPiece cannot say "no space here": \boxed{12} comes back as "\ boxed { 12 }".
    retokenized = retokenize(zoo("byte_bpe"), _source_ids("\\boxed{12}"), zoo("wordpiece"))
    assert retokenized.unk_frac == 0.0
    assert retokenized.text_mismatch_frac == pytest.approx(1 - 10 / 14)
    from trainer.thl.text import text_mismatch_fraction

    assert text_mismatch_fraction("abc", "abc") == 0.0
    assert text_mismatch_fraction("abc", "") == 1.0
    assert text_mismatch_fraction("", "") == 0.0


class _Learner:
    """What PRP's batch assembly needs of the learner: its tokenizer and log-probs."""

    tokenizer = zoo("char")

    def response_logprobs(
        self, prompt_ids: list[list[int]], response_ids: list[list[int]]
    ) -> list[list[float]]:
        return [[-1.0] * len(ids) for ids in response_ids]


def test_prp_logs_the_honesty_metrics_of_what_it_trains_on(tmp_path: Path) -> None:
    source_dir, learner_dir = tmp_path / "bpe", tmp_path / "char"
    zoo("byte_bpe").save_pretrained(source_dir)
    pool = [{"name": "a", "model": "zoo:tiny-llama-char"}, {"name": "b", "model": "zoo:x"}]
    config = RunConfig.from_dict({"pool": pool, "regime": "prp", "prp": {"k_peer": 2}})
    prp = PRP(config, "a", {"a": learner_dir, "b": source_dir})
    problem = Problem(id="p0", prompt="Compute 3+4.", answer="7")
    own = Rollouts(
        [problem],
        RolloutBatch([[1, 2]] * 2, [[5], [6]], ["x", "y"], [True, True]),
        torch.zeros(2),
        2,
        1.0,
    )
    sent = [
        PublishedRollout("p0", tuple(_source_ids(text)), (-0.5,) * len(_source_ids(text)), 1.0)
        for text in (LOSSY, "\\boxed{7}")
    ]
    record = StepRecord("b", 1, ("p0",), topics={ROLLOUTS_TOPIC: sent})

    metrics = prp.learn(_Learner(), own, [record], step=1).metrics  # type: ignore[arg-type]

    lossy = retokenize(zoo("byte_bpe"), _source_ids(LOSSY), zoo("char"))
    assert metrics[m.THL_RESIDUAL_SPAN_FRAC] == 0.0 and metrics[m.THL_MASS_ERROR] == 0.0
    assert metrics[m.THL_UNK_FRAC] == pytest.approx(lossy.unk_frac / 2)  # mean over samples
    assert metrics[m.THL_TEXT_MISMATCH_FRAC] == pytest.approx(lossy.text_mismatch_frac / 2)
    assert metrics[m.THL_UNK_FRAC] > 0 and metrics[m.THL_TEXT_MISMATCH_FRAC] > 0


def test_the_run_page_shows_them_with_the_other_thl_metrics() -> None:
    for key in (m.THL_UNK_FRAC, m.THL_TEXT_MISMATCH_FRAC):
        info = m.describe(key)
        assert info.label != key and info.label.startswith("THL") and info.group == m.SHARING
    sharing = [info.key for info in m.catalogue().entries if info.group == m.SHARING]
    thl = sharing[sharing.index(m.THL_RESIDUAL_SPAN_FRAC) :]
    assert {m.THL_UNK_FRAC, m.THL_TEXT_MISMATCH_FRAC} <= set(thl)

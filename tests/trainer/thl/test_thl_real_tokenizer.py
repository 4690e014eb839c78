"""THL with a real tokenizer (issue 33): SmolLM2-135M-Instruct's (byte-level BPE, 49,152
entries, ChatML specials, ``<|im_end|>`` as EOS) against each tokenizer of the tiny zoo
(char level, byte-level BPE, Unigram with byte fallback), in both directions.

The THL tests of the tiny tokenizers (test_thl.py, test_thl_properties.py,
test_thl_honesty.py) run here on the real pairs, with their strings, strategies and
round-trip rule:

- the tricky strings (accents, CJK, emoji, Hangul the zoo corpus lacks, ``\\boxed{}``, a
  literal ``<|im_end|>``, leading whitespace): each word's log-prob mass arrives, nothing
  is lost, the EOS carries its value, and the honesty metrics read what the target
  tokenizer really does with the text (the char tokenizer turns what it lacks into
  ``<unk>``, Unigram's decoder drops a leading space, byte-level BPE round-trips
  everything);
- the same properties over random text (hypothesis);
- SmolLM2's decoder replay: the char spans of arbitrary SmolLM2 ids (specials, unknown
  ids, byte pieces) reproduce the backend's decoding and tile it.

Marked ``real_model``: skipped, saying how to build it, when the entry is not built.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerBase

from tests.trainer.thl.test_thl import CHAR_SPAN_TEXTS
from tests.trainer.thl.test_thl_honesty import ACCENTED, LOSSY
from tests.trainer.thl.test_thl_properties import LOG_PROBS, TEXTS, assert_round_trip, assert_tiles
from tests.trainer.tokenizer_kinds import zoo
from trainer import metrics as m
from trainer.models import load_tokenizer
from trainer.thl import align_response_logprobs, retokenize, token_char_spans
from trainer.thl.spans import decoder_spans, prefix_spans
from trainer.thl.text import text_mismatch_fraction
from trainer.zoo import SMOLLM2_IDS, ZOO_IDS

pytestmark = pytest.mark.real_model

(SMOLLM2,) = SMOLLM2_IDS
PAIRS = [(SMOLLM2, tiny) for tiny in ZOO_IDS] + [(tiny, SMOLLM2) for tiny in ZOO_IDS]
"""Every (source, target) pair between SmolLM2 and a tiny zoo tokenizer, both ways."""
PAIR_IDS = [f"{source}->{target}" for source, target in PAIRS]
KINDS_BY_MANIFEST = {"char": "char", "byte_bpe": "byte_bpe", "unigram_byte_fallback": "unigram"}
"""A zoo.json ``tokenizer_kind`` -> its kind in tests/trainer/tokenizer_kinds.py."""
TRICKY = (
    *CHAR_SPAN_TEXTS,
    LOSSY,
    ACCENTED,
    "a <|im_end|> b",  # SmolLM2's EOS as literal text stays text
    "<|im_start|>assistant\n\\boxed{-12}",
    " 12 + 3\n\t= \\boxed{15}",  # leading whitespace: Unigram's decoder drops one space
    "ÅΩßü €",  # Ω, ß and € are outside the char vocabulary
    "Wait, 7*8=56? 😅 \\boxed{56}",
)


@dataclass(frozen=True)
class Side:
    """One tokenizer of a pair and its kind (``tokenizer_kind`` in its zoo.json)."""

    tokenizer: PreTrainedTokenizerBase
    kind: str
    """Its kind as tests/trainer/tokenizer_kinds.py names them (``byte_bpe``, ...)."""


@pytest.fixture(scope="module")
def sides(smollm2_dir: Path, zoo_dir: Path) -> dict[str, Side]:
    """SmolLM2's tokenizer and the tiny zoo's, loaded from the zoo as a run loads them."""
    loaded = {}
    for zoo_id, directory in [(SMOLLM2, smollm2_dir)] + [(i, zoo_dir / i) for i in ZOO_IDS]:
        kind = json.loads((directory / "zoo.json").read_text())["tokenizer_kind"]
        loaded[zoo_id] = Side(load_tokenizer(directory), KINDS_BY_MANIFEST[kind])
    # The round-trip rule of test_thl_properties knows the char vocabulary as
    # tests/trainer/tokenizer_kinds.py trains it; the zoo's char policy must have that one.
    for side in loaded.values():
        if side.kind == "char":
            assert side.tokenizer.get_vocab() == zoo("char").get_vocab()
    assert loaded[SMOLLM2].kind == "byte_bpe" and len(loaded[SMOLLM2].tokenizer) == 49152
    return loaded


def source_ids(side: Side, text: str, *, with_eos: bool) -> tuple[list[int], list[int]]:
    """The source's canonical encoding of ``text`` (a literal special stays text), and
    the same ids with the source's EOS appended when ``with_eos``."""
    tokenizer = side.tokenizer
    body = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
    return body, [*body, tokenizer.eos_token_id] if with_eos else body


def missing_chars(side: Side, text: str) -> list[str]:
    """The characters of ``text`` the target cannot write: a char-level vocabulary's
    absent characters (each becomes one ``<unk>``); none for byte-level BPE or Unigram
    with byte fallback, which spell any character in bytes."""
    if side.kind != "char":
        return []
    vocab = side.tokenizer.get_vocab()
    return [char for char in text if char not in vocab]


def expected_round_trip(side: Side, text: str) -> str:
    """What decoding the target's encoding of ``text`` gives (test_thl_properties' rule):
    the text for byte-level BPE, without its leading space for Unigram (Llama-2's
    decoder strips it), without the missing characters for char level."""
    if side.kind == "unigram":
        return text.removeprefix(" ")
    missing = set(missing_chars(side, text))
    return "".join(char for char in text if char not in missing)


def assert_honesty(target: Side, text: str, body: list[int], unk: float, mismatch: float) -> None:
    """``thl/unk_frac`` and ``thl/text_mismatch_frac`` of ``text`` re-encoded as ``body``
    on ``target`` are what the target tokenizer does with those characters."""
    missing = missing_chars(target, text)
    if target.kind == "char":
        assert len(body) == len(text)  # one token per character, <unk> included
        assert body.count(target.tokenizer.unk_token_id) == len(missing)
        assert unk * len(body) == pytest.approx(len(missing))
    else:
        assert target.tokenizer.unk_token_id not in body and unk == 0.0
    round_trip = expected_round_trip(target, text)
    assert (mismatch == 0.0) == (round_trip == text)
    assert mismatch == pytest.approx(text_mismatch_fraction(text, round_trip))


@pytest.mark.parametrize(("source_id", "target_id"), PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("text", TRICKY)
def test_tricky_strings_keep_their_mass_and_report_what_is_lost(
    sides: dict[str, Side], source_id: str, target_id: str, text: str
) -> None:
    source, target = sides[source_id], sides[target_id]
    body, ids = source_ids(source, text, with_eos=True)
    values = [-0.1 * (i + 1) for i in range(len(ids))]

    retokenized, alignment = align_response_logprobs(
        source.tokenizer, ids, values, target.tokenizer
    )

    # The text path: what the source wrote, and the target's ids of it with one EOS.
    assert_round_trip(source.kind, text, body, retokenized.text)
    decoded, spans = token_char_spans(source.tokenizer, body)
    assert decoded == retokenized.text and len(spans) == len(body)
    assert_tiles(decoded, spans)
    target_body = retokenized.target_ids[:-1]
    assert retokenized.target_ids[-1] == target.tokenizer.eos_token_id
    assert retokenized.target_ids.count(target.tokenizer.eos_token_id) == 1
    decoded_target = target.tokenizer.decode(target_body, skip_special_tokens=True)
    assert decoded_target == expected_round_trip(target, retokenized.text)

    # The trace path: every word's mass arrives, the EOS keeps its own value.
    assert retokenized.text.strip()  # every tricky string has a word left on both sides
    assert alignment.lost_mass == 0.0
    assert math.fsum(alignment.target_values) == pytest.approx(math.fsum(values), abs=1e-9)
    assert alignment.mass_error == pytest.approx(0.0, abs=1e-9)
    assert alignment.target_values[-1] == values[-1]
    assert len(alignment.target_values) == len(retokenized.target_ids)

    # The honesty metrics, beside the span metrics.
    assert_honesty(
        target,
        retokenized.text,
        target_body,
        retokenized.unk_frac,
        retokenized.text_mismatch_frac,
    )
    metrics = {**alignment.metrics(), **retokenized.metrics()}
    assert set(metrics) == {
        m.THL_RESIDUAL_SPAN_FRAC,
        m.THL_MASS_ERROR,
        m.THL_UNK_FRAC,
        m.THL_TEXT_MISMATCH_FRAC,
    }
    assert all(math.isfinite(value) for value in metrics.values())


@pytest.mark.parametrize(
    ("source_id", "target_id", "text", "unk_frac", "mismatch_frac"),
    [
        # Hand-counted: the three Hangul syllables of 16 characters become <unk> ...
        (SMOLLM2, "tiny-llama-char", LOSSY, 3 / 16, 3 / 16),
        # ... as Ω, ß and € of 6 do; SmolLM2 and the zoo's BPE spell them in bytes.
        (SMOLLM2, "tiny-llama-char", "ÅΩßü €", 3 / 6, 3 / 6),
        (SMOLLM2, "tiny-qwen-bpe", LOSSY, 0.0, 0.0),
        (SMOLLM2, "tiny-gpt2-unigram", "ÅΩßü €", 0.0, 0.0),
        # Unigram's decoder drops the leading space: 1 character of 21.
        (SMOLLM2, "tiny-gpt2-unigram", " 12 + 3\n\t= \\boxed{15}", 0.0, 1 / 21),
        # Whatever a tiny tokenizer wrote, SmolLM2 writes back exactly.
        ("tiny-llama-char", SMOLLM2, LOSSY, 0.0, 0.0),
        ("tiny-gpt2-unigram", SMOLLM2, "ÅΩßü €", 0.0, 0.0),
    ],
)
def test_the_honesty_metrics_of_a_real_pair_by_hand(
    sides: dict[str, Side],
    source_id: str,
    target_id: str,
    text: str,
    unk_frac: float,
    mismatch_frac: float,
) -> None:
    source, target = sides[source_id], sides[target_id]
    _, ids = source_ids(source, text, with_eos=True)
    retokenized = retokenize(source.tokenizer, ids, target.tokenizer)
    assert retokenized.unk_frac == pytest.approx(unk_frac)
    assert retokenized.text_mismatch_frac == pytest.approx(mismatch_frac)


@pytest.mark.parametrize(("source_id", "target_id"), PAIRS, ids=PAIR_IDS)
@settings(max_examples=40, deadline=None)
@given(text=TEXTS, with_eos=st.booleans(), data=st.data())
def test_alignment_keeps_mass_and_round_trips_between_real_and_tiny(
    sides: dict[str, Side],
    source_id: str,
    target_id: str,
    text: str,
    with_eos: bool,
    data: st.DataObject,
) -> None:
    source, target = sides[source_id], sides[target_id]
    body, ids = source_ids(source, text, with_eos=with_eos)
    values = data.draw(st.lists(LOG_PROBS, min_size=len(ids), max_size=len(ids)))

    retokenized, alignment = align_response_logprobs(
        source.tokenizer, ids, values, target.tokenizer
    )

    values_out = alignment.target_values
    assert len(values_out) == len(retokenized.target_ids)
    assert all(math.isfinite(value) for value in values_out)
    assert math.fsum(values_out) == pytest.approx(math.fsum(values) - alignment.lost_mass, abs=1e-6)
    assert alignment.mass_error * max(alignment.n_words, 1) == pytest.approx(
        abs(alignment.lost_mass), abs=1e-6
    )
    if alignment.lost_mass:
        assert not retokenized.text.strip()
    assert retokenized.ended_with_eos == with_eos
    target_body = retokenized.target_ids[:-1] if with_eos else retokenized.target_ids
    if with_eos:
        assert retokenized.target_ids[-1] == target.tokenizer.eos_token_id
        assert values_out[-1] == values[-1]
    assert target.tokenizer.eos_token_id not in target_body

    assert_round_trip(source.kind, text, body, retokenized.text)
    decoded = target.tokenizer.decode(target_body, skip_special_tokens=True)
    assert decoded == expected_round_trip(target, retokenized.text)
    assert_honesty(
        target,
        retokenized.text,
        target_body,
        retokenized.unk_frac,
        retokenized.text_mismatch_frac,
    )


def smollm2_ids(side: Side) -> st.SearchStrategy[list[int]]:
    """Non-canonical SmolLM2 id sequences: random ids (its 17 specials, unknown ids past
    the vocabulary), canonical encodings of random text, and their byte pieces alone."""
    tokenizer = side.tokenizer
    size = tokenizer.backend_tokenizer.get_vocab_size()
    parts = st.one_of(
        st.lists(st.integers(min_value=0, max_value=size + 3), max_size=4),
        st.lists(st.integers(min_value=0, max_value=16), max_size=3),
        TEXTS.map(lambda text: tokenizer.encode(text[:8], add_special_tokens=False)),
        TEXTS.map(
            lambda text: [
                piece
                for char in text[:4]
                for piece in tokenizer.encode(char, add_special_tokens=False)
            ][:3]  # a character cut after a few of its byte pieces
        ),
    )
    return st.lists(parts, max_size=6).map(lambda chunks: [i for chunk in chunks for i in chunk])


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_decoder_replay_matches_smollm2s_backend(
    sides: dict[str, Side], data: st.DataObject
) -> None:
    side = sides[SMOLLM2]
    ids = data.draw(smollm2_ids(side))
    backend = side.tokenizer.backend_tokenizer
    replay = decoder_spans(backend, ids)
    assert replay is not None  # ByteLevel: modelled, no prefix-decoding fallback
    text, spans = replay
    assert text == backend.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids)
    assert_tiles(text, spans)
    if "\ufffd" not in text:
        assert prefix_spans(backend, ids, text) == spans
    assert (text, spans) == token_char_spans(side.tokenizer, ids)

"""Tokenizer Heterogeneity Layer: properties over random text, ids and every tokenizer pair.

Properties checked (``text`` drawn over whitespace, ASCII, accents, CJK and emoji, without
``▁``, which Metaspace tokenizers cannot tell from a space):

- alignment (every ordered pair of the four zoo tokenizers): one finite value per target
  token; ``sum(target) == sum(source) - lost_mass`` to 1e-6 and
  ``mass_error * max(n_words, 1) == |lost_mass|``; mass is only ever lost when the decoded
  text has no word (a response of only whitespace or unknown characters); with a source
  EOS the target ends with its EOS carrying the source EOS's value;
- round trip: decoding a canonical encoding of ``t`` gives ``t`` for byte-level BPE,
  ``t`` minus one leading space for Unigram (Llama-2's decoder strips it), ``t`` without
  the characters outside the vocabulary for char level (they are ``<unk>``), and for
  WordPiece, when no ``<unk>`` was produced, ``t`` up to whitespace (its decoder re-spaces
  words and punctuation);
- char spans of random (non-canonical) ids, specials, byte pieces and unknown ids
  included: the decoder replay reproduces the backend's decoding and tiles it, for the zoo
  tokenizers and for variants of their decoders, and agrees with the independent
  prefix-decoding algorithm whenever the decoding holds no U+FFFD (on invalid UTF-8 the two
  may hand a replacement character to different pieces of the invalid sequence).
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders

from tests.trainer.tokenizer_kinds import KINDS, zoo
from trainer.thl import align_response_logprobs, token_char_spans
from trainer.thl.spans import BYTE_LEVEL_SYMBOLS, decoder_spans, prefix_spans

ALPHABET = " \n\tabcdeHTxyz0123456789+-=*/.,!?'\"(){}[]\\<>_|#éïçñüßÅΩ数学很有趣一二🙂🚀🦀🎉Ġ"
TEXTS = st.text(alphabet=st.sampled_from(ALPHABET), max_size=60)
LOG_PROBS = st.floats(min_value=-40.0, max_value=-1e-3, allow_nan=False)


def squash(text: str) -> str:
    return "".join(text.split())


def assert_round_trip(kind: str, original: str, ids: list[int], decoded: str) -> None:
    """``decoded`` (of a canonical encoding ``ids`` of ``original``) as the module says."""
    tokenizer = zoo(kind)
    if kind == "byte_bpe":
        assert decoded == original
    elif kind == "unigram":
        assert decoded == original.removeprefix(" ")
    elif kind == "char":
        vocab = tokenizer.get_vocab()
        assert decoded == "".join(char for char in original if char in vocab)
    elif tokenizer.unk_token_id not in ids and "do not" not in original:  # clean-up rewrites it
        assert squash(decoded) == squash(original)


def assert_tiles(text: str, spans: list[tuple[int, int]]) -> None:
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(spans))
    assert all(start <= end for start, end in spans)
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
    else:
        assert text == ""


@pytest.mark.parametrize(("source_kind", "target_kind"), list(itertools.product(KINDS, KINDS)))
@settings(max_examples=40, deadline=None)
@given(text=TEXTS, with_eos=st.booleans(), data=st.data())
def test_alignment_keeps_mass_and_round_trips(
    source_kind: str, target_kind: str, text: str, with_eos: bool, data: st.DataObject
) -> None:
    source, target = zoo(source_kind), zoo(target_kind)
    body = source.encode(text, add_special_tokens=False, split_special_tokens=True)
    ids = [*body, source.eos_token_id] if with_eos else body
    values = data.draw(st.lists(LOG_PROBS, min_size=len(ids), max_size=len(ids)))

    retokenized, alignment = align_response_logprobs(source, ids, values, target)

    values_out = alignment.target_values
    assert len(values_out) == len(retokenized.target_ids)
    assert all(math.isfinite(value) for value in values_out)
    assert math.fsum(values_out) == pytest.approx(math.fsum(values) - alignment.lost_mass, abs=1e-6)
    assert alignment.mass_error * max(alignment.n_words, 1) == pytest.approx(
        abs(alignment.lost_mass), abs=1e-6
    )
    if alignment.lost_mass:
        assert not retokenized.text.strip()
    assert 0.0 <= alignment.residual_span_frac <= 1.0
    assert 1 <= alignment.n_spans <= max(alignment.n_words, 1)
    assert retokenized.ended_with_eos == with_eos
    if with_eos:
        assert retokenized.target_ids[-1] == target.eos_token_id
        assert values_out[-1] == values[-1]
    assert len(retokenized.source_spans) == len(ids)

    assert retokenized.text == source.decode(body, skip_special_tokens=True)
    assert_round_trip(source_kind, text, body, retokenized.text)
    target_body = retokenized.target_ids[:-1] if with_eos else retokenized.target_ids
    decoded = target.decode(target_body, skip_special_tokens=True)
    assert_round_trip(target_kind, retokenized.text, target_body, decoded)


def byte_piece_ids(kind: str, text: str) -> list[int]:
    """``text`` spelled one byte per token (byte-level symbols or ``<0xNN>`` pieces)."""
    backend = zoo(kind).backend_tokenizer
    if kind == "byte_bpe":
        symbol = {byte: char for char, byte in BYTE_LEVEL_SYMBOLS.items()}
        return [backend.token_to_id(symbol[byte]) for byte in text.encode()]
    if kind == "unigram":
        return [backend.token_to_id(f"<0x{byte:02X}>") for byte in text.encode()]
    return backend.encode(text, add_special_tokens=False).ids


def generated_ids(kind: str) -> st.SearchStrategy[list[int]]:
    """Non-canonical id sequences: random ids (specials, unknown ids) and byte spellings."""
    size = zoo(kind).backend_tokenizer.get_vocab_size()
    parts = st.one_of(
        st.lists(st.integers(min_value=0, max_value=size + 3), max_size=4),
        TEXTS.map(lambda text: byte_piece_ids(kind, text[:6])),
        TEXTS.map(lambda text: zoo(kind).encode(text[:8], add_special_tokens=False)),
    )
    return st.lists(parts, max_size=6).map(lambda chunks: [i for chunk in chunks for i in chunk])


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_decoder_replay_matches_the_backend_on_generated_ids(
    kind: str, data: st.DataObject
) -> None:
    ids = data.draw(generated_ids(kind))
    backend = zoo(kind).backend_tokenizer
    replay = decoder_spans(backend, ids)
    assert replay is not None
    text, spans = replay
    assert text == backend.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids)
    assert_tiles(text, spans)
    if "\ufffd" not in text:
        assert prefix_spans(backend, ids, text) == spans


def variant(kind: str, decoder: decoders.Decoder, added: tuple[str, ...] = ()) -> Tokenizer:
    backend = Tokenizer.from_str(zoo(kind).backend_tokenizer.to_str())
    backend.decoder = decoder
    backend.add_tokens(list(added))
    return backend


VARIANTS = {
    "metaspace_always": ("unigram", decoders.Metaspace("▁", "always")),
    "metaspace_first": ("unigram", decoders.Metaspace("▁", "first")),
    "metaspace_never": ("unigram", decoders.Metaspace("▁", "never")),
    "gemma_like": (
        "unigram",
        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
    ),
    "strip_two": (
        "unigram",
        decoders.Sequence(
            [
                decoders.Replace("▁", " "),
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(" ", 2, 0),
            ]
        ),
    ),
    "wordpiece_no_cleanup": ("wordpiece", decoders.WordPiece("##", cleanup=False)),
    "byte_level_then_strip": (
        "byte_bpe",
        decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)]),
    ),
    "char_replace_multi": (
        "char",
        decoders.Sequence([decoders.Fuse(), decoders.Replace("ab", "X")]),
    ),
}


@pytest.mark.parametrize("name", VARIANTS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_char_spans_of_decoder_variants_match_the_backend(name: str, data: st.DataObject) -> None:
    kind, decoder = VARIANTS[name]
    backend = variant(kind, decoder, added=("ab cd", "<x>"))
    extra = [backend.token_to_id("ab cd"), backend.token_to_id("<x>")]
    ids = data.draw(
        st.lists(st.one_of(generated_ids(kind), st.sampled_from(extra).map(lambda i: [i])))
    ).copy()
    ids = [i for chunk in ids for i in chunk]
    text, spans = token_char_spans(backend, ids)
    assert text == backend.decode(ids, skip_special_tokens=True)
    assert len(spans) == len(ids)
    assert_tiles(text, spans)
    if name != "char_replace_multi":  # a pattern across tokens is left to the fallback
        assert decoder_spans(backend, ids) == (text, spans)

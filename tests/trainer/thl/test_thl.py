"""Tokenizer Heterogeneity Layer: hand-built cases with hand-computed expectations."""

from __future__ import annotations

import copy
import itertools

import pytest
from tokenizers import Regex, Tokenizer, decoders

from tests.trainer.tokenizer_kinds import KINDS, zoo
from trainer.thl import (
    Alignment,
    align_response_logprobs,
    redistribute_logprobs,
    retokenize,
    token_char_spans,
)
from trainer.thl.spans import decoder_spans, prefix_spans
from trainer.thl.text import disjoint_spans

CRAB_BYTES = ("<0xF0>", "<0x9F>", "<0xA6>", "<0x80>")  # U+1F980, not in the zoo corpus


def ids_of(kind: str, tokens: list[str]) -> list[int]:
    ids = zoo(kind).convert_tokens_to_ids(tokens)
    assert zoo(kind).unk_token_id not in ids or "<unk>" in tokens, tokens
    return ids


def pieces(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[start:end] for start, end in spans]


def assert_tiles(text: str, spans: list[tuple[int, int]]) -> None:
    bounds = [start for start, _ in spans[:1]] + [end for _, end in spans]
    assert bounds == sorted(bounds)
    assert all(end == start for (_, end), (start, _) in itertools.pairwise(spans))
    assert "".join(pieces(text, spans)) == text
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == len(text)


# --- trace path: word-level mass redistribution ------------------------------------------


def test_refining_segmentations_keep_every_words_mass() -> None:
    text = "the cat sat"
    source = [(0, 3), (3, 7), (7, 11)]  # "the", " cat", " sat"
    target = [(0, 2), (2, 3), (3, 5), (5, 7), (7, 9), (9, 10), (10, 11)]  # th|e| c|at| s|a|t
    alignment = redistribute_logprobs(text, source, [-1.0, -2.0, -3.0], target)
    assert alignment == Alignment(
        target_values=[-0.5, -0.5, -1.0, -1.0, -1.0, -1.0, -1.0],
        n_words=3,
        n_spans=3,
        residual_span_frac=0.0,
        mass_error=0.0,
        lost_mass=0.0,
    )
    assert alignment.metrics() == {"thl/residual_span_frac": 0.0, "thl/mass_error": 0.0}


def test_a_target_piece_across_a_space_merges_two_words() -> None:
    text = "the cat sat"
    source = [(0, 3), (3, 7), (7, 11)]
    target = [(0, 5), (5, 7), (7, 11)]  # "the c", "at", " sat"
    alignment = redistribute_logprobs(text, source, [-1.0, -2.0, -3.0], target)
    assert alignment.target_values == [-1.5, -1.5, -3.0]
    assert (alignment.n_words, alignment.n_spans) == (3, 2)
    assert alignment.residual_span_frac == pytest.approx(2 / 3)
    assert alignment.mass_error == 0.0


def test_a_source_token_over_two_words_merges_them_too() -> None:
    text = "ab cd ef gh"
    source = [(0, 5), (5, 8), (8, 11)]  # "ab cd", " ef", " gh"
    target = [(0, 2), (2, 5), (5, 8), (8, 10), (10, 11)]
    alignment = redistribute_logprobs(text, source, [-4.0, -1.0, -2.0], target)
    assert alignment.target_values == [-2.0, -2.0, -1.0, -1.0, -1.0]
    assert (alignment.n_words, alignment.n_spans) == (4, 3)
    assert alignment.residual_span_frac == 0.5


def test_whitespace_goes_to_the_following_word_and_trailing_whitespace_to_the_last() -> None:
    text = "  a  b\n"
    source = [(0, 3), (3, 5), (5, 6), (6, 7)]  # "  a", "  ", "b", "\n"
    target = [(0, 2), (2, 3), (3, 4), (4, 6), (6, 7)]  # "  ", "a", " ", " b", "\n"
    alignment = redistribute_logprobs(text, source, [-1.0, -2.0, -3.0, -4.0], target)
    # word "a" (with its leading spaces): -1 over 2 tokens; word "b": -2 - 3 - 4 over 3.
    assert alignment.target_values == [-0.5, -0.5, -3.0, -3.0, -3.0]
    assert (alignment.n_words, alignment.n_spans, alignment.residual_span_frac) == (2, 2, 0.0)


def test_whitespace_inside_a_token_never_merges_words() -> None:
    text = "end.\nNext"
    source = [(0, 3), (3, 5), (5, 9)]  # "end", ".\n", "Next"
    target = [(0, 4), (4, 5), (5, 9)]  # "end.", "\n", "Next"
    alignment = redistribute_logprobs(text, source, [-1.0, -2.0, -4.0], target)
    assert alignment.target_values == [-3.0, -2.0, -2.0]
    assert alignment.residual_span_frac == 0.0


def test_zero_width_tokens_go_to_the_word_of_the_next_character() -> None:
    text = "ab cd"
    source = [(0, 0), (0, 2), (2, 2), (2, 5), (5, 5)]  # BOS, "ab", special, " cd", end
    target = [(0, 0), (0, 2), (2, 5), (5, 5)]
    alignment = redistribute_logprobs(text, source, [-1.0, -2.0, -4.0, -8.0, -16.0], target)
    assert alignment.target_values == [-1.5, -1.5, -14.0, -14.0]
    assert alignment.mass_error == 0.0


def test_a_span_without_target_tokens_loses_its_mass_and_reports_it() -> None:
    alignment = redistribute_logprobs("ab cd", [(0, 2), (2, 5)], [-1.0, -2.0], [(0, 2)])
    assert alignment.target_values == [-1.0]
    assert alignment.lost_mass == -2.0
    assert alignment.mass_error == 1.0  # |(-3) - (-1)| / 2 words


def test_target_tokens_without_source_tokens_get_zero() -> None:
    alignment = redistribute_logprobs("ab cd", [(0, 2)], [-1.0], [(0, 2), (2, 5)])
    assert alignment.target_values == [-1.0, 0.0]
    assert alignment.lost_mass == 0.0


def test_a_text_without_words_is_one_unit() -> None:
    alignment = redistribute_logprobs(" \n", [(0, 2)], [-1.0], [(0, 1), (1, 2)])
    assert alignment.target_values == [-0.5, -0.5]
    assert (alignment.n_words, alignment.n_spans, alignment.residual_span_frac) == (0, 1, 0.0)
    empty = redistribute_logprobs("", [(0, 0)], [-1.0], [])
    assert (empty.target_values, empty.lost_mass, empty.mass_error) == ([], -1.0, 1.0)


@pytest.mark.parametrize(
    ("spans", "values", "message"),
    [
        ([(0, 2)], [-1.0, -2.0], "1 source spans but 2 values"),
        ([(0, 9)], [-1.0], "not inside"),
        ([(2, 1)], [-1.0], "not inside"),
        ([(0, 2)], [float("nan")], "finite"),
        ([(0, 2)], [float("-inf")], "finite"),
    ],
)
def test_redistribution_rejects_bad_input(
    spans: list[tuple[int, int]], values: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        redistribute_logprobs("ab cd", spans, values, [(0, 5)])


# --- char spans of generated ids -------------------------------------------------------


CHAR_SPAN_TEXTS = ("the cat sat", "12+34=46", "café naïve", "数学很有趣", "🙂🚀 ok", "\\boxed{85}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", CHAR_SPAN_TEXTS)
def test_char_spans_tile_the_decoded_text(kind: str, text: str) -> None:
    tokenizer = zoo(kind)
    ids = tokenizer.encode(text, add_special_tokens=False)
    decoded, spans = token_char_spans(tokenizer, ids)
    assert len(spans) == len(ids)
    assert decoded == tokenizer.decode(ids, skip_special_tokens=True)
    assert_tiles(decoded, spans)
    if kind != "wordpiece":  # WordPiece does not keep whitespace: see the next test
        assert decoded == text


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("byte_bpe", "🙂🚀 ok", ["", "", "🙂", "", "", "🚀", " o", "k"]),
        ("byte_bpe", "café", ["c", "a", "f", "", "é"]),
        ("byte_bpe", "数学", ["", "", "数", "", "", "学"]),
        ("unigram", "café naïve", ["ca", "f", "é", " ", "n", "a", "ï", "v", "e"]),
        ("unigram", "\\boxed{85}", ["", "\\", "box", "ed", "{", "8", "5", "}"]),
        ("char", "数学 ok", ["数", "学", " ", "o", "k"]),
        ("wordpiece", "12+34=46", ["12", " +", " 34", " =", " 46"]),
        ("wordpiece", "café naïve", ["c", "a", "f", "é", " n", "a", "ï", "v", "e"]),
        ("wordpiece", "\\boxed{85}", ["\\", " boxed", " {", " 85", " }"]),
    ],
)
def test_char_spans_of_canonical_encodings(kind: str, text: str, expected: list[str]) -> None:
    tokenizer = zoo(kind)
    decoded, spans = token_char_spans(tokenizer, tokenizer.encode(text, add_special_tokens=False))
    assert pieces(decoded, spans) == expected


def test_char_spans_of_non_canonical_ids_with_specials_and_unknown_ids() -> None:
    tokenizer = zoo("byte_bpe")
    tokens = ["<s>", "t", "h", "e", "</s>", "Ġ", "c", "a", "t"]
    ids = [*ids_of("byte_bpe", tokens), 10**6]
    assert ids != tokenizer.encode("the cat", add_special_tokens=False)
    text, spans = token_char_spans(tokenizer, ids)
    assert text == "the cat"
    assert spans == [(0, 0), (0, 1), (1, 2), (2, 3), (3, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 7)]


def test_unknown_characters_are_zero_width_unk_tokens() -> None:
    for kind in ("char", "wordpiece"):
        tokenizer = zoo(kind)
        ids = tokenizer.encode("a 🦀 b", add_special_tokens=False)
        assert tokenizer.unk_token_id in ids
        text, spans = token_char_spans(tokenizer, ids)
        assert text == {"char": "a  b", "wordpiece": "a b"}[kind]
        assert pieces(text, spans)[ids.index(tokenizer.unk_token_id)] == ""
        assert_tiles(text, spans)


def test_byte_fallback_pieces_of_an_emoji_give_it_to_the_last_piece() -> None:
    tokenizer = zoo("unigram")
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("🦀", add_special_tokens=False)) == [
        "▁",
        *CRAB_BYTES,
    ]
    ids = ids_of("unigram", ["▁", "x", "▁", *CRAB_BYTES, "!"])
    text, spans = token_char_spans(tokenizer, ids)
    assert text == "x 🦀!"
    assert spans == [(0, 0), (0, 1), (1, 2), (2, 2), (2, 2), (2, 2), (2, 3), (3, 4)]


def test_an_invalid_byte_run_decodes_to_one_replacement_character_per_piece() -> None:
    tokenizer = zoo("unigram")
    ids = ids_of("unigram", ["x", *CRAB_BYTES[:3], "▁", "y"])
    text, spans = token_char_spans(tokenizer, ids)
    assert text == "x\ufffd\ufffd\ufffd y"
    assert spans == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]


def test_byte_level_pieces_split_inside_a_character_and_across_a_space() -> None:
    tokenizer = zoo("byte_bpe")
    ids = ids_of("byte_bpe", ["a", "ĠðŁ", "¦", "Ģ", "Ġ", "ðŁ"])  # "a 🦀 " then half an emoji
    text, spans = token_char_spans(tokenizer, ids)
    assert text == "a 🦀 \ufffd"
    assert pieces(text, spans) == ["a", " ", "", "🦀", " ", "\ufffd"]


def test_metaspace_leading_space_and_wordpiece_word_starts() -> None:
    unigram, wordpiece = zoo("unigram"), zoo("wordpiece")
    text, spans = token_char_spans(unigram, ids_of("unigram", ["<s>", "▁", "▁", "x"]))
    assert (text, pieces(text, spans)) == (" x", ["", "", " ", "x"])
    text, spans = token_char_spans(
        wordpiece, ids_of("wordpiece", ["<s>", "##a", "the", "##a", "."])
    )
    assert (text, pieces(text, spans)) == ("##a thea.", ["", "##a", " the", "a", "."])


def char_level_with(decoder: decoders.Decoder | None) -> Tokenizer:
    backend = Tokenizer.from_str(zoo("char").backend_tokenizer.to_str())
    backend.decoder = decoder
    return backend


def test_an_unmodelled_decoder_falls_back_to_prefix_decoding() -> None:
    backend = char_level_with(decoders.CTC())  # drops repeats: not a per-token decoder
    ids = [backend.token_to_id(char) for char in "baab 🙂"]
    assert decoder_spans(backend, ids) is None
    text, spans = token_char_spans(backend, ids)
    assert text == "bab 🙂" == backend.decode(ids)
    assert spans == [(0, 1), (1, 2), (2, 2), (2, 3), (3, 4), (4, 5)]
    assert prefix_spans(backend, [], "") == []


@pytest.mark.parametrize(
    ("decoder", "expected"),
    [
        (None, "x   a b   .   y"),  # no decoder: tokens joined with spaces
        (decoders.Sequence([decoders.Replace(Regex("a+"), "A"), decoders.Fuse()]), "x Ab . y"),
        (decoders.Sequence([decoders.Fuse(), decoders.Replace("ab", "<>")]), "x <> . y"),
        (decoders.Sequence([decoders.Fuse(), decoders.Strip("y", 0, 1)]), "x ab . "),
        (decoders.Sequence([decoders.Fuse(), decoders.WordPiece()]), "x ab. y"),
    ],
)
def test_decoders_beyond_the_replay_fall_back(
    decoder: decoders.Decoder | None, expected: str
) -> None:
    backend = char_level_with(decoder)
    ids = [backend.token_to_id(char) for char in "x ab . y"]
    assert decoder_spans(backend, ids) is None
    text, spans = token_char_spans(backend, ids)
    assert text == expected == backend.decode(ids)
    assert_tiles(text, spans)


def test_token_char_spans_needs_a_fast_tokenizer() -> None:
    with pytest.raises(TypeError, match="fast"):
        token_char_spans(object(), [1])  # type: ignore[arg-type]


# --- text path ---------------------------------------------------------------------------


def test_disjoint_spans_give_a_shared_character_to_its_last_token() -> None:
    assert disjoint_spans([(0, 1), (0, 1), (1, 3)], 3) == [(0, 0), (0, 1), (1, 3)]
    assert disjoint_spans([(16, 18), (17, 18), (17, 18)], 18) == [(16, 17), (17, 17), (17, 18)]
    assert disjoint_spans([(0, 4)], 2) == [(0, 2)]


def test_retokenize_appends_the_target_eos_only_after_a_source_eos() -> None:
    source, target = zoo("byte_bpe"), zoo("wordpiece")
    ids = source.encode("the cat sat", add_special_tokens=False)
    ended = retokenize(source, [*ids, source.eos_token_id], target)
    assert ended.ended_with_eos
    assert ended.text == "the cat sat"
    assert target.convert_ids_to_tokens(ended.target_ids) == [
        "the",
        "c",
        "##a",
        "##t",
        "s",
        "##a",
        "##t",
        "</s>",
    ]
    assert ended.target_spans == [
        (0, 3),
        (4, 5),
        (5, 6),
        (6, 7),
        (8, 9),
        (9, 10),
        (10, 11),
        (11, 11),
    ]
    assert ended.source_spans[-1] == (11, 11) and len(ended.source_spans) == len(ids) + 1
    truncated = retokenize(source, ids, target)
    assert not truncated.ended_with_eos
    assert truncated.target_ids == ended.target_ids[:-1]


def test_a_literal_special_token_in_the_text_stays_text() -> None:
    source, target = zoo("char"), zoo("byte_bpe")
    ids = [*(source.convert_tokens_to_ids(list("a </s> b"))), source.eos_token_id]
    retokenized = retokenize(source, ids, target)
    assert retokenized.text == "a </s> b"
    assert retokenized.target_ids.count(target.eos_token_id) == 1
    assert target.decode(retokenized.target_ids[:-1]) == "a </s> b"


def test_a_target_without_eos_cannot_end_a_finished_response() -> None:
    source, target = zoo("char"), copy.deepcopy(zoo("unigram"))
    target.eos_token = None
    with pytest.raises(ValueError, match="no EOS"):
        retokenize(source, [*source.convert_tokens_to_ids(["a"]), source.eos_token_id], target)


# --- both paths and the EOS rule -------------------------------------------------------


def test_align_gives_the_target_eos_the_source_eos_log_prob() -> None:
    source, target = zoo("byte_bpe"), zoo("char")
    ids = [*ids_of("byte_bpe", ["The", "Ġtimes"]), source.eos_token_id]
    retokenized, alignment = align_response_logprobs(source, ids, [-1.0, -2.0, -0.25], target)
    assert retokenized.text == "The times"
    assert target.convert_ids_to_tokens(retokenized.target_ids) == [*"The times", "</s>"]
    third, sixth = -1.0 / 3, -2.0 / 6
    assert alignment.target_values == [*[third] * 3, *[sixth] * 6, -0.25]
    assert alignment.mass_error == pytest.approx(0.0, abs=1e-12)
    assert (alignment.n_words, alignment.n_spans) == (2, 2)


def test_align_without_eos_sends_every_source_token_through_the_trace_path() -> None:
    source, target = zoo("unigram"), zoo("wordpiece")
    ids = ids_of("unigram", ["<s>", "x", "▁", *CRAB_BYTES])
    retokenized, alignment = align_response_logprobs(source, ids, [-1.0] * 7, target)
    assert retokenized.text == "x 🦀" and not retokenized.ended_with_eos
    assert target.convert_ids_to_tokens(retokenized.target_ids) == ["x", "<unk>"]
    # BOS joins "x"; the marker and the four byte pieces all belong to the emoji's word.
    assert alignment.target_values == [-2.0, -5.0]


def test_align_checks_its_inputs() -> None:
    source, target = zoo("char"), zoo("byte_bpe")
    ids = source.convert_tokens_to_ids(["a", "b"])
    with pytest.raises(ValueError, match="2 source ids but 1 log-probs"):
        align_response_logprobs(source, ids, [-1.0], target)
    with pytest.raises(ValueError, match="finite"):
        align_response_logprobs(
            source, [*ids, source.eos_token_id], [-1.0, -1.0, float("nan")], target
        )

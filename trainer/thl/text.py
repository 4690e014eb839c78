"""THL text path: a source policy's response ids -> the learner's response ids.

Only the response crosses tokenizers; the prompt never does (each side applies its own chat
template to the raw prompt text, see :func:`trainer.chat.format_prompt`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from trainer.thl.spans import Span, backend_of, token_char_spans


@dataclass(frozen=True)
class Retokenized:
    """A source response re-encoded with the target tokenizer.

    ``text`` is the source response decoded without special tokens (see
    :func:`~trainer.thl.spans.token_char_spans`). ``source_spans`` tile ``text``, one per
    source id (a trailing EOS gets ``(len(text), len(text))``). ``target_spans`` are ordered
    and disjoint (``0 <= start <= end <= next start``, ``end <= len(text)``) but may leave
    gaps (whitespace a WordPiece tokenizer drops); the appended target EOS, if any, gets
    ``(len(text), len(text))``.

    ``unk_frac`` and ``text_mismatch_frac`` say how lossy the re-encoding is (SPEC 9):
    the share of target tokens that are the target's unknown token, and of characters
    that the round trip through the target tokenizer does not give back
    (:func:`text_mismatch_fraction`); both leave the appended EOS out and are exactly 0
    for a lossless pair.
    """

    text: str
    target_ids: list[int]
    target_spans: list[Span]
    source_spans: list[Span]
    ended_with_eos: bool
    unk_frac: float
    text_mismatch_frac: float

    def metrics(self) -> dict[str, float]:
        """The SPEC's text-path THL metrics for this response."""
        return {"thl/unk_frac": self.unk_frac, "thl/text_mismatch_frac": self.text_mismatch_frac}


@dataclass(frozen=True)
class Encoded:
    """A response text on the target tokenizer: ids (the target EOS appended when asked),
    their spans in the text, and the honesty metrics of :class:`Retokenized`."""

    target_ids: list[int]
    target_spans: list[Span]
    unk_frac: float
    text_mismatch_frac: float


def retokenize(
    source_tokenizer: PreTrainedTokenizerBase,
    source_ids: Sequence[int],
    target_tokenizer: PreTrainedTokenizerBase,
) -> Retokenized:
    """Decode a response with the source tokenizer and re-encode its text with the target.

    ``source_ids`` are a response as the rollout engine returns it: generated ids that end
    with the source EOS if generation stopped there. The text is encoded with
    ``add_special_tokens=False`` and ``split_special_tokens=True`` (a literal ``"</s>"``
    in a response is text, not a control token); the target EOS is appended when the
    source response ended with the source EOS, so the learner also learns to stop.
    """
    source_ids = [int(token_id) for token_id in source_ids]
    ended_with_eos = _ends_with_eos(source_tokenizer, source_ids)
    body = source_ids[:-1] if ended_with_eos else source_ids
    text, source_spans = token_char_spans(source_tokenizer, body)
    encoded = encode_text(text, target_tokenizer, ended_with_eos=ended_with_eos)
    if ended_with_eos:
        source_spans.append((len(text), len(text)))
    return Retokenized(
        text,
        encoded.target_ids,
        encoded.target_spans,
        source_spans,
        ended_with_eos,
        encoded.unk_frac,
        encoded.text_mismatch_frac,
    )


def encode_text(
    text: str, target_tokenizer: PreTrainedTokenizerBase, *, ended_with_eos: bool
) -> Encoded:
    """The text path's encoder: ``text`` as target response ids, safely.

    ``add_special_tokens=False`` and ``split_special_tokens=True`` (a literal ``"</s>"``
    in the text stays text, never a control token); the target EOS is appended, with span
    ``(len(text), len(text))``, only when ``ended_with_eos`` (the response stopped there
    rather than being cut off).
    """
    encoding = target_tokenizer(
        text,
        add_special_tokens=False,
        return_offsets_mapping=True,
        split_special_tokens=True,
    )
    target_ids = list(encoding["input_ids"])
    target_spans = disjoint_spans(encoding["offset_mapping"], len(text))
    round_trip = backend_of(target_tokenizer).decode(target_ids, skip_special_tokens=True)
    unk_frac = unknown_fraction(target_ids, target_tokenizer.unk_token_id)
    mismatch = text_mismatch_fraction(text, round_trip)
    if ended_with_eos:
        if target_tokenizer.eos_token_id is None:
            raise ValueError("the target tokenizer has no EOS token to end the response with")
        target_ids.append(target_tokenizer.eos_token_id)
        target_spans.append((len(text), len(text)))
    return Encoded(target_ids, target_spans, unk_frac, mismatch)


def unknown_fraction(ids: Sequence[int], unk_id: int | None) -> float:
    """Share of ``ids`` that are the unknown token (0 without one, or without ids)."""
    if unk_id is None or not ids:
        return 0.0
    return sum(token_id == unk_id for token_id in ids) / len(ids)


def text_mismatch_fraction(text: str, round_trip: str) -> float:
    """Share of characters that ``round_trip`` does not give back of ``text``.

    ``1 - matched / max(len(text), len(round_trip))``, ``matched`` the characters of
    difflib's alignment of the two strings: a character lost (``<unk>`` decodes to
    nothing), replaced or inserted (WordPiece's spaces) counts; 0 exactly when the round
    trip is the text, 1 when nothing survives.
    """
    if text == round_trip:
        return 0.0
    matcher = difflib.SequenceMatcher(None, text, round_trip, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return 1.0 - matched / max(len(text), len(round_trip))


def disjoint_spans(offsets: Sequence[Sequence[int]], text_length: int) -> list[Span]:
    """Make encoder offsets ordered and disjoint, keeping each character with its last token.

    Encoders give every byte piece of one character the character's offsets (and Metaspace
    a prepended ``▁`` the first character's); walking backwards, each span is cut at the
    start of the next one, so the piece completing a character owns it and the earlier
    pieces become zero-width at its start.
    """
    spans: list[Span] = []
    limit = text_length
    for start, end in reversed(offsets):
        end = min(end, limit)
        start = min(start, end)
        spans.append((start, end))
        limit = start
    spans.reverse()
    return spans


def _ends_with_eos(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> bool:
    eos = tokenizer.eos_token_id
    return eos is not None and bool(ids) and ids[-1] == eos

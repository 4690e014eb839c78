"""THL trace path: per-token log-probs of a source tokenization -> the target tokenization.

Word-level mass redistribution (SPEC 4.4). Over one shared text:

- Words are the maximal runs of non-whitespace characters (``str.isspace``); whitespace is
  attached to the following word, and whitespace after the last word to the last word. A
  text without any word is one unit holding everything (``n_words == 0``).
- A token is assigned to the word holding its first non-whitespace character; a
  whitespace-only token to the word its first character belongs to (the following word, or
  the last one at the end); a zero-width token (skipped special token, byte piece before
  the one completing its character, appended EOS) to the word holding the character at its
  position, or the last word at the end of the text.
- A token whose non-whitespace characters lie in several words (a piece across a space,
  words merged by one tokenizer) links those words. Spans are the connected components of
  words linked by any source or target token, i.e. maximal runs of linked words. Whitespace
  inside a token never links (``".\\n"`` does not merge a line's last word with the next).
- For span S, ``Z_S`` is the sum of the source values of the source tokens assigned to S's
  words; each of its ``C_S`` target tokens gets ``Z_S / C_S``. When both tokenizations
  refine the same words, every word keeps exactly its source mass.
- A span with target tokens but no source tokens gives them ``0.0``. A span with source
  tokens but no target tokens (a target tokenizer that drops characters) loses its mass:
  it is reported in ``lost_mass`` and shows up in ``mass_error``; the total target mass is
  ``sum(source_values) - lost_mass`` up to rounding.

Given finite source values, every target value is finite.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from transformers import PreTrainedTokenizerBase

from trainer.thl.spans import Span
from trainer.thl.text import Retokenized, retokenize

WORD = re.compile(r"\S+")
WordRange = tuple[int, int]


@dataclass(frozen=True)
class Alignment:
    """Source values redistributed onto target tokens, with the diagnostics of SPEC 4.4.

    ``residual_span_frac`` is the share of words that had to be merged into multi-word
    spans; ``mass_error`` is ``|sum(source) - sum(target)| / max(n_words, 1)``;
    ``lost_mass`` the summed source values of spans without target tokens.
    """

    target_values: list[float]
    n_words: int
    n_spans: int
    residual_span_frac: float
    mass_error: float
    lost_mass: float

    def metrics(self) -> dict[str, float]:
        """The SPEC's THL metrics for this alignment."""
        return {
            "thl/residual_span_frac": self.residual_span_frac,
            "thl/mass_error": self.mass_error,
        }


def redistribute_logprobs(
    text: str,
    source_spans: Sequence[Span],
    source_values: Sequence[float],
    target_spans: Sequence[Span],
) -> Alignment:
    """Give each target token its span's source mass divided by the span's target count.

    Spans are ``[start, end)`` character ranges in ``text`` (the module docstring has the
    rules). Raises ``ValueError`` for mismatched lengths, spans outside the text or
    non-finite source values.
    """
    _check_spans(text, source_spans)
    _check_spans(text, target_spans)
    if len(source_spans) != len(source_values):
        raise ValueError(f"{len(source_spans)} source spans but {len(source_values)} values")
    _check_finite(source_values)
    index, n_words = word_index(text)
    source_ranges = [word_range(text, index, span) for span in source_spans]
    target_ranges = [word_range(text, index, span) for span in target_spans]
    span_of_word = merge_words(max(n_words, 1), [*source_ranges, *target_ranges])
    n_spans = span_of_word[-1] + 1
    mass = [0.0] * n_spans
    count = [0] * n_spans
    for (first, _), value in zip(source_ranges, source_values, strict=True):
        mass[span_of_word[first]] += value
    for first, _ in target_ranges:
        count[span_of_word[first]] += 1
    target_values = [
        mass[span_of_word[first]] / count[span_of_word[first]] for first, _ in target_ranges
    ]
    return Alignment(
        target_values=target_values,
        n_words=n_words,
        n_spans=n_spans,
        residual_span_frac=_merged_words(span_of_word) / n_words if n_words else 0.0,
        mass_error=mass_error(source_values, target_values, n_words),
        lost_mass=math.fsum(mass[span] for span in range(n_spans) if count[span] == 0),
    )


def align_response_logprobs(
    source_tokenizer: PreTrainedTokenizerBase,
    source_ids: Sequence[int],
    source_logprobs: Sequence[float],
    target_tokenizer: PreTrainedTokenizerBase,
) -> tuple[Retokenized, Alignment]:
    """Text path, then trace path: a peer's behaviour log-probs on the learner's tokens.

    EOS rule: when the source response ends with its EOS, the appended target EOS gets the
    source EOS's log-prob directly and both EOS tokens stay out of the word spans;
    otherwise every source token, zero-width ones included, goes through the trace path.
    """
    if len(source_logprobs) != len(source_ids):
        raise ValueError(f"{len(source_ids)} source ids but {len(source_logprobs)} log-probs")
    values = [float(value) for value in source_logprobs]
    _check_finite(values)
    retokenized = retokenize(source_tokenizer, source_ids, target_tokenizer)
    if not retokenized.ended_with_eos:
        alignment = redistribute_logprobs(
            retokenized.text, retokenized.source_spans, values, retokenized.target_spans
        )
        return retokenized, alignment
    body = redistribute_logprobs(
        retokenized.text,
        retokenized.source_spans[:-1],
        values[:-1],
        retokenized.target_spans[:-1],
    )
    target_values = [*body.target_values, values[-1]]
    error = mass_error(values, target_values, body.n_words)
    return retokenized, replace(body, target_values=target_values, mass_error=error)


def word_index(text: str) -> tuple[list[int], int]:
    """The word of every position ``0..len(text)`` (one past the end too), and the word count.

    Word k's region is its preceding whitespace and itself; the last word also takes the
    whitespace after it and the end position. A text without words maps everything to 0.
    """
    index: list[int] = []
    start = 0
    ends = [match.end() for match in WORD.finditer(text)]
    for word, end in enumerate(ends):
        index += [word] * (end - start)
        start = end
    index += [max(len(ends) - 1, 0)] * (len(text) - start + 1)
    return index, len(ends)


def word_range(text: str, index: Sequence[int], span: Span) -> WordRange:
    """First and last word of a token's non-whitespace characters; the first is its word.

    Whitespace-only and zero-width tokens get the word of their start position.
    """
    start, end = span
    piece = text[start:end]
    stripped = piece.lstrip()
    if not stripped:
        return index[start], index[start]
    last = start + len(piece.rstrip()) - 1
    return index[start + len(piece) - len(stripped)], index[last]


def merge_words(n_units: int, ranges: Sequence[WordRange]) -> list[int]:
    """Span index of every word, spans being the runs of words linked by some range."""
    linked = bytearray(n_units)
    for first, last in ranges:
        linked[first + 1 : last + 1] = b"\x01" * (last - first)
    span_of_word: list[int] = []
    span = -1
    for link in linked:
        span += not link
        span_of_word.append(span)
    return span_of_word


def mass_error(
    source_values: Sequence[float], target_values: Sequence[float], n_words: int
) -> float:
    """``|sum(source) - sum(target)| / max(n_words, 1)`` (exactly rounded sums)."""
    return abs(math.fsum(source_values) - math.fsum(target_values)) / max(n_words, 1)


def _merged_words(span_of_word: Sequence[int]) -> int:
    """How many words share their span with another word."""
    sizes: dict[int, int] = {}
    for span in span_of_word:
        sizes[span] = sizes.get(span, 0) + 1
    return sum(size for size in sizes.values() if size > 1)


def _check_spans(text: str, spans: Sequence[Span]) -> None:
    for start, end in spans:
        if not 0 <= start <= end <= len(text):
            raise ValueError(f"span ({start}, {end}) is not inside a text of {len(text)} chars")


def _check_finite(values: Sequence[float]) -> None:
    if not all(math.isfinite(value) for value in values):
        raise ValueError("source log-probs must be finite")

"""THL text path: a source policy's response ids -> the learner's response ids.

Only the response crosses tokenizers; the prompt never does (each side applies its own chat
template to the raw prompt text, see :func:`trainer.chat.format_prompt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from trainer.thl.spans import Span, token_char_spans


@dataclass(frozen=True)
class Retokenized:
    """A source response re-encoded with the target tokenizer.

    ``text`` is the source response decoded without special tokens (see
    :func:`~trainer.thl.spans.token_char_spans`). ``source_spans`` tile ``text``, one per
    source id (a trailing EOS gets ``(len(text), len(text))``). ``target_spans`` are ordered
    and disjoint (``0 <= start <= end <= next start``, ``end <= len(text)``) but may leave
    gaps (whitespace a WordPiece tokenizer drops); the appended target EOS, if any, gets
    ``(len(text), len(text))``.
    """

    text: str
    target_ids: list[int]
    target_spans: list[Span]
    source_spans: list[Span]
    ended_with_eos: bool


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
    encoding = target_tokenizer(
        text,
        add_special_tokens=False,
        return_offsets_mapping=True,
        split_special_tokens=True,
    )
    target_ids = list(encoding["input_ids"])
    target_spans = disjoint_spans(encoding["offset_mapping"], len(text))
    if ended_with_eos:
        if target_tokenizer.eos_token_id is None:
            raise ValueError("the target tokenizer has no EOS token to end the response with")
        target_ids.append(target_tokenizer.eos_token_id)
        target_spans.append((len(text), len(text)))
        source_spans.append((len(text), len(text)))
    return Retokenized(text, target_ids, target_spans, source_spans, ended_with_eos)


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

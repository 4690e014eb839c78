"""Which tokens of a response hold its answer's digits: where PRP's importance weight
matters most (``prp/is_weight_mean/answer``), apart from the format tokens around them
(``\\boxed{``, ``}``, EOS) that the mean over all peer tokens mixes in.

Pure: a response's token ids and its tokenizer in, token positions out. The characters
come from THL's :func:`~trainer.thl.token_char_spans` (the decoder's own spans, so it
holds for char-level, byte-level BPE and unigram-with-byte-fallback tokenizers alike, and
for ids that are not the canonical encoding of their text).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from trainer.thl import Span, token_char_spans

BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
"""Where a box opens, as the math reward reads one (:mod:`trainer.tasks.rewards`)."""
ANSWER_CHARACTERS = frozenset("0123456789-")
"""What an answer's number is written with: ASCII digits and the minus sign."""


def answer_span(text: str) -> Span | None:
    """``[start, end)`` of the content of the last complete ``\\boxed{...}`` (or
    ``\\fbox{...}``) in ``text``: the answer the math reward reads
    (:func:`trainer.tasks.rewards.extract_boxed`: nested braces count, an unclosed box
    is skipped). None when there is no complete box."""
    last: Span | None = None
    for match in BOX_START.finditer(text):
        depth = 0
        for index in range(match.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                last = (match.end(), index)
                break
    return last


def answer_digit_positions(
    response_ids: Sequence[int], tokenizer: PreTrainedTokenizerBase
) -> list[int]:
    """The positions in ``response_ids`` of the tokens that hold the answer's digits.

    A token holds one when it produces a character inside the last complete box
    (:func:`answer_span`) that is a digit or a minus sign (:data:`ANSWER_CHARACTERS`). A
    token that merges such a character with format characters (a byte-level BPE piece
    like ``{8`` or ``5}``) counts; tokens that produce no character (EOS and other
    special tokens, byte-fallback pieces before the one completing their character) do
    not. No complete box: no position (an unboxed last number is not looked for).
    """
    text, spans = token_char_spans(tokenizer, response_ids)
    box = answer_span(text)
    if box is None:
        return []
    start, end = box
    return [
        position
        for position, (first, last) in enumerate(spans)
        if not ANSWER_CHARACTERS.isdisjoint(text[max(first, start) : min(last, end)])
    ]

"""Tokenizer Heterogeneity Layer (SPEC 4.4): moving responses between policies' tokenizers.

Policies in a pool tokenize differently (byte-level BPE, Unigram with byte fallback,
WordPiece, char level). Experience crosses policies as text plus per-token values:

- :func:`token_char_spans`: the text of any generated id sequence and each id's characters;
- :func:`retokenize` (text path): a source response's ids -> the target tokenizer's ids
  (:func:`encode_text` for a response that crosses as text), with how lossy that was;
- :func:`redistribute_logprobs` (trace path): per-token values moved between two
  tokenizations of one text by word-level mass redistribution;
- :func:`align_response_logprobs`: both paths plus the EOS rule, giving a peer's behaviour
  log-probs (``mu_peer``) on the learner's tokens for PRP (SPEC 4.1).

Only the response crosses tokenizers. The prompt never does: each side applies its own
chat template to the raw prompt text (:func:`trainer.chat.format_prompt`) and the learner
appends the retokenized response ids to its own formatted prompt.

Everything here is pure (no model, no I/O) and needs fast (``tokenizers``-backed)
tokenizers.
"""

from trainer.thl.spans import Span, token_char_spans
from trainer.thl.text import Encoded, Retokenized, encode_text, retokenize
from trainer.thl.trace import Alignment, align_response_logprobs, redistribute_logprobs

__all__ = [
    "Alignment",
    "Encoded",
    "Retokenized",
    "Span",
    "align_response_logprobs",
    "encode_text",
    "redistribute_logprobs",
    "retokenize",
    "token_char_spans",
]

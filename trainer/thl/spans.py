"""Character spans of an arbitrary (generated) token id sequence.

:func:`token_char_spans` returns the text a tokenizer's backend decodes ``ids`` to (special
tokens skipped) and, per id, the ``[start, end)`` characters of that text the id produced.
Generated ids need not be the canonical encoding of their text, so the spans come from the
decoder itself, never from re-encoding.

How: each kept token starts as its own string, tagged with its position in ``ids``, and the
backend's decoder chain (read from its serialized config) is replayed on these tagged
strings, so every output character keeps the position of the token that produced it. The
steps mirror the ``tokenizers`` decoders exactly:

- ``ByteLevel`` (GPT-2 / Qwen / Llama-3): byte symbols -> bytes -> lossy UTF-8; a character
  belongs to the token holding its last byte (the earlier pieces produce nothing), and so
  does the U+FFFD replacing a maximal invalid byte sequence;
- ``Replace`` (string patterns), ``ByteFallback`` (a run of ``<0xNN>`` pieces decodes as
  UTF-8 attributed like byte-level, or, if the run is not valid UTF-8, to one ``U+FFFD`` per
  piece), ``Fuse``, ``Strip`` from the start (Llama-2 / Mistral / Gemma sequences);
- ``Metaspace`` (``▁`` -> space, but dropped from the first string unless prepending is
  off);
- ``WordPiece`` (``##`` continuations glued, a space before every other token but the first,
  the per-token clean-up of ``" ."`` -> ``"."`` and friends);
- ``Sequence`` of the above.

The result is checked against ``backend.decode(ids, skip_special_tokens=True)``; for any
other decoder, or on a mismatch, a slower fallback decodes every prefix (batched backend
calls, O(n^2) work) and ends token i where prefix i stops agreeing with the final text.

Guarantees, for any ids (out-of-vocabulary ids included):

- ``text == tokenizer.backend_tokenizer.decode(ids, skip_special_tokens=True)``, i.e. what
  ``tokenizer.decode(ids, skip_special_tokens=True)`` gives without transformers'
  ``clean_up_tokenization_spaces`` post-pass (the zoo tokenizers have it off);
- the spans tile the text: ``spans[0][0] == 0``, ``spans[i][1] == spans[i + 1][0]``,
  ``spans[-1][1] == len(text)``, so ``"".join(text[s:e] for s, e in spans) == text``;
- tokens that produce no character (skipped special tokens, unknown ids, byte pieces
  before the one completing their character) get a zero-width span at the position of the
  next character; a token's span includes the spaces its decoding adds (``Ġ``/``▁``
  markers, WordPiece's separating space).
"""

from __future__ import annotations

import codecs
import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase

Span = tuple[int, int]
# A decoder's working string, with provenance: (position of the token in ids, its text).
Chunk = tuple[int, str]
Element = list[Chunk]

BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
REPLACEMENT_CHARACTER = "\ufffd"
PREFIX_BATCH = 128
# The token-level clean-up of the WordPiece decoder, in the order ``tokenizers`` applies it.
WORDPIECE_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


class UnsupportedDecoder(Exception):
    """The decoder chain holds a step the replay does not model; the fallback takes over."""


def _byte_level_symbols() -> dict[str, int]:
    """GPT-2's byte -> printable symbol table, inverted (symbol -> byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    symbols = {chr(byte): byte for byte in printable}
    shifted = (byte for byte in range(256) if byte not in printable)
    symbols.update({chr(256 + index): byte for index, byte in enumerate(shifted)})
    return symbols


BYTE_LEVEL_SYMBOLS = _byte_level_symbols()
BYTE_LEVEL_TABLE = str.maketrans({symbol: chr(byte) for symbol, byte in BYTE_LEVEL_SYMBOLS.items()})


def token_char_spans(
    tokenizer: PreTrainedTokenizerBase | Tokenizer, ids: Sequence[int]
) -> tuple[str, list[Span]]:
    """The decoded text of ``ids`` (special tokens skipped) and each id's character span.

    See the module docstring for the exact guarantees. O(n) for the decoders listed there.
    """
    backend = backend_of(tokenizer)
    ids = [int(token_id) for token_id in ids]
    text = backend.decode(ids, skip_special_tokens=True)
    replayed = decoder_spans(backend, ids)
    if replayed is not None and replayed[0] == text:
        return replayed
    return text, prefix_spans(backend, ids, text)


def backend_of(tokenizer: PreTrainedTokenizerBase | Tokenizer) -> Tokenizer:
    """The ``tokenizers.Tokenizer`` behind a fast tokenizer (THL needs one)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not isinstance(backend, Tokenizer):
        raise TypeError(f"THL needs a fast (tokenizers-backed) tokenizer, got {type(tokenizer)}")
    return backend


def decoder_spans(backend: Tokenizer, ids: Sequence[int]) -> tuple[str, list[Span]] | None:
    """Text and spans from replaying the decoder chain; ``None`` if it holds unknown steps."""
    if backend.decoder is None:
        return None
    config = json.loads(backend.decoder.__getstate__())
    special = {
        index for index, token in backend.get_added_tokens_decoder().items() if token.special
    }
    elements: list[Element] = []
    for position, token_id in enumerate(ids):
        token = backend.id_to_token(token_id)
        if token is not None and token_id not in special:
            elements.append([(position, token)])
    try:
        elements = _run_step(config, elements)
    except UnsupportedDecoder:
        return None
    chunks = [chunk for element in elements for chunk in element]
    return "".join(piece for _, piece in chunks), _spans_from_chunks(chunks, len(ids))


def prefix_spans(backend: Tokenizer, ids: Sequence[int], text: str) -> list[Span]:
    """Spans from decoding every prefix: token i ends where prefix i stops agreeing with text.

    The boundaries are made monotone and the last one is ``len(text)``, so the spans tile.
    Prefixes are decoded in batches of :data:`PREFIX_BATCH` to bound memory.
    """
    bounds = [0]
    for first in range(0, len(ids), PREFIX_BATCH):
        ends = range(first + 1, min(first + PREFIX_BATCH, len(ids)) + 1)
        prefixes = backend.decode_batch([list(ids[:end]) for end in ends], skip_special_tokens=True)
        for prefix in prefixes:
            bounds.append(max(bounds[-1], _common_prefix_length(prefix, text)))
    bounds[-1] = len(text)
    return list(itertools.pairwise(bounds))


def _common_prefix_length(first: str, second: str) -> int:
    """Length of the longest common prefix (binary search over C-level slice compares)."""
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _spans_from_chunks(chunks: Sequence[Chunk], n_tokens: int) -> list[Span]:
    """Tiling spans from the decoded chunks, given in text order (owners never go back)."""
    ends = [0] * n_tokens
    position = 0
    for owner, piece in chunks:
        position += len(piece)
        ends[owner] = position
    spans: list[Span] = []
    start = 0
    for end in ends:
        end = max(start, end)
        spans.append((start, end))
        start = end
    return spans


def _run_step(config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """Apply one serialized decoder (possibly a ``Sequence``) to the tagged strings."""
    kind = config.get("type")
    if kind == "Sequence":
        for step in config["decoders"]:
            elements = _run_step(step, elements)
        return elements
    step = STEPS.get(kind)
    if step is None:
        raise UnsupportedDecoder(kind)
    return step(config, elements)


def _text(element: Element) -> str:
    return "".join(piece for _, piece in element)


def _byte_level(_config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """All strings -> bytes (symbol table, or raw UTF-8 for a string outside it) -> lossy UTF-8."""
    pieces: list[tuple[int, bytes]] = []
    for element in elements:
        symbolic = BYTE_LEVEL_SYMBOLS.keys() >= set(_text(element))
        for owner, piece in element:
            raw = (
                piece.translate(BYTE_LEVEL_TABLE).encode("latin-1") if symbolic else piece.encode()
            )
            pieces.append((owner, raw))
    return [_utf8_chunks(pieces)]


def _utf8_chunks(pieces: Sequence[tuple[int, bytes]]) -> Element:
    """Decode the concatenated bytes like Rust's ``String::from_utf8_lossy``.

    Every character, and every U+FFFD standing for a maximal invalid byte sequence, goes to
    the piece holding its last byte.
    """
    data = b"".join(raw for _, raw in pieces)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        owners = [owner for owner, raw in pieces for _ in raw]
        return _lossy_utf8_chunks(data, owners)
    decoder = codecs.getincrementaldecoder("utf-8")()
    return [(owner, decoder.decode(raw)) for owner, raw in pieces]


def _lossy_utf8_chunks(data: bytes, owners: Sequence[int]) -> Element:
    """One chunk per character of invalid UTF-8 ``data``, owned by its last byte's owner."""
    chunks: Element = []
    position = 0
    while position < len(data):
        try:
            valid, bad_end = data[position:].decode("utf-8"), len(data)
        except UnicodeDecodeError as error:
            valid = data[position : position + error.start].decode("utf-8")
            bad_end = position + error.end
        for char in valid:
            position += len(char.encode())
            chunks.append((owners[position - 1], char))
        if position < bad_end:
            chunks.append((owners[bad_end - 1], REPLACEMENT_CHARACTER))
        position = bad_end
    return chunks


def _byte_fallback(_config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """Runs of ``<0xNN>`` strings -> one UTF-8 string, or one U+FFFD per piece if invalid."""
    out: list[Element] = []
    run: list[tuple[int, bytes]] = []
    for element in elements:
        match = BYTE_PIECE.fullmatch(_text(element))
        if match is not None:
            run.append((element[-1][0], bytes([int(match.group(1), 16)])))
        else:
            out.extend(_decode_byte_run(run))
            run = []
            out.append(element)
    out.extend(_decode_byte_run(run))
    return out


def _decode_byte_run(run: Sequence[tuple[int, bytes]]) -> list[Element]:
    """One string for a valid UTF-8 run (characters to their last byte's piece), else U+FFFDs."""
    if not run:
        return []
    try:
        b"".join(raw for _, raw in run).decode("utf-8")
    except UnicodeDecodeError:
        return [[(owner, REPLACEMENT_CHARACTER)] for owner, _ in run]
    return [_utf8_chunks(run)]


def _fuse(_config: dict[str, Any], elements: list[Element]) -> list[Element]:
    return [[chunk for element in elements for chunk in element]]


def _replace(config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """String-pattern replacement inside every string (regex patterns are not modelled)."""
    pattern, content = config["pattern"].get("String"), config["content"]
    if pattern is None:
        raise UnsupportedDecoder("Replace with a regex pattern")
    out: list[Element] = []
    for element in elements:
        replaced = [(owner, piece.replace(pattern, content)) for owner, piece in element]
        if len(element) > 1 and _text(replaced) != _text(element).replace(pattern, content):
            raise UnsupportedDecoder("Replace pattern across tokens")
        out.append(replaced)
    return out


def _strip(config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """Drop up to ``start`` leading ``content`` characters per string.

    Stripping from the end (``stop``) is left to the fallback: no tokenizer of interest
    uses it (and ``tokenizers`` panics on it for an empty string).
    """
    char, start = config["content"], config["start"]
    if config["stop"]:
        raise UnsupportedDecoder("Strip from the end")
    out: list[Element] = []
    for element in elements:
        text = _text(element)
        head = min(start, len(text) - len(text.lstrip(char)))
        out.append(_slice(element, head, len(text)))
    return out


def _slice(element: Element, start: int, end: int) -> Element:
    """Characters ``[start, end)`` of the element's text, each keeping its owner."""
    out: Element = []
    position = 0
    for owner, piece in element:
        lo, hi = max(start - position, 0), min(end - position, len(piece))
        out.append((owner, piece[lo:hi] if lo < hi else ""))
        position += len(piece)
    return out


def _metaspace(config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """``▁`` -> space; in the first string every ``▁`` is dropped unless prepending is off."""
    replacement = config["replacement"]
    drop_first = config.get("prepend_scheme", "always") != "never"
    return [
        [
            (owner, piece.replace(replacement, "" if index == 0 and drop_first else " "))
            for owner, piece in element
        ]
        for index, element in enumerate(elements)
    ]


def _wordpiece(config: dict[str, Any], elements: list[Element]) -> list[Element]:
    """Glue ``##`` continuations, put a space before other tokens but the first, clean up."""
    prefix, cleanup = config["prefix"], config["cleanup"]
    out: list[Element] = []
    for index, element in enumerate(elements):
        text = _text(element)
        if index and text.startswith(prefix):
            element = _slice(element, len(prefix), len(text))
        elif index:
            owner, piece = element[0]
            element = [(owner, " " + piece), *element[1:]]
        if cleanup:
            element = _cleaned(element)
        out.append(element)
    return out


def _cleaned(element: Element) -> Element:
    """WordPiece's clean-up, modelled on a single token's string only."""
    if len(element) != 1:
        raise UnsupportedDecoder("WordPiece clean-up of joined tokens")
    owner, piece = element[0]
    return [(owner, _cleanup(piece))]


def _cleanup(text: str) -> str:
    if " " not in text:  # every pattern starts with a space
        return text
    for dirty, clean in WORDPIECE_CLEANUP:
        text = text.replace(dirty, clean)
    return text


STEPS: dict[str, Callable[[dict[str, Any], list[Element]], list[Element]]] = {
    "ByteFallback": _byte_fallback,
    "ByteLevel": _byte_level,
    "Fuse": _fuse,
    "Metaspace": _metaspace,
    "Replace": _replace,
    "Strip": _strip,
    "WordPiece": _wordpiece,
}

"""Tokenizers the project trains itself, one per family of real-world vocabularies.

Every tokenizer is trained locally with the ``tokenizers`` library on a corpus generated
from a seed (:func:`build_corpus`), then wrapped as a ``transformers`` fast tokenizer with
the same special tokens (``<s>``, ``</s>``, ``<pad>``, ``<unk>``) and a chat template, so
``save_pretrained`` / ``AutoTokenizer.from_pretrained`` round-trip it offline. The kinds
cover what the Tokenizer Heterogeneity Layer must bridge (SPEC section 4.4):

- byte-level BPE (GPT-2 / Qwen style, ``Ġ`` space marker, all 256 bytes in the alphabet);
- Unigram with byte fallback (SentencePiece / Llama-2 style, ``▁`` word marker,
  ``<0x00>``..``<0xFF>`` byte pieces);
- char level (one token per character);
- WordPiece (BERT style, ``##`` continuation), used by the THL tests only.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from trainer.tasks.arithmetic import ADDITIVE_LEVELS, boxed, make_expression, prompt_for

BOS, EOS, PAD, UNK = "<s>", "</s>", "<pad>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
BYTE_TOKENS = tuple(f"<0x{value:02X}>" for value in range(256))
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

# Qwen2's pre-tokenizer split: letters, single digits, punctuation runs, whitespace.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class ChatStyle:
    """A family's chat template and the literal text it wraps a single user turn in.

    ``template`` is the Jinja string stored on the tokenizer; ``prefix``/``suffix`` are
    what it renders around one user message with ``add_generation_prompt=True`` (the
    corpus uses them, and a test checks both agree).
    """

    name: str
    template: str
    prefix: str
    suffix: str
    extra_special_tokens: tuple[str, ...] = ()

    def render(self, user_text: str) -> str:
        """The prompt string the template produces for one user turn."""
        return f"{self.prefix}{user_text}{self.suffix}"


LLAMA_CHAT = ChatStyle(
    name="llama",
    template=(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}"
        " {{ m['content'] }}{{ eos_token }}"
        "{% else %}[INST] {{ m['content'] }} [/INST]{% endif %}{% endfor %}"
    ),
    prefix="[INST] ",
    suffix=" [/INST]",
)
QWEN_CHAT = ChatStyle(
    name="qwen",
    template=(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    prefix=f"{IM_START}user\n",
    suffix=f"{IM_END}\n{IM_START}assistant\n",
    extra_special_tokens=(IM_START, IM_END),
)
GPT2_CHAT = ChatStyle(
    name="gpt2",
    template=(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}"
        "A: {{ m['content'] }}{{ eos_token }}\n"
        "{% else %}Q: {{ m['content'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}A:{% endif %}"
    ),
    prefix="Q: ",
    suffix="\nA:",
)
CHAT_STYLES = {style.name: style for style in (LLAMA_CHAT, QWEN_CHAT, GPT2_CHAT)}

ENGLISH_LINES = (
    "The quick brown fox jumps over the lazy dog.",
    "Reinforcement learning improves a policy from its own rewards.",
    "Several language models train at the same time and share experience.",
    "Each policy samples a group of responses for every prompt.",
    "A verified answer earns a reward of one; a wrong answer earns zero.",
    "The advantage is the reward minus the group mean, divided by the spread.",
    "Peers publish their rollouts to a shared exchange every step.",
    "Compute the sum first, then write the final answer in a box.",
    "Let me check the result again before I answer.",
    "Wait, the carry goes to the tens digit.",
    "Why does the smaller model fail on longer problems?",
    "Double-check the subtraction: the larger number comes first.",
    "We compare sharing regimes across seeds and report the mean.",
    "Tokens are pieces of text; words may split into several tokens.",
    "The answer is forty-two, which is six times seven.",
    "She sells sea shells by the sea shore.",
    "Numbers like 3, 14, 159 and 2653 appear in text too.",
    "Good models learn quickly; tiny models learn slowly.",
    "Please verify the final answer and explain the root cause.",
    "It was the best of times, it was the worst of times.",
    "Questions, answers, and rewards flow through the trainer.",
    "A researcher launches a sweep of runs from the browser.",
    "Every metric is written to a spool before it is shipped.",
    "The learning rate controls how far each update moves.",
    "Sampling at temperature one explores; greedy decoding exploits.",
    "Hello, world! How are you today?",
    "Add the ones, carry the ten, then add the tens.",
    "The validation set is held out and never used for training.",
    "Subtract nineteen from eighty-five to get sixty-six.",
    "Large and small policies fail on different prompts.",
)
NON_ASCII_LINES = (
    "Café, naïve, façade, über, señor, déjà vu.",
    "Ångström and Øresund are spelled with accents.",
    "数学很有趣。一加一等于二。",
    "こんにちは、世界!",
    "Привет, мир! Сложение и вычитание.",
    "Emoji: 🙂 🚀 ✅ 🎉 and 3+4=7 ✔",
    "Ελληνικά μαθηματικά.",
)


def build_corpus(seed: int, problems_per_level: int = 120) -> list[str]:
    """The deterministic training text of every zoo tokenizer.

    Arithmetic problems of every additive level (prompt, each chat style's rendering, and
    the boxed completion), plus English and non-ASCII lines so that merges look like real
    text.
    Multiplication (level 6, ``47*3``) is not in it, so the normal zoo's tokenizers stayed
    as they were when it was added; every kind still encodes ``*`` (char level holds all
    printable ASCII, byte-level BPE and byte fallback every byte).
    """
    rng = random.Random(f"zoo-corpus-{seed}")
    lines: list[str] = []
    for level in ADDITIVE_LEVELS:
        for _ in range(problems_per_level):
            expression, value = make_expression(rng, level)
            style = rng.choice(tuple(CHAT_STYLES.values()))
            lines.append(style.render(prompt_for(expression)) + " " + boxed(value))
            lines.append(f"{prompt_for(expression)} The answer is {boxed(value)}.")
    lines.extend(ENGLISH_LINES)
    lines.extend(NON_ASCII_LINES)
    return lines


def train_byte_bpe(
    corpus: Iterable[str], vocab_size: int = 400, *, nfc: bool = False
) -> PreTrainedTokenizerFast:
    """A GPT-2 / Qwen style byte-level BPE: any unicode text round-trips exactly.

    Digits are split one by one as Qwen2 does; the 256 byte symbols are always in the
    alphabet, so nothing is ever unknown. ``nfc`` adds Qwen2's NFC normalizer (then text
    round-trips exactly once NFC-normalized): ``transformers`` imposes it whenever it loads
    a tokenizer saved beside a Qwen2 model, so the zoo's Qwen policy is trained with it.
    """
    tokenizer = Tokenizer(models.BPE())
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return _wrap(tokenizer)


def train_unigram_byte_fallback(
    corpus: Iterable[str], vocab_size: int = 512
) -> PreTrainedTokenizerFast:
    """A SentencePiece / Llama-2 style Unigram with byte fallback.

    Words carry the ``▁`` marker and digits are split one by one (Llama-2's
    ``split_digits``); a character missing from the vocabulary is spelled with the byte
    pieces ``<0x00>``..``<0xFF>``, and the Llama-2 decoder (``▁`` -> space, bytes fused
    back into UTF-8, one leading space stripped) restores the text exactly. The 256 byte
    pieces count towards ``vocab_size``.
    """
    if vocab_size <= len(BYTE_TOKENS) + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must exceed the {len(BYTE_TOKENS)} byte pieces; got {vocab_size}"
        )
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size - len(BYTE_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        unk_token=UNK,
        max_piece_length=8,
        show_progress=False,
    )
    draft = Tokenizer(models.Unigram())
    draft.pre_tokenizer = _sentencepiece_split()
    draft.train_from_iterator(corpus, trainer=trainer)
    pieces = _canonical_pieces(json.loads(draft.to_str())["model"]["vocab"])
    floor = min(score for _, score in pieces) - 1.0
    known = {piece for piece, _ in pieces}
    pieces += [(byte, floor) for byte in BYTE_TOKENS if byte not in known]
    vocab = [piece for piece, _ in pieces]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=vocab.index(UNK), byte_fallback=True))
    tokenizer.pre_tokenizer = _sentencepiece_split()
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tokenizer)


def train_char_level(corpus: Iterable[str]) -> PreTrainedTokenizerFast:
    """One token per character: the corpus's characters plus printable ASCII.

    Any other character becomes ``<unk>``.
    """
    characters = set(string.printable)
    for line in corpus:
        characters.update(line)
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for character in sorted(characters):
        vocab.setdefault(character, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tokenizer)


def train_wordpiece(corpus: Iterable[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A BERT style WordPiece: words split on whitespace and punctuation, ``##`` pieces.

    The trainer numbers ``##`` pieces in hash order and breaks merge ties by number, so the
    continuation alphabet is registered up front (sorted) to make training reproducible;
    the final tokenizer is rebuilt from the vocabulary with only the real special tokens.
    """
    corpus = list(corpus)
    characters = sorted({character for line in corpus for character in line})
    continuations = [f"##{character}" for character in characters if not character.isspace()]
    draft = Tokenizer(models.WordPiece(unk_token=UNK))
    draft.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *continuations],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    draft.train_from_iterator(corpus, trainer=trainer)
    vocab = draft.get_vocab(with_added_tokens=True)
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="##"))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return _wrap(tokenizer)


def with_chat_style(tokenizer: PreTrainedTokenizerFast, style: ChatStyle) -> None:
    """Give ``tokenizer`` the chat template (and template-only special tokens) of ``style``."""
    if style.extra_special_tokens:
        tokenizer.add_special_tokens(
            {"additional_special_tokens": list(style.extra_special_tokens)}
        )
    tokenizer.chat_template = style.template


def _wrap(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """The ``transformers`` fast tokenizer around a trained ``tokenizers`` one."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def _sentencepiece_split() -> pre_tokenizers.PreTokenizer:
    """Llama-2's SentencePiece split: ``▁``-marked words, every digit on its own."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )


def _canonical_pieces(trained: Sequence[Sequence[Any]]) -> list[tuple[str, float]]:
    """Trained Unigram pieces in a reproducible order and scoring, special tokens first.

    The trainer sums in hash order (scores differ in the last bits, ties come out in any
    order) and appends the characters it keeps only for coverage in hash order, below every
    learned piece. Rounding, sorting, and re-scoring that tail in character order makes the
    ids and the segmentation the same in every process.
    """
    scored = [(str(piece), float(score)) for piece, score in trained]
    special = [item for item in scored if item[0] in SPECIAL_TOKENS]
    learned = [item for item in scored if item[0] not in SPECIAL_TOKENS]
    floor = min((score for piece, score in learned if len(piece) > 1), default=0.0)
    kept = sorted(
        ((piece, round(score, 6)) for piece, score in learned if len(piece) > 1 or score >= floor),
        key=_by_score,
    )
    tail = sorted(piece for piece, score in learned if len(piece) == 1 and score < floor)
    start = round(floor, 6) - 1.0
    return special + kept + [(piece, start - 1e-4 * index) for index, piece in enumerate(tail)]


def _by_score(item: tuple[str, float]) -> tuple[float, str]:
    return (-item[1], item[0])

"""Verifiable rewards: plain callables ``(prompts, completions, answers) -> list[float]``.

Two rewards, both 1.0 for a correct completion and 0.0 otherwise:

* ``math``: the final answer of a completion (its last ``\\boxed{...}``, else its last
  number) against the reference answer. Fast paths settle the common cases without
  sympy (equal after light normalisation -> 1.0; two different integers -> 0.0; nothing
  extracted -> 0.0); everything else goes to ``math-verify``, with exact match as the
  fallback when math-verify is missing or fails.
* ``multiple_choice``: the chosen letter (``B``, ``(B)``, ``B.``, ``Answer: B``,
  ``\\boxed{B}``, ``the answer is B``) against the reference letter.

What counts (the task's ``finished_only`` and ``strict_format``, :class:`Scoring`):

* ``strict_format``: the answer must be in a closed ``\\boxed{...}``; no fallback to the
  last number (math) or to a letter stated without a box (multiple choice):
  ``get_reward(name, strict_format=True)``;
* ``finished_only``: only a finished response counts (:func:`counts_as_finished`: it
  stopped with EOS, or it holds a closed box); one cut off at ``max_new_tokens`` without
  a box scores 0, so "Computing 1 (1 + 1) is a classic reminder that some" (cut off) is
  not a correct answer 1.

:func:`score_reason` says in words why a response counted or not ("\\boxed{85} = 85;
ended with EOS", "last number 1 = 1 (no box); cut off at max_new_tokens"): the transfer
events' samples carry it.

Threads: math-verify's own timeouts use ``signal.alarm``, which only works in the main
thread (and would cancel other SIGALRM users such as pytest-timeout), and cannot
interrupt a long big-integer operation anyway. So math-verify is called with its
timeouts disabled (``parsing_timeout=None``, ``timeout_seconds=None``), which works from
any thread; instead, answers that could make sympy run away (long strings, power towers,
huge factorials) are refused up front by :func:`_too_costly` and scored by exact match.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

RewardFn = Callable[[Sequence[str], Sequence[str], Sequence[str]], list[float]]
"""``(prompts, completions, answers) -> list[float]``, one reward per completion."""

logger = logging.getLogger(__name__)

MAX_VERIFY_CHARS = 200
"""Answers longer than this are compared by exact match only (never sent to sympy)."""

MAX_NUMBER_DIGITS = 10_000
"""Expressions whose value may exceed ``10**MAX_NUMBER_DIGITS`` are not sent to sympy."""

MAX_SYMBOLIC_EXPONENT = 64
"""``(x + 1)**n`` with a symbolic base and ``n`` above this is not sent to sympy."""

# --- extraction ---------------------------------------------------------------------------
_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_NUMBER = re.compile(
    r"(?<![\w.])(?:(?<![\d)\]}])-)?"  # a sign only when it is not a binary minus
    r"(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?"  # 1,234 or 1234, optional decimals
    r"|(?<![\w.])-?\.\d+"  # .5
)


def _braced(text: str, open_index: int) -> str | None:
    """The content of the brace group opening at ``text[open_index]``; None if unclosed."""
    depth = 0
    for index in range(open_index, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Nested braces are handled (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``); an unclosed
    box (a truncated completion) is skipped. None when there is no complete box.
    """
    last: str | None = None
    for match in _BOX_START.finditer(text):
        content = _braced(text, match.end() - 1)
        if content is not None:
            last = content
    return last


def extract_last_number(text: str) -> str | None:
    """The last number in ``text`` with thousands separators removed (``"1,234"`` -> 1234)."""
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def extract_final_answer(text: str, *, strict_format: bool = False) -> str | None:
    """The final answer of a completion: its last box if any, else (unless
    ``strict_format``) its last number.

    A completion that opens a box but never closes one (cut off mid-answer) has none.
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if strict_format or _BOX_START.search(text):
        return None
    return extract_last_number(text)


# --- normalisation ------------------------------------------------------------------------
_LATEX_SPACES = re.compile(r"\\[,;:! ]|\\quad|\\qquad")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[-+]?\.\d+")
_INTEGER = re.compile(r"-?\d+")
_SPACES = re.compile(r"(?<!\d)\s+|\s+(?!\d)")  # all but a space between two digits


def _clean(answer: str) -> str:
    """Strip math delimiters, surrounding space, a trailing full stop and a leading ``+``."""
    text = answer.replace("\\$", "").replace("$", "").strip()
    text = text.removesuffix(".").strip()
    if text.startswith("+"):
        text = text[1:].lstrip()
    return text


def _canonical_number(text: str) -> str | None:
    """``"1,000"`` -> ``"1000"``, ``"3.0"`` -> ``"3"``, ``"-0.50"`` -> ``"-0.5"``; else None."""
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        value = Decimal(text.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the pattern only admits valid numbers
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def normalize_answer(answer: str) -> str:
    """The light normalisation under which two answers count as equal without sympy."""
    text = _LATEX_SPACES.sub("", _clean(answer))
    text = _SPACES.sub("", text).replace("{,}", ",")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _canonical_number(text) or text


def _reference(answer: str) -> str:
    """The gold answer itself, unwrapped if it was written as ``\\boxed{...}``."""
    boxed = extract_boxed(answer)
    return boxed.strip() if boxed is not None else answer.strip()


# --- math-verify --------------------------------------------------------------------------
class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its timeout is off; here that is deliberate."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


@lru_cache(maxsize=1)
def _math_verify() -> Any | None:
    """The ``math_verify`` module, or None when it is not installed."""
    try:
        import math_verify
    except ImportError:  # pragma: no cover - math-verify is a declared dependency
        logger.warning("math-verify is not installed; the math reward uses exact match only")
        return None
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_DropTimeoutDisabledWarning())
    return math_verify


@lru_cache(maxsize=8192)
def _parse(answer: str) -> tuple[Any, ...]:
    """math-verify's parse of ``$answer$`` (no alarm-based timeout: thread safe)."""
    module = _math_verify()
    if module is None:
        return ()
    return tuple(module.parse(f"${answer}$", parsing_timeout=None))


@lru_cache(maxsize=16384)
def _verify(gold: str, predicted: str) -> bool:
    """Whether math-verify finds ``predicted`` equivalent to ``gold`` (False on any error)."""
    module = _math_verify()
    if module is None or _too_costly_text(gold) or _too_costly_text(predicted):
        return False
    try:
        gold_parsed, predicted_parsed = _parse(gold), _parse(predicted)
        if not gold_parsed or not predicted_parsed:
            return False
        if _too_costly(gold_parsed) or _too_costly(predicted_parsed):
            return False
        return bool(module.verify(list(gold_parsed), list(predicted_parsed), timeout_seconds=None))
    except Exception:  # math-verify or sympy failing on odd input means "not verified"
        logger.debug("math-verify failed on %r vs %r", predicted, gold, exc_info=True)
        return False


def _too_costly_text(answer: str) -> bool:
    return len(answer) > MAX_VERIFY_CHARS


def _too_costly(parsed: Iterable[Any]) -> bool:
    """Whether comparing any of these parsed expressions could make sympy run away."""
    return any(_digits(item) == math.inf for item in parsed if not isinstance(item, str))


_FACTORIALS = {"factorial", "factorial2", "subfactorial", "binomial", "gamma", "RisingFactorial"}
_FACTORIALS |= {"FallingFactorial", "fibonacci", "lucas", "primorial"}
_UNBOUNDED = {"Sum", "Product", "Integral", "Limit", "Derivative"}


def _digits(expr: Any) -> float:
    """An upper bound of ``log10(2 + |value|)`` of ``expr`` (symbols count as small).

    ``math.inf`` when evaluating or simplifying the expression could take very long: a
    value above ``10**MAX_NUMBER_DIGITS``, a big symbolic power, or a sum/product/integral.
    """
    kind = type(expr).__name__
    if kind in _UNBOUNDED:
        return math.inf
    if getattr(expr, "is_Rational", False):
        return math.log10(2 + max(abs(int(expr.p)), abs(int(expr.q))))
    if getattr(expr, "is_Pow", False):
        return _power_digits(expr)
    children = _children(expr)
    if kind in _FACTORIALS:
        bound = max((_digits(child) for child in children), default=1.0)
        return _bounded(10**bound * bound if bound < 8 else math.inf)
    if not children:
        return 1.0
    sizes = [_digits(child) for child in children]
    return _bounded(sum(sizes) if getattr(expr, "is_Mul", False) else max(sizes) + 1)


def _power_digits(expr: Any) -> float:
    base, exponent = _digits(expr.base), _digits(expr.exp)
    if exponent >= 8:
        return math.inf
    if getattr(expr.base, "free_symbols", None) and 10**exponent > MAX_SYMBOLIC_EXPONENT:
        return math.inf
    return _bounded(base * 10**exponent)


def _children(expr: Any) -> tuple[Any, ...]:
    if hasattr(expr, "args"):
        return tuple(expr.args)
    if hasattr(expr, "tolist"):  # a mutable sympy Matrix, which is not a Basic
        return tuple(item for row in expr.tolist() for item in row)
    return ()


def _bounded(digits: float) -> float:
    return math.inf if digits > MAX_NUMBER_DIGITS else digits


# --- rewards ------------------------------------------------------------------------------
def _check_lengths(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]):
    if not len(prompts) == len(completions) == len(answers):
        raise ValueError(
            "a reward needs one prompt and one answer per completion; got "
            f"{len(prompts)} prompts, {len(completions)} completions, {len(answers)} answers"
        )


def _clearly_different_numbers(gold: str, predicted: str) -> bool:
    """Two plain numbers (canonical form) too far apart for math-verify's rounding."""
    if _INTEGER.fullmatch(gold) and _INTEGER.fullmatch(predicted):
        return True  # both canonical integers, and not equal
    if _canonical_number(gold) is None or _canonical_number(predicted) is None:
        return False
    a, b = Decimal(gold), Decimal(predicted)
    return abs(a - b) > Decimal("1e-4") * max(Decimal(1), abs(a))


def math_score(completion: str, answer: str, *, strict_format: bool = False) -> float:
    """1.0 when the final answer of ``completion`` is equivalent to ``answer``, else 0.0
    (``strict_format``: only a boxed answer is read, :func:`extract_final_answer`)."""
    extracted = extract_final_answer(completion, strict_format=strict_format)
    if extracted is None:
        return 0.0
    predicted, gold = normalize_answer(extracted), normalize_answer(_reference(answer))
    if not predicted:
        return 0.0
    if predicted == gold:
        return 1.0
    if _clearly_different_numbers(gold, predicted):
        return 0.0
    verify_gold = gold if _canonical_number(gold) else _clean(_reference(answer))
    verify_predicted = predicted if _canonical_number(predicted) else _clean(extracted)
    return 1.0 if _verify(verify_gold, verify_predicted) else 0.0


def math_reward(
    prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]
) -> list[float]:
    """The math reward of each completion against its reference answer (prompts unused)."""
    _check_lengths(prompts, completions, answers)
    return [
        math_score(completion, answer)
        for completion, answer in zip(completions, answers, strict=True)
    ]


def strict_math_reward(
    prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]
) -> list[float]:
    """:func:`math_reward` reading boxed answers only (``strict_format``)."""
    _check_lengths(prompts, completions, answers)
    return [
        math_score(completion, answer, strict_format=True)
        for completion, answer in zip(completions, answers, strict=True)
    ]


# Explicit statements of a choice; the last one wins over any bare mention.
_STATED_CHOICE = re.compile(
    r"\\(?:boxed|fbox)\s*\{\s*(?:\\text(?:bf)?\s*\{\s*)?\(?(?P<boxed>[A-Za-z])\)?\.?\s*\}?\s*\}"
    r"|(?i:answer)\s*(?:(?i:is)\s*:?|:)\s*(?:(?i:option|choice)\s*)?"
    r"\(?(?P<stated>[A-Za-z])(?!\w)(?=(?P<rest>[^\n]*))"
)
# Bare mentions: "(B)" anywhere, or "B" / "B." / "B)" / "B:" opening a line.
_BARE_CHOICE = re.compile(r"\((?P<paren>[A-Z])\)|(?m:^[^\S\n]*(?P<line>[A-Z])(?:[.):]|[^\S\n]*$))")
_LINE_END = re.compile(r"[\s.)!]*")


def extract_choice(text: str, *, strict_format: bool = False) -> str | None:
    """The letter a completion chooses, upper case; None when it names none
    (``strict_format``: only a boxed letter, :func:`extract_boxed_choice`, counts).

    An explicit statement (``\\boxed{B}``, ``Answer: B``, ``the answer is b``) wins over
    a bare mention (``(B)``, or ``B`` / ``B.`` opening a line); among those of the same
    kind, the last one wins. A lowercase letter only counts in a box, or after "answer
    is" / "answer:" at the end of its line, so the article in "the answer is a dog" is
    not choice A.
    """
    if strict_format:
        return extract_boxed_choice(text)
    stated: str | None = None
    for match in _STATED_CHOICE.finditer(text):
        letter = match.group("boxed") or _stated_letter(match)
        if letter:
            stated = letter.upper()
    if stated is not None:
        return stated
    bare = [m.group("paren") or m.group("line") for m in _BARE_CHOICE.finditer(text)]
    return bare[-1] if bare else None


def extract_boxed_choice(text: str) -> str | None:
    """The letter of the last ``\\boxed{B}`` (``\\boxed{(b)}``, ``\\boxed{\\text{B}}``)
    in ``text``, upper case; None when no box holds a letter."""
    boxed = [m.group("boxed") for m in _STATED_CHOICE.finditer(text) if m.group("boxed")]
    return boxed[-1].upper() if boxed else None


def _stated_letter(match: re.Match[str]) -> str | None:
    """The letter after "answer is"; a lowercase one only when its line ends there."""
    letter = match.group("stated")
    if letter is None:
        return None
    if letter.isupper() or _LINE_END.fullmatch(match.group("rest")):
        return letter
    return None


def _answer_letter(answer: str) -> str:
    return answer.strip().strip("().").strip().upper()


def multiple_choice_reward(
    prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]
) -> list[float]:
    """1.0 when the completion chooses the reference letter, else 0.0 (prompts unused)."""
    _check_lengths(prompts, completions, answers)
    return [
        1.0 if extract_choice(completion) == _answer_letter(answer) else 0.0
        for completion, answer in zip(completions, answers, strict=True)
    ]


def strict_multiple_choice_reward(
    prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]
) -> list[float]:
    """:func:`multiple_choice_reward` reading boxed letters only (``strict_format``)."""
    _check_lengths(prompts, completions, answers)
    return [
        1.0 if extract_boxed_choice(completion) == _answer_letter(answer) else 0.0
        for completion, answer in zip(completions, answers, strict=True)
    ]


REWARDS: dict[str, RewardFn] = {
    "math": math_reward,
    "multiple_choice": multiple_choice_reward,
}
STRICT_REWARDS: dict[str, RewardFn] = {
    "math": strict_math_reward,
    "multiple_choice": strict_multiple_choice_reward,
}
"""The same rewards under ``strict_format``: the answer must be in a closed box."""


def get_reward(name: str, *, strict_format: bool = False) -> RewardFn:
    """The reward registered as ``name`` (its :data:`STRICT_REWARDS` variant with
    ``strict_format``); a ``KeyError`` lists the known names."""
    try:
        return (STRICT_REWARDS if strict_format else REWARDS)[name]
    except KeyError:
        raise KeyError(
            f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}"
        ) from None


# --- what counts --------------------------------------------------------------------------
ENDED_WITH_EOS = "ended with EOS"
CUT_OFF = "cut off at max_new_tokens"


def counts_as_finished(text: str, ended_with_eos: bool) -> bool:
    """Whether a response is a finished answer: it stopped with EOS, or it holds a closed
    ``\\boxed{...}`` (a boxed answer is final even when the text then ran on to
    ``max_new_tokens``). Under ``finished_only`` any other response scores 0."""
    return ended_with_eos or extract_boxed(text) is not None


def keep_finished(
    rewards: Sequence[float], completions: Sequence[str], finished: Sequence[bool]
) -> list[float]:
    """``rewards`` with those of unfinished responses (:func:`counts_as_finished`) set to 0."""
    if not len(rewards) == len(completions) == len(finished):
        raise ValueError(
            f"one reward and one finished flag per completion; got {len(rewards)} rewards, "
            f"{len(completions)} completions, {len(finished)} flags"
        )
    return [
        float(reward) if counts_as_finished(text, ended) else 0.0
        for reward, text, ended in zip(rewards, completions, finished, strict=True)
    ]


def read_answer(
    reward: str, completion: str, *, strict_format: bool = False
) -> tuple[str, bool] | None:
    """What reward ``reward`` reads as the final answer of ``completion``, as a person
    would write it, and whether it was boxed: ``("\\boxed{85}", True)``, ``("last number
    1", False)``, ``("choice B", False)``; None when it reads none."""
    if reward == "multiple_choice":
        letter = extract_choice(completion, strict_format=strict_format)
        if letter is None:
            return None
        if extract_boxed_choice(completion) == letter:
            return f"\\boxed{{{letter}}}", True
        return f"choice {letter}", False
    boxed_text = extract_boxed(completion)
    if boxed_text is not None:
        return f"\\boxed{{{boxed_text.strip()}}}", True
    extracted = extract_final_answer(completion, strict_format=strict_format)
    return None if extracted is None else (f"last number {extracted}", False)


def reference_text(reward: str, answer: str) -> str:
    """The reference answer as reward ``reward`` compares with it (a letter, or the math
    answer unwrapped from its box)."""
    return _answer_letter(answer) if reward == "multiple_choice" else _reference(answer)


@dataclass(frozen=True)
class Scoring:
    """What counts as a correct response: the task's reward and its format options
    (``task.finished_only`` resolved to a bool, ``task.strict_format``)."""

    reward: str = "math"
    finished_only: bool = False
    strict_format: bool = False

    def reward_fn(self) -> RewardFn:
        """The reward callable (its strict variant under ``strict_format``)."""
        return get_reward(self.reward, strict_format=self.strict_format)

    def rewards(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        answers: Sequence[str],
        finished: Sequence[bool],
    ) -> list[float]:
        """The reward of each response; under ``finished_only`` 0 for an unfinished one."""
        rewards = self.reward_fn()(prompts, completions, answers)
        return keep_finished(rewards, completions, finished) if self.finished_only else rewards

    def reason(self, completion: str, answer: str, ended_with_eos: bool, reward: float) -> str:
        """Why a response with this ``reward`` counted or not (:func:`score_reason`)."""
        return score_reason(
            self.reward,
            completion,
            answer,
            ended_with_eos,
            reward,
            finished_only=self.finished_only,
            strict_format=self.strict_format,
        )


def score_reason(
    reward: str,
    completion: str,
    answer: str,
    ended_with_eos: bool,
    score: float,
    *,
    finished_only: bool = False,
    strict_format: bool = False,
) -> str:
    """Why ``completion`` scored ``score``, in words: what was read against the reference,
    then how the response ended. ``"\\boxed{85} = 85; ended with EOS"``, ``"last number
    1 = 1 (no box); cut off at max_new_tokens"``, ``"\\boxed{84} ≠ 85; ended with EOS"``,
    and, under ``finished_only``, ``"unfinished: cut off at max_new_tokens with no closed
    \\boxed{} (finished_only scores it 0)"``."""
    ending = ENDED_WITH_EOS if ended_with_eos else CUT_OFF
    if finished_only and not counts_as_finished(completion, ended_with_eos):
        return f"unfinished: {CUT_OFF} with no closed \\boxed{{}} (finished_only scores it 0)"
    reading = read_answer(reward, completion, strict_format=strict_format)
    if reading is None:
        missing = "no closed \\boxed{} (strict_format)" if strict_format else "no answer found"
        return f"{missing}; {ending}"
    what, boxed = reading
    relation = "=" if score > 0 else "≠"
    unboxed = "" if boxed else " (no box)"
    return f"{what} {relation} {reference_text(reward, answer)}{unboxed}; {ending}"

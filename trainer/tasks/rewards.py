"""Verifiable rewards: plain callables ``(prompts, completions, answers) -> list[float]``.

Two rewards, both 1.0 for a correct completion and 0.0 otherwise:

* ``math``: the final answer of a completion (its last ``\\boxed{...}``, else its last
  number) against the reference answer. Fast paths settle the common cases without
  sympy (equal after light normalisation -> 1.0; two different integers -> 0.0; nothing
  extracted -> 0.0); everything else goes to ``math-verify``, with exact match as the
  fallback when math-verify is missing or fails.
* ``multiple_choice``: the chosen letter (``B``, ``(B)``, ``B.``, ``Answer: B``,
  ``\\boxed{B}``, ``the answer is B``) against the reference letter.

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


def extract_final_answer(text: str) -> str | None:
    """The final answer of a completion: its last box if any, else its last number.

    A completion that opens a box but never closes one (cut off mid-answer) has none.
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if _BOX_START.search(text):
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


def math_score(completion: str, answer: str) -> float:
    """1.0 when the final answer of ``completion`` is equivalent to ``answer``, else 0.0."""
    extracted = extract_final_answer(completion)
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


# Explicit statements of a choice; the last one wins over any bare mention.
_STATED_CHOICE = re.compile(
    r"\\(?:boxed|fbox)\s*\{\s*(?:\\text(?:bf)?\s*\{\s*)?\(?(?P<boxed>[A-Za-z])\)?\.?\s*\}?\s*\}"
    r"|(?i:answer)\s*(?:(?i:is)\s*:?|:)\s*(?:(?i:option|choice)\s*)?"
    r"\(?(?P<stated>[A-Za-z])(?!\w)(?=(?P<rest>[^\n]*))"
)
# Bare mentions: "(B)" anywhere, or "B" / "B." / "B)" / "B:" opening a line.
_BARE_CHOICE = re.compile(r"\((?P<paren>[A-Z])\)|(?m:^[^\S\n]*(?P<line>[A-Z])(?:[.):]|[^\S\n]*$))")
_LINE_END = re.compile(r"[\s.)!]*")


def extract_choice(text: str) -> str | None:
    """The letter a completion chooses, upper case; None when it names none.

    An explicit statement (``\\boxed{B}``, ``Answer: B``, ``the answer is b``) wins over
    a bare mention (``(B)``, or ``B`` / ``B.`` opening a line); among those of the same
    kind, the last one wins. A lowercase letter only counts in a box, or after "answer
    is" / "answer:" at the end of its line, so the article in "the answer is a dog" is
    not choice A.
    """
    stated: str | None = None
    for match in _STATED_CHOICE.finditer(text):
        letter = match.group("boxed") or _stated_letter(match)
        if letter:
            stated = letter.upper()
    if stated is not None:
        return stated
    bare = [m.group("paren") or m.group("line") for m in _BARE_CHOICE.finditer(text)]
    return bare[-1] if bare else None


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


REWARDS: dict[str, RewardFn] = {
    "math": math_reward,
    "multiple_choice": multiple_choice_reward,
}


def get_reward(name: str) -> RewardFn:
    """The reward registered as ``name``; a ``KeyError`` lists the known names."""
    try:
        return REWARDS[name]
    except KeyError:
        raise KeyError(
            f"unknown reward {name!r}; known rewards: {', '.join(sorted(REWARDS))}"
        ) from None

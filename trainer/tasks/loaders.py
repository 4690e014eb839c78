"""Problems from local JSONL/Parquet files, and :class:`FileTask`, the task they feed.

Nothing is downloaded: the files are exported once (e.g. from a dataset hub) and read
from disk. The format follows the suffix: ``.jsonl`` / ``.json-lines`` (one JSON object a
line) or ``.parquet``. Every error names the file, the row (1-based: the line of a JSONL
file, the row of a Parquet file) and the field.

Math rows (MATH, GSM8K, MATH-500 style):

* question: ``problem`` | ``question`` | ``prompt``;
* answer: ``final_answer`` | ``answer`` | ``solution``, first present wins. A worked
  solution is reduced to its reference answer: the text after GSM8K's ``####`` marker,
  else its last ``\\boxed{...}``. A ``solution`` with neither is an error; an ``answer``
  with neither is the answer itself (MATH-500's ``answer`` is already short);
* optional ``id`` | ``unique_id`` (default ``<file stem>-<0-based row index>``) and
  ``level`` | ``difficulty`` (``3`` or ``"Level 3"``; text without a number, like MATH's
  ``"Level ?"``, is 0).

Multiple-choice rows (HellaSwag, PIQA, BoolQ, OpenBookQA, ARC, SIQA, MMLU style):

* question: ``question`` | ``query`` | ``question_stem`` | ``ctx`` | ``goal`` |
  ``prompt``, after a ``context`` | ``passage`` when present (SIQA, BoolQ);
* choices: a list in ``choices`` | ``endings`` | ``options``; or ARC/OpenBookQA's
  ``{"text": [...], "label": [...]}``; or a ``{"A": ..., "B": ...}`` mapping; or PIQA's
  ``sol1``, ``sol2``; or SIQA's ``answerA``, ``answerB``, ``answerC``; or none at all for
  BoolQ, whose choices are ``["no", "yes"]``;
* answer, first present of ``label`` | ``answerKey`` | ``answer`` | ``gold``. A string
  that is a letter is that letter; a string equal to a choice's text is that choice;
  otherwise an integer is an index whose base depends on the field: ``label`` is
  0-based (HellaSwag, PIQA) except in SIQA rows (``answerA``...), where it is 1-based
  (``"1"``/``"2"``/``"3"``); ``answerKey`` is looked up in the ``label`` list of
  ARC-style choices, else 1-based (ARC's ``"1"``..``"4"`` keys); ``answer`` and ``gold``
  are 0-based (MMLU, lm-eval). BoolQ's ``true``/``false``/``yes``/``no`` (or a 0/1
  ``label``) choose ``yes``/``no``.

The prompt is ``"<question>\\nA. <choice>\\nB. <choice>...\\nAnswer with the letter."``
and the answer is the letter.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from trainer.tasks.base import Problem
from trainer.tasks.rewards import extract_boxed
from trainer.wire import MAX_KEY

Loader = Callable[[str | Path], list[Problem]]
JSONL_SUFFIXES = (".jsonl", ".json-lines")
PARQUET_SUFFIXES = (".parquet",)
DATA_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES
"""The suffixes :func:`read_rows` reads (compared lower-cased)."""
LETTERS = string.ascii_uppercase
MC_INSTRUCTION = "Answer with the letter."

MATH_QUESTION_FIELDS = ("problem", "question", "prompt")
MATH_ANSWER_FIELDS = ("final_answer", "answer", "solution")
ID_FIELDS = ("id", "unique_id")
DIFFICULTY_FIELDS = ("level", "difficulty")
MC_QUESTION_FIELDS = ("question", "query", "question_stem", "ctx", "goal", "prompt")
MC_CONTEXT_FIELDS = ("context", "passage")
MC_CHOICE_FIELDS = ("choices", "endings", "options")
MC_ANSWER_FIELDS = ("label", "answerKey", "answer", "gold")
BOOLQ_CHOICES = ("no", "yes")
BOOLQ_WORDS = {"false": 0, "no": 0, "true": 1, "yes": 1}


class DataFileError(ValueError):
    """A problem with a data file, naming the file, the row and the field."""


@dataclass(frozen=True)
class Row:
    """One record of a data file and where it came from."""

    path: Path
    number: int
    """1-based: the line of a JSONL file, the row of a Parquet file."""
    index: int
    """0-based position among the file's records (used for default ids)."""
    data: dict[str, Any]

    def error(self, field: str, message: str) -> DataFileError:
        return DataFileError(f"{self.path}, row {self.number}, field {field!r}: {message}")


# --- reading rows -------------------------------------------------------------------------
def read_rows(path: str | Path) -> list[Row]:
    """The records of a JSONL or Parquet file (chosen by suffix)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise ValueError(
            f"{path}: unsupported data file suffix {path.suffix!r}; "
            f"use one of {', '.join(DATA_SUFFIXES)}"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: data file not found")
    rows = list(_jsonl_rows(path) if suffix in JSONL_SUFFIXES else _parquet_rows(path))
    if not rows:
        raise DataFileError(f"{path}: the file has no rows")
    return rows


def _jsonl_rows(path: Path) -> Iterator[Row]:
    with path.open("rb") as lines:
        yield from jsonl_rows(lines, path)


def jsonl_rows(lines: Iterable[bytes], path: Path) -> Iterator[Row]:
    """The records of JSONL ``lines`` (bytes, one JSON object each; blank lines skipped).

    Errors name the line and say what is wrong, never what the line holds: they reach
    the web app's pages, and the file may be one the reader is not meant to see."""
    index = 0
    for number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DataFileError(f"{path}, row {number}: not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFileError(
                f"{path}, row {number}: not valid JSON (at column {exc.colno})"
            ) from None
        except RecursionError:
            raise DataFileError(f"{path}, row {number}: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise DataFileError(f"{path}, row {number}: expected a JSON object per line")
        yield Row(path, number, index, data)
        index += 1


def _parquet_rows(path: Path) -> Iterator[Row]:
    with path.open("rb") as source:
        yield from parquet_rows(source, path)


def parquet_rows(source: BinaryIO, path: Path, batch_rows: int = 1024) -> Iterator[Row]:
    """The records of the Parquet file open as ``source``, ``batch_rows`` at a time (a
    whole table is never held)."""
    import pyarrow.parquet as pq

    index = 0
    for batch in pq.ParquetFile(source).iter_batches(batch_size=batch_rows):
        for data in batch.to_pylist():
            yield Row(path, index + 1, index, data)
            index += 1


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message that must not quote it ("a number")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "an object"


# --- field helpers ------------------------------------------------------------------------
def _present(row: Row, name: str) -> bool:
    value = row.data.get(name)
    return value is not None and not (isinstance(value, str) and not value.strip())


def _first_field(row: Row, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if _present(row, name)), None)


def _text(row: Row, name: str) -> str:
    value = row.data[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise row.error(name, f"expected text, got {json_kind(value)}")
    return str(value).strip()


def _required_text(row: Row, names: tuple[str, ...], what: str) -> tuple[str, str]:
    name = _first_field(row, names)
    if name is None:
        raise row.error(" | ".join(names), f"missing {what}; give one of these fields")
    return name, _text(row, name)


def _problem_id(row: Row) -> str:
    """The row's id, or ``<file stem>-<row>``; at most :data:`trainer.wire.MAX_KEY`
    characters, since every transfer event carries it (the check runs before training)."""
    name = _first_field(row, ID_FIELDS)
    if not name:
        suffix = f"-{row.index}"
        return row.path.stem[: MAX_KEY - len(suffix)] + suffix
    problem_id = _text(row, name)
    if len(problem_id) > MAX_KEY:
        raise row.error(
            name,
            f"the id has {len(problem_id)} characters; use at most {MAX_KEY} "
            "(transfer events carry it to the web app)",
        )
    return problem_id


def _difficulty(row: Row) -> int:
    name = _first_field(row, DIFFICULTY_FIELDS)
    if name is None:
        return 0
    value = row.data[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise row.error(name, f"expected a level such as 3 or 'Level 3', got {json_kind(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise row.error(name, "expected a whole-number level, got a fraction")
    if isinstance(value, (int, float)):
        return int(value)
    number = re.search(r"-?\d+", value)
    return int(number.group()) if number else 0


# --- math ---------------------------------------------------------------------------------
def reference_answer(text: str) -> str | None:
    """The answer of a worked solution: after GSM8K's ``####``, else the last box."""
    if "####" in text:
        return text.rsplit("####", 1)[1].strip() or None
    boxed = extract_boxed(text)
    return boxed.strip() if boxed is not None and boxed.strip() else None


def _math_answer(row: Row) -> str:
    name, text = _required_text(row, MATH_ANSWER_FIELDS, "answer")
    answer = reference_answer(text)
    if answer is not None:
        return answer
    if name == "solution":
        raise row.error(name, "the solution has no \\boxed{...} answer and no '#### answer' line")
    return text


def math_problem(row: Row) -> Problem:
    """A math :class:`Problem` from one MATH/GSM8K-style row."""
    _, question = _required_text(row, MATH_QUESTION_FIELDS, "question")
    return Problem(
        id=_problem_id(row), prompt=question, answer=_math_answer(row), difficulty=_difficulty(row)
    )


def load_math_file(path: str | Path) -> list[Problem]:
    """The math problems of a JSONL/Parquet file (see the module docstring for fields)."""
    return [math_problem(row) for row in read_rows(path)]


# --- multiple choice ----------------------------------------------------------------------
def _mc_question(row: Row) -> str:
    parts = []
    context = _first_field(row, MC_CONTEXT_FIELDS)
    if context is not None:
        parts.append(_text(row, context))
    question = _first_field(row, MC_QUESTION_FIELDS)
    if question is not None:
        parts.append(_text(row, question))
    if not parts:
        names = " | ".join(MC_QUESTION_FIELDS + MC_CONTEXT_FIELDS)
        raise row.error(names, "missing question; give one of these fields")
    return "\n".join(parts)


def _choice_texts(row: Row, name: str, values: Any) -> list[str]:
    if not isinstance(values, (list, tuple)):
        raise row.error(name, f"expected a list of choices, got {json_kind(values)}")
    texts = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise row.error(name, f"expected each choice to be text, got {json_kind(value)}")
        texts.append(str(value).strip())
    return texts


def _labelled_choices(row: Row, name: str, value: dict[str, Any]) -> tuple[list[str], list[str]]:
    """ARC's ``{"text": [...], "label": [...]}`` or a ``{"A": text, ...}`` mapping."""
    if "text" in value:
        texts = _choice_texts(row, name, value["text"])
        labels = _choice_texts(row, name, value.get("label") or list(LETTERS[: len(texts)]))
        if len(labels) != len(texts):
            raise row.error(name, f"{len(texts)} choice texts but {len(labels)} labels")
        return texts, labels
    labels = sorted(value)
    return _choice_texts(row, name, [value[label] for label in labels]), labels


def _numbered_choices(row: Row) -> tuple[str, list[str]] | None:
    """PIQA's ``sol1, sol2...`` or SIQA's ``answerA, answerB...`` fields, if present."""
    for prefix, suffixes in (("sol", "123456789"), ("answer", LETTERS)):
        names = [prefix + suffix for suffix in suffixes]
        present = [name for name in names if name in row.data]
        if present:
            return prefix, [_text(row, name) for name in present]
    return None


@dataclass(frozen=True)
class Choices:
    """A row's choices, the style they came in and their labels (ARC-style only)."""

    texts: list[str]
    style: str
    """``"list"``, ``"labelled"``, ``"sol"`` (PIQA), ``"answer"`` (SIQA) or ``"boolq"``."""
    labels: list[str] | None = None


def _choices(row: Row) -> Choices:
    name = _first_field(row, MC_CHOICE_FIELDS)
    if name is not None:
        value = row.data[name]
        if isinstance(value, dict):
            texts, labels = _labelled_choices(row, name, value)
            return Choices(texts, "labelled", labels)
        return Choices(_choice_texts(row, name, value), "list")
    numbered = _numbered_choices(row)
    if numbered is not None:
        return Choices(numbered[1], numbered[0])
    return Choices(list(BOOLQ_CHOICES), "boolq")


def _check_choices(row: Row, choices: Choices) -> None:
    where = " | ".join(MC_CHOICE_FIELDS)
    if not 2 <= len(choices.texts) <= len(LETTERS):
        raise row.error(where, f"expected 2 to {len(LETTERS)} choices, got {len(choices.texts)}")
    if any(not text for text in choices.texts):
        raise row.error(where, "a choice is empty")


def _index_base(field: str, choices: Choices) -> int:
    """Whether an integer answer in ``field`` counts from 0 or from 1 (module docstring)."""
    if field == "label":
        return 1 if choices.style == "answer" else 0
    return 1 if field == "answerKey" else 0


def _boolq_index(row: Row, field: str, value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in BOOLQ_WORDS:
        return BOOLQ_WORDS[value.strip().lower()]
    if isinstance(value, (int, str)) and str(value).strip() in ("0", "1"):
        return int(str(value).strip())
    raise row.error(
        field,
        f"expected true/false, yes/no or 0/1, got other {json_kind(value)} (with no choices "
        "field, a row is read as a BoolQ yes/no question; give choices in "
        f"{' | '.join(MC_CHOICE_FIELDS)})",
    )


def _letter_index(value: str, count: int) -> int | None:
    letter = value.strip().strip("().").strip()
    if len(letter) == 1 and letter.upper() in LETTERS[:count]:
        return LETTERS.index(letter.upper())
    return None


def _text_index(value: str, texts: list[str]) -> int | None:
    folded = [text.casefold() for text in texts]
    key = value.strip().casefold()
    return folded.index(key) if key in folded else None


def _answer_index(row: Row, field: str, choices: Choices) -> int:
    value = row.data[field]
    if choices.style == "boolq":
        return _boolq_index(row, field, value)
    if isinstance(value, str):
        if choices.labels is not None and value.strip() in choices.labels:
            return choices.labels.index(value.strip())
        for found in (_letter_index(value, len(choices.texts)), _text_index(value, choices.texts)):
            if found is not None:
                return found
    index = _integer(value)
    if index is None:
        raise row.error(
            field, f"expected a letter, an index or a choice's text, got other {json_kind(value)}"
        )
    position = index - _index_base(field, choices)
    if not 0 <= position < len(choices.texts):
        raise row.error(field, f"the answer is out of range for {len(choices.texts)} choices")
    return position


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def render_multiple_choice(question: str, choices: list[str]) -> str:
    """``"<question>\\nA. <choice>\\nB. <choice>...\\nAnswer with the letter."``."""
    lines = [question, *(f"{LETTERS[i]}. {choice}" for i, choice in enumerate(choices))]
    return "\n".join([*lines, MC_INSTRUCTION])


@dataclass(frozen=True)
class MultipleChoiceParts:
    """One multiple-choice row read by the field rules of this module's docstring."""

    id: str
    question: str
    choices: list[str]
    answer: int
    """The index of the right choice."""
    difficulty: int


def multiple_choice_parts(row: Row) -> MultipleChoiceParts:
    """The id, question, choices and right choice's index of one row (fix-it errors
    name the row and field)."""
    question = _mc_question(row)
    choices = _choices(row)
    _check_choices(row, choices)
    field = _first_field(row, MC_ANSWER_FIELDS)
    if field is None:
        raise row.error(" | ".join(MC_ANSWER_FIELDS), "missing answer; give one of these fields")
    return MultipleChoiceParts(
        id=_problem_id(row),
        question=question,
        choices=choices.texts,
        answer=_answer_index(row, field, choices),
        difficulty=_difficulty(row),
    )


def multiple_choice_problem(row: Row) -> Problem:
    """A multiple-choice :class:`Problem` from one row; the answer is a letter."""
    parts = multiple_choice_parts(row)
    return Problem(
        id=parts.id,
        prompt=render_multiple_choice(parts.question, parts.choices),
        answer=LETTERS[parts.answer],
        difficulty=parts.difficulty,
    )


EXACT_PROMPT_FIELDS = ("prompt", "question", "problem")
EXACT_ANSWER_FIELDS = ("answer",)


def exact_match_problem(row: Row) -> Problem:
    """A :class:`Problem` (prompt, expected text) from one exact-match row."""
    _, prompt = _required_text(row, EXACT_PROMPT_FIELDS, "prompt")
    name = _first_field(row, EXACT_ANSWER_FIELDS)
    if name is None and "answer" in row.data:
        raise row.error("answer", "the answer is empty; exact match needs the expected text")
    _, answer = _required_text(row, EXACT_ANSWER_FIELDS, "answer")
    return Problem(id=_problem_id(row), prompt=prompt, answer=answer)


def load_exact_match_file(path: str | Path) -> list[Problem]:
    """The exact-match problems of a JSONL/Parquet file (``prompt`` + ``answer``)."""
    return [exact_match_problem(row) for row in read_rows(path)]


def load_multiple_choice_file(path: str | Path) -> list[Problem]:
    """The multiple-choice problems of a JSONL/Parquet file (fields: module docstring)."""
    return [multiple_choice_problem(row) for row in read_rows(path)]


LOADERS: dict[str, Loader] = {
    "math": load_math_file,
    "multiple_choice": load_multiple_choice_file,
}
"""The loader for each reward name."""


# --- the task -----------------------------------------------------------------------------
class FileTask:
    """A :class:`~trainer.tasks.base.Task` over a train file and a validation file.

    The validation set is the first ``val_size`` problems of ``val_path`` (all when
    ``val_size`` is None). Train problems whose prompt is also a validation prompt are
    dropped, so validation stays held out. The train stream visits the remaining
    problems epoch by epoch, each epoch in its own order drawn from ``(seed, epoch)``, so
    ``train_batch(step, size)`` depends on nothing but ``(seed, step, size)``.
    """

    def __init__(
        self,
        train_path: str | Path,
        val_path: str | Path,
        *,
        reward_name: str = "math",
        seed: int = 0,
        val_size: int | None = None,
        loader: Loader | None = None,
    ) -> None:
        if loader is None:
            if reward_name not in LOADERS:
                raise ValueError(
                    f"no file loader for reward {reward_name!r}; "
                    f"known: {', '.join(sorted(LOADERS))} (or pass loader=)"
                )
            loader = LOADERS[reward_name]
        if val_size is not None and val_size < 1:
            raise ValueError(f"val_size must be >= 1 or None, got {val_size}")
        self.reward_name = reward_name
        self.seed = seed
        self._val = loader(val_path)[:val_size]
        held_out = {problem.prompt.strip() for problem in self._val}
        self._train = [p for p in loader(train_path) if p.prompt.strip() not in held_out]
        if not self._train:
            raise ValueError(
                f"{train_path}: no train problems left once the validation prompts of "
                f"{val_path} are held out"
            )
        self._orders: dict[int, list[int]] = {}

    @property
    def train_size(self) -> int:
        """How many problems one epoch of the train stream visits."""
        return len(self._train)

    def validation(self) -> list[Problem]:
        return list(self._val)

    def train_batch(self, step: int, size: int) -> list[Problem]:
        if step < 0 or size < 0:
            raise ValueError(f"step and size must be >= 0, got step={step}, size={size}")
        start = step * size
        return [self._at(position) for position in range(start, start + size)]

    def _at(self, position: int) -> Problem:
        epoch, offset = divmod(position, len(self._train))
        return self._train[self._order(epoch)[offset]]

    def _order(self, epoch: int) -> list[int]:
        order = self._orders.get(epoch)
        if order is None:
            order = list(range(len(self._train)))
            random.Random(f"file-train-{self.seed}-{epoch}").shuffle(order)
            if len(self._orders) > 8:
                self._orders.clear()
            self._orders[epoch] = order
        return order

"""The synthetic evaluation suite: built by the trainer itself, deterministic for a seed.

:func:`write_synthetic_suite` writes into a directory:

* one math task per arithmetic skill (:data:`trainer.tasks.arithmetic.SKILLS`):
  ``arith-addition.jsonl``, ``arith-subtraction.jsonl``, ``arith-mixed.jsonl``,
  ``arith-multiplication.jsonl``, rows ``{"id", "problem": "Compute 47+38.",
  "answer": "85", "level"}``, scored by the boxed-answer reward;
* ``larger.jsonl``, multiple choice: ``"Which is larger? A) 17 B) 23"`` with choices
  ``["17", "23"]`` and the 0-based ``answer`` index, scored by log-likelihood;
* ``word-problems.jsonl``, exact match: a templated word problem (``"Ana has 17 apples
  and buys 5 more. How many now? Number only."``, answer ``"22"``), short enough that a
  character-level zoo policy's prompt and answer fit its 128 positions;
* ``suite.json``, the :class:`~trainer.evals.suite.SuiteConfig` naming them with paths
  relative to the directory.

Every file depends only on ``(seed, size)``; ids are stable.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from trainer.evals.suite import EvalTask, SuiteConfig
from trainer.tasks.arithmetic import SKILLS, make_expression, prompt_for

SUITE_NAME = "synthetic"
SUITE_FILE = "suite.json"
NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah")
ITEMS = ("apples", "marbles", "books", "stamps", "shells")
WORD_TEMPLATES = (
    ("{name} has {a} {item} and buys {b} more. How many now?", "+"),
    ("{name} has {a} {item} and gives away {b}. How many are left?", "-"),
)
WORD_INSTRUCTION = "Number only."


def arithmetic_rows(rng: random.Random, skill: str, size: int) -> list[dict[str, Any]]:
    """``size`` distinct math rows of one skill (its levels in turn)."""
    levels = [level for level, name in SKILLS.items() if name == skill]
    rows: dict[str, dict[str, Any]] = {}
    while len(rows) < size:
        level = levels[len(rows) % len(levels)]
        expression, value = make_expression(rng, level)
        if expression not in rows:
            rows[expression] = {
                "id": f"{skill}-{len(rows):04d}",
                "problem": prompt_for(expression),
                "answer": str(value),
                "level": level,
            }
    return list(rows.values())


def larger_rows(rng: random.Random, size: int) -> list[dict[str, Any]]:
    """``"Which is larger? A) 17 B) 23"`` rows; the larger number is A or B at random."""
    rows = []
    for index in range(size):
        a, b = rng.sample(range(10, 100), 2)
        rows.append(
            {
                "id": f"larger-{index:04d}",
                "question": f"Which is larger? A) {a} B) {b}",
                "choices": [str(a), str(b)],
                "answer": 0 if a > b else 1,
            }
        )
    return rows


def word_problem_rows(rng: random.Random, size: int) -> list[dict[str, Any]]:
    """Templated word problems (adding or taking away) with the number as the answer."""
    rows = []
    for index in range(size):
        template, operation = rng.choice(WORD_TEMPLATES)
        a, b = rng.randint(10, 50), rng.randint(1, 9)
        question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
        rows.append(
            {
                "id": f"word-{index:04d}",
                "prompt": f"{question} {WORD_INSTRUCTION}",
                "answer": str(a + b if operation == "+" else a - b),
            }
        )
    return rows


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, sort_keys=True) + "\n")


def write_synthetic_suite(directory: str | Path, *, seed: int = 0, size: int = 32) -> Path:
    """Write the synthetic suite (``size`` items a task) into ``directory``; return the
    path of its ``suite.json``. The same ``(seed, size)`` writes the same bytes."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tasks: list[EvalTask] = []
    for skill in dict.fromkeys(SKILLS.values()):
        name = f"arith-{skill}"
        rng = random.Random(f"eval-{name}-{seed}")
        _write_jsonl(directory / f"{name}.jsonl", arithmetic_rows(rng, skill, size))
        tasks.append(EvalTask(name=name, type="math", path=f"{name}.jsonl"))
    larger = larger_rows(random.Random(f"eval-larger-{seed}"), size)
    _write_jsonl(directory / "larger.jsonl", larger)
    tasks.append(EvalTask(name="larger", type="multiple_choice", path="larger.jsonl"))
    words = word_problem_rows(random.Random(f"eval-word-{seed}"), size)
    _write_jsonl(directory / "word-problems.jsonl", words)
    tasks.append(EvalTask(name="word-problems", type="exact_match", path="word-problems.jsonl"))
    return SuiteConfig(name=SUITE_NAME, tasks=tasks).save(directory / SUITE_FILE)

"""The synthetic suite: deterministic for a seed, and loadable through the suite config."""

from __future__ import annotations

import re

from trainer.evals.suite import SuiteConfig, load_task_items
from trainer.evals.synthetic import write_synthetic_suite


def value_of(expression: str) -> int:
    """Left to right, with ``*`` first: enough for the arithmetic levels (a*b, a+b-c)."""
    if "*" in expression:
        a, b = expression.split("*")
        return int(a) * int(b)
    tokens = re.findall(r"\d+|[-+]", expression)
    total = int(tokens[0])
    for sign, number in zip(tokens[1::2], tokens[2::2], strict=True):
        total += int(number) if sign == "+" else -int(number)
    return total


def files(directory) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_the_same_seed_writes_the_same_files(tmp_path):
    write_synthetic_suite(tmp_path / "one", seed=3, size=8)
    write_synthetic_suite(tmp_path / "two", seed=3, size=8)
    write_synthetic_suite(tmp_path / "other", seed=4, size=8)

    assert files(tmp_path / "one") == files(tmp_path / "two")
    assert files(tmp_path / "one") != files(tmp_path / "other")


def test_it_loads_through_the_suite_config_with_correct_answers(tmp_path):
    suite = SuiteConfig.from_file(write_synthetic_suite(tmp_path, seed=0, size=6))

    assert suite.name == "synthetic"
    assert {task.name: task.type for task in suite.tasks} == {
        "arith-addition": "math",
        "arith-subtraction": "math",
        "arith-mixed": "math",
        "arith-multiplication": "math",
        "larger": "multiple_choice",
        "word-problems": "exact_match",
    }
    for task in suite.tasks:
        items = load_task_items(task)
        assert len(items) == 6
        if task.type == "math":
            for problem in items:
                expression = re.fullmatch(r"Compute (.+)\.", problem.prompt).group(1)
                assert str(value_of(expression)) == problem.answer
        elif task.type == "multiple_choice":
            for item in items:
                assert item.context.startswith("Which is larger? A) ")
                numbers = [int(choice) for choice in item.choices]
                assert numbers[item.answer] == max(numbers)
        else:
            for problem in items:
                a, b = (int(n) for n in re.findall(r"\d+", problem.prompt))
                assert int(problem.answer) == (a + b if "buys" in problem.prompt else a - b)

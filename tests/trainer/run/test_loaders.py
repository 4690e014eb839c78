"""Local JSONL/Parquet loaders for math and multiple-choice problems."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.tasks.base import Problem
from trainer.tasks.loaders import (
    DataFileError,
    load_math_file,
    load_multiple_choice_file,
    render_multiple_choice,
)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def load_one_mc(tmp_path: Path, row: dict[str, Any]) -> Problem:
    (problem,) = load_multiple_choice_file(write_jsonl(tmp_path / "mc.jsonl", [row]))
    return problem


# --- files --------------------------------------------------------------------------------
def test_jsonl_and_parquet_give_the_same_problems(tmp_path: Path) -> None:
    rows = [{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "answer": "4"}]
    from_jsonl = load_math_file(write_jsonl(tmp_path / "data.jsonl", rows))
    from_parquet = load_math_file(write_parquet(tmp_path / "data.parquet", rows))
    assert from_jsonl == from_parquet
    assert [p.answer for p in from_jsonl] == ["2", "4"]


def test_json_lines_suffix_and_blank_lines_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "data.json-lines"
    path.write_text('{"question": "q", "answer": 1}\n\n{"question": "r", "answer": 2}\n')
    assert [p.answer for p in load_math_file(path)] == ["1", "2"]


def test_unknown_suffix_is_refused_with_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("problem,answer\n")
    with pytest.raises(ValueError, match=r"data\.csv.*\.jsonl, \.json-lines, \.parquet"):
        load_math_file(path)


def test_invalid_json_names_the_file_and_row(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"problem": "q", "answer": "1"}\n{"problem": \n')
    with pytest.raises(DataFileError, match=r"broken\.jsonl, row 2: not valid JSON"):
        load_math_file(path)


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(DataFileError, match="no rows"):
        load_math_file(path)


# --- math ---------------------------------------------------------------------------------
def test_math_rows_take_ids_difficulty_and_default_ids(tmp_path: Path) -> None:
    rows = [
        {"problem": "p0", "answer": "1", "unique_id": "test/algebra/1.json", "level": "Level 3"},
        {"question": "p1", "final_answer": "2", "difficulty": 4},
        {"prompt": "p2", "answer": "3", "id": 17, "level": "Level ?"},
    ]
    problems = load_math_file(write_jsonl(tmp_path / "math.jsonl", rows))
    assert problems == [
        Problem(id="test/algebra/1.json", prompt="p0", answer="1", difficulty=3),
        Problem(id="math-1", prompt="p1", answer="2", difficulty=4),
        Problem(id="17", prompt="p2", answer="3", difficulty=0),
    ]


def test_an_id_too_long_for_a_transfer_event_is_refused_when_the_file_loads(
    tmp_path: Path,
) -> None:
    rows = [{"problem": "p0", "answer": "1", "id": "x" * 129}]
    with pytest.raises(DataFileError, match=r"row 1, field 'id': the id has 129 characters"):
        load_math_file(write_jsonl(tmp_path / "math.jsonl", rows))
    long_stem = tmp_path / ("m" * 140 + ".jsonl")
    (problem,) = load_math_file(write_jsonl(long_stem, [{"problem": "p", "answer": "1"}]))
    assert len(problem.id) == 128 and problem.id.endswith("m-0")


def test_math_solution_is_reduced_to_its_last_boxed_answer(tmp_path: Path) -> None:
    row = {"problem": "Halve 1.", "solution": "So $x=\\boxed{2}$... no: $\\boxed{\\frac{1}{2}}$."}
    (problem,) = load_math_file(write_jsonl(tmp_path / "math.jsonl", [row]))
    assert problem.answer == "\\frac{1}{2}"


def test_gsm8k_answer_is_the_text_after_the_marker(tmp_path: Path) -> None:
    row = {"question": "Sum?", "answer": "3 + 4 = <<3+4=7>>7 apples.\n#### 7"}
    (problem,) = load_math_file(write_parquet(tmp_path / "gsm8k.parquet", [row]))
    assert problem.answer == "7"


def test_short_answer_field_wins_over_worked_solution(tmp_path: Path) -> None:
    row = {"problem": "q", "solution": "long... \\boxed{\\dfrac{1}{2}}", "answer": "\\frac{1}{2}"}
    (problem,) = load_math_file(write_jsonl(tmp_path / "math500.jsonl", [row]))
    assert problem.answer == "\\frac{1}{2}"


def test_missing_question_names_file_row_and_fields(tmp_path: Path) -> None:
    rows = [{"problem": "q", "answer": "1"}, {"answer": "2"}]
    with pytest.raises(DataFileError, match=r"math\.jsonl, row 2, field 'problem \| question"):
        load_math_file(write_jsonl(tmp_path / "math.jsonl", rows))


def test_missing_answer_names_the_answer_fields(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"row 1, field 'final_answer \| answer \| solution'"):
        load_math_file(write_jsonl(tmp_path / "math.jsonl", [{"problem": "q"}]))


def test_solution_without_a_final_answer_is_an_error(tmp_path: Path) -> None:
    row = {"problem": "q", "solution": "we reason a lot but never conclude"}
    with pytest.raises(DataFileError, match=r"row 1, field 'solution'.*no \\boxed"):
        load_math_file(write_jsonl(tmp_path / "math.jsonl", [row]))


def test_non_text_question_is_an_error(tmp_path: Path) -> None:
    row = {"problem": ["not", "text"], "answer": "1"}
    with pytest.raises(DataFileError, match=r"row 1, field 'problem': expected text"):
        load_math_file(write_jsonl(tmp_path / "math.jsonl", [row]))


# --- multiple choice ----------------------------------------------------------------------
def test_prompt_lists_lettered_choices_and_the_instruction() -> None:
    assert render_multiple_choice("Pick one.", ["red", "blue"]) == (
        "Pick one.\nA. red\nB. blue\nAnswer with the letter."
    )


def test_hellaswag_endings_with_zero_based_label(tmp_path: Path) -> None:
    row = {"ctx": "A man sits down.", "endings": ["e0", "e1", "e2", "e3"], "label": "2"}
    problem = load_one_mc(tmp_path, row)
    assert problem.prompt == render_multiple_choice("A man sits down.", ["e0", "e1", "e2", "e3"])
    assert problem.answer == "C"


def test_piqa_solutions_with_zero_based_label(tmp_path: Path) -> None:
    row = {"goal": "Open a jar.", "sol1": "Twist the lid.", "sol2": "Hit it.", "label": 0}
    problem = load_one_mc(tmp_path, row)
    assert problem.prompt == render_multiple_choice("Open a jar.", ["Twist the lid.", "Hit it."])
    assert problem.answer == "A"


def test_siqa_context_question_and_one_based_label(tmp_path: Path) -> None:
    row = {
        "context": "Tracy lost her keys.",
        "question": "How does Tracy feel?",
        "answerA": "happy",
        "answerB": "upset",
        "answerC": "bored",
        "label": "2",
    }
    problem = load_one_mc(tmp_path, row)
    question = "Tracy lost her keys.\nHow does Tracy feel?"
    assert problem.prompt == render_multiple_choice(question, ["happy", "upset", "bored"])
    assert problem.answer == "B"


def test_arc_labelled_choices_with_letter_and_numeric_keys(tmp_path: Path) -> None:
    rows = [
        {
            "id": "Mercury_7",
            "question": "Which is a metal?",
            "choices": {"text": ["wood", "iron", "glass"], "label": ["A", "B", "C"]},
            "answerKey": "B",
        },
        {
            "question": "Which is a gas?",
            "choices": {"text": ["rock", "water", "steam", "ice"], "label": ["1", "2", "3", "4"]},
            "answerKey": "3",
        },
    ]
    problems = load_multiple_choice_file(write_parquet(tmp_path / "arc.parquet", rows))
    assert [(p.id, p.answer) for p in problems] == [("Mercury_7", "B"), ("arc-1", "C")]


def test_openbookqa_question_stem(tmp_path: Path) -> None:
    row = {
        "question_stem": "The sun is a",
        "choices": {"text": ["planet", "star"], "label": ["A", "B"]},
        "answerKey": "B",
    }
    problem = load_one_mc(tmp_path, row)
    assert problem.prompt.startswith("The sun is a\nA. planet\nB. star\n")
    assert problem.answer == "B"


def test_mmlu_choices_with_zero_based_integer_answer(tmp_path: Path) -> None:
    row = {"question": "2+2?", "choices": ["3", "4", "5"], "answer": 1}
    assert load_one_mc(tmp_path, row).answer == "B"


@pytest.mark.parametrize("answer", ["C", "(C)", "c", "Paris"])
def test_answer_given_as_letter_or_choice_text(tmp_path: Path, answer: str) -> None:
    row = {"question": "Capital of France?", "options": ["Rome", "Oslo", "Paris"], "answer": answer}
    assert load_one_mc(tmp_path, row).answer == "C"


@pytest.mark.parametrize(
    ("answer", "letter"), [(True, "B"), (False, "A"), ("yes", "B"), ("False", "A"), (1, "B")]
)
def test_boolq_without_choices_is_a_yes_no_question(
    tmp_path: Path, answer: object, letter: str
) -> None:
    row = {"passage": "Water is wet.", "question": "is water wet", "answer": answer}
    problem = load_one_mc(tmp_path, row)
    assert problem.prompt == render_multiple_choice("Water is wet.\nis water wet", ["no", "yes"])
    assert problem.answer == letter


def test_out_of_range_answer_names_file_row_and_field(tmp_path: Path) -> None:
    row = {"ctx": "c", "endings": ["a", "b"], "label": 5}
    with pytest.raises(DataFileError, match=r"mc\.jsonl, row 1, field 'label': .*out of range"):
        load_one_mc(tmp_path, row)


def test_missing_choice_answer_names_the_answer_fields(tmp_path: Path) -> None:
    row = {"question": "q", "choices": ["a", "b"]}
    with pytest.raises(DataFileError, match=r"row 1, field 'label \| answerKey \| answer \| gold'"):
        load_one_mc(tmp_path, row)


def test_missing_question_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"row 1, field 'question \| query"):
        load_one_mc(tmp_path, {"choices": ["a", "b"], "answer": "A"})


def test_too_few_choices_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match=r"row 1, .*expected 2 to 26 choices, got 1"):
        load_one_mc(tmp_path, {"question": "q", "choices": ["a"], "answer": "A"})


def test_row_without_choices_and_a_non_boolean_answer_explains_the_boolq_reading(
    tmp_path: Path,
) -> None:
    with pytest.raises(DataFileError, match=r"field 'answer'.*read as a BoolQ yes/no question"):
        load_one_mc(tmp_path, {"question": "q", "answer": "maybe"})

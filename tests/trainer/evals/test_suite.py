"""Suite configs: JSON round trip, fix-it errors keyed by field path, task file loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.config import ConfigError
from trainer.evals.suite import (
    ChoiceItem,
    EvalTask,
    SuiteConfig,
    load_choice_file,
    load_task_items,
)
from trainer.tasks.loaders import DataFileError, load_exact_match_file


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_it_round_trips_through_json_and_reads_paths_against_the_suite_file(tmp_path):
    write_jsonl(tmp_path / "em.jsonl", [{"prompt": "Say hi.", "answer": "hi"}])
    suite = SuiteConfig(
        name="mine", tasks=[EvalTask(name="greet", type="exact_match", path="em.jsonl", limit=1)]
    )
    saved = suite.save(tmp_path / "suite.json")

    loaded = SuiteConfig.from_file(saved)

    assert json.loads(saved.read_text()) == suite.to_dict()
    assert loaded.task("greet").path == str(tmp_path.resolve() / "em.jsonl")
    assert [p.answer for p in load_task_items(loaded.task("greet"))] == ["hi"]


def test_it_lists_every_problem_by_field_path():
    data = {
        "name": "bad name!",
        "tasks": [
            {"name": "a", "type": "essay", "path": "x.csv", "limit": 0},
            {"name": "a", "type": "math", "path": "y.jsonl"},
        ],
    }

    with pytest.raises(ConfigError) as caught:
        SuiteConfig.from_dict(data)

    errors = caught.value.errors
    assert set(errors) == {
        "name",
        "tasks[0].type",
        "tasks[0].path",
        "tasks[0].limit",
        "tasks[1].name",
    }
    assert "use one of math, multiple_choice, exact_match" in errors["tasks[0].type"]
    assert ".jsonl" in errors["tasks[0].path"]
    assert errors["tasks[0].limit"] == "limit must be >= 1; got 0"
    assert "duplicate task name 'a' (also tasks[0])" in errors["tasks[1].name"]


def test_it_names_unknown_fields_and_wrong_types_first():
    data = {"name": "s", "tasks": [{"name": "t", "type": "math", "path": "a.jsonl", "lmit": 3}]}
    with pytest.raises(ConfigError) as caught:
        SuiteConfig.from_dict(data)
    assert "unknown field 'lmit'" in caught.value.errors["tasks[0].lmit"]

    data["tasks"][0] = {"name": "t", "type": "math", "path": "a.jsonl", "limit": "3"}
    with pytest.raises(ConfigError) as caught:
        SuiteConfig.from_dict(data)
    assert caught.value.errors == {"tasks[0].limit": "must be an integer, got a string"}


def test_it_needs_a_task():
    with pytest.raises(ConfigError) as caught:
        SuiteConfig.from_json('{"name": "empty", "tasks": []}')
    assert caught.value.errors == {"tasks": "a suite needs at least one task"}


def test_multiple_choice_rows_keep_question_and_choices_apart(tmp_path):
    path = write_jsonl(
        tmp_path / "arc.jsonl",
        [
            {
                "id": "q1",
                "question": "Which is larger?",
                "choices": {"text": ["17", "23"], "label": ["A", "B"]},
                "answerKey": "B",
            },
            {"question": "Is water wet?", "answer": "yes"},  # BoolQ style
        ],
    )

    items = load_choice_file(path)

    assert items[0] == ChoiceItem("q1", "Which is larger?\nAnswer:", ("17", "23"), 1)
    assert items[0].continuations == (" 17", " 23")
    assert items[1].choices == ("no", "yes") and items[1].answer == 1


def test_exact_match_rows_need_a_prompt_and_an_answer(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", [{"question": "2+2?", "answer": 4}])
    assert [(p.prompt, p.answer) for p in load_exact_match_file(good)] == [("2+2?", "4")]

    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "2+2?"}])
    with pytest.raises(DataFileError, match=r"bad.jsonl, row 1, field 'answer': missing answer"):
        load_exact_match_file(bad)


def test_limit_keeps_the_first_items(tmp_path):
    write_jsonl(tmp_path / "m.jsonl", [{"problem": f"{i}+0?", "answer": str(i)} for i in range(5)])
    task = EvalTask(name="m", type="math", path=str(tmp_path / "m.jsonl"), limit=2)
    assert [p.answer for p in load_task_items(task)] == ["0", "1"]

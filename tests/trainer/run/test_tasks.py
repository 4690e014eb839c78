"""Tasks: the arithmetic task, file-backed tasks and the make_task factory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config import TaskConfig
from trainer.tasks import (
    REWARDS,
    ArithmeticTask,
    FileTask,
    get_reward,
    make_task,
)
from trainer.tasks.arithmetic import boxed


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def math_rows(start: int, stop: int) -> list[dict[str, Any]]:
    return [{"problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(start, stop)]


@pytest.fixture
def math_files(tmp_path: Path) -> tuple[Path, Path]:
    """A 20-row train file whose last 5 prompts are also the validation file's first 5."""
    train = write_jsonl(tmp_path / "train.jsonl", math_rows(0, 20))
    val = write_jsonl(tmp_path / "val.jsonl", math_rows(15, 25))
    return train, val


# --- arithmetic ---------------------------------------------------------------------------
def test_arithmetic_task_is_deterministic_per_seed() -> None:
    first, again, other = ArithmeticTask(seed=3), ArithmeticTask(seed=3), ArithmeticTask(seed=4)
    assert first.validation() == again.validation()
    assert first.train_batch(7, 16) == again.train_batch(7, 16)
    assert first.train_batch(7, 16) != other.train_batch(7, 16)
    assert first.train_batch(7, 16) != first.train_batch(8, 16)


def test_arithmetic_validation_stays_out_of_200_train_steps() -> None:
    task = ArithmeticTask(seed=0, levels=(1, 2, 3), val_size=64)
    held_out = {problem.prompt for problem in task.validation()}
    assert len(held_out) == 64
    for step in range(200):
        assert not held_out & {problem.prompt for problem in task.train_batch(step, 32)}


def test_arithmetic_problems_come_from_the_chosen_levels_and_are_scored_by_math() -> None:
    task = ArithmeticTask(seed=1, levels=(4, 5), val_size=10)
    problems = task.train_batch(0, 50) + task.validation()
    assert {problem.difficulty for problem in problems} == {4, 5}
    reward = get_reward(task.reward_name)
    correct = [boxed(problem.answer) for problem in problems]
    assert reward([p.prompt for p in problems], correct, [p.answer for p in problems]) == [
        1.0
    ] * len(problems)


def test_arithmetic_task_refuses_unknown_levels() -> None:
    with pytest.raises(ValueError, match="levels"):
        ArithmeticTask(levels=(9,))


# --- file tasks ---------------------------------------------------------------------------
def test_file_task_batches_are_a_pure_function_of_seed_step_and_size(
    math_files: tuple[Path, Path],
) -> None:
    train, val = math_files
    task, same = FileTask(train, val, seed=5), FileTask(train, val, seed=5)
    batches = [task.train_batch(step, 4) for step in range(6)]
    assert [same.train_batch(step, 4) for step in reversed(range(6))] == batches[::-1]
    assert task.train_batch(2, 4) == batches[2]
    assert FileTask(train, val, seed=6).train_batch(0, 15) != task.train_batch(0, 15)


def test_file_task_visits_every_train_problem_once_per_epoch_and_cycles(
    math_files: tuple[Path, Path],
) -> None:
    train, val = math_files
    task = FileTask(train, val, seed=0)
    assert task.train_size == 15
    epoch_0 = [p.prompt for p in task.train_batch(0, 15)]
    epoch_1 = [p.prompt for p in task.train_batch(1, 15)]
    assert sorted(epoch_0) == sorted(epoch_1) == sorted(f"What is {i}+1?" for i in range(15))
    assert epoch_0 != epoch_1  # each epoch has its own order
    across = [p.prompt for step in range(5) for p in task.train_batch(step, 6)]
    assert across[:15] == epoch_0 and across[15:30] == epoch_1


def test_file_task_holds_validation_prompts_out_of_the_train_stream(
    math_files: tuple[Path, Path],
) -> None:
    train, val = math_files
    task = FileTask(train, val, seed=0)
    held_out = {problem.prompt for problem in task.validation()}
    seen = {p.prompt for step in range(10) for p in task.train_batch(step, 7)}
    assert len(held_out) == 10
    assert not held_out & seen


def test_file_task_validation_is_the_first_val_size_rows(math_files: tuple[Path, Path]) -> None:
    train, val = math_files
    task = FileTask(train, val, val_size=3)
    assert [p.prompt for p in task.validation()] == [f"What is {i}+1?" for i in (15, 16, 17)]
    assert task.train_size == 17  # only the three validation prompts are held out


def test_file_task_refuses_a_train_file_entirely_held_out(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "same.jsonl", math_rows(0, 3))
    with pytest.raises(ValueError, match="no train problems left"):
        FileTask(path, path)


def test_file_task_reads_parquet_multiple_choice(tmp_path: Path) -> None:
    rows = [
        {"question": f"Pick {i}", "choices": ["x", "y", "z"], "answer": i % 3} for i in range(6)
    ]
    pq.write_table(pa.Table.from_pylist(rows[:4]), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[4:]), tmp_path / "val.parquet")
    task = FileTask(
        tmp_path / "train.parquet", tmp_path / "val.parquet", reward_name="multiple_choice"
    )
    assert [p.answer for p in task.validation()] == ["B", "C"]
    assert {p.answer for p in task.train_batch(0, 4)} == {"A", "B", "C"}


# --- make_task ----------------------------------------------------------------------------
def test_make_task_builds_the_arithmetic_task_from_the_config() -> None:
    task = make_task(TaskConfig(kind="arithmetic", levels=[2], val_size=8), seed=9)
    assert isinstance(task, ArithmeticTask)
    assert (task.seed, task.levels, len(task.validation())) == (9, (2,), 8)
    assert task.reward_name == "math"


def test_make_task_builds_a_math_file_task(math_files: tuple[Path, Path]) -> None:
    train, val = math_files
    config = TaskConfig(kind="math_file", train_path=str(train), val_path=str(val), val_size=4)
    task = make_task(config, seed=1)
    assert isinstance(task, FileTask)
    assert task.reward_name == "math" and task.reward_name in REWARDS
    assert len(task.validation()) == 4
    assert task.train_batch(3, 5) == FileTask(train, val, seed=1, val_size=4).train_batch(3, 5)


def test_make_task_builds_a_multiple_choice_file_task(tmp_path: Path) -> None:
    rows = [{"goal": f"g{i}", "sol1": "a", "sol2": "b", "label": i % 2} for i in range(4)]
    train = write_jsonl(tmp_path / "piqa_train.jsonl", rows[:3])
    val = write_jsonl(tmp_path / "piqa_val.jsonl", rows[3:])
    config = TaskConfig(kind="multiple_choice_file", train_path=str(train), val_path=str(val))
    task = make_task(config, seed=0)
    assert task.reward_name == "multiple_choice"
    assert [p.answer for p in task.validation()] == ["B"]


def test_make_task_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown task kind 'poetry'"):
        make_task(TaskConfig(kind="poetry"), seed=0)


def test_make_task_needs_both_paths_for_a_file_task() -> None:
    with pytest.raises(ValueError, match="train_path and val_path"):
        make_task(TaskConfig(kind="math_file", train_path="train.jsonl"), seed=0)

"""The worker's suite reader on paths that are no regular file (issue 44): a device, a FIFO
or a directory is "not a regular file" (it said "does not exist" for ``/dev/zero``), at
once and unopened; a missing path still "does not exist"."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from trainer.evals.evaluate import EvalError, load_suite
from trainer.evals.synthetic import write_synthetic_suite


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)  # opening it for reading would block until a writer came
    return path


@pytest.mark.parametrize("name", ["/dev/zero", "fifo", "directory"])
def test_a_path_that_is_no_regular_file_is_said_to_be_one(
    name: str, fifo: Path, tmp_path: Path
) -> None:
    path = {"/dev/zero": Path("/dev/zero"), "fifo": fifo, "directory": tmp_path}[name]
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_suite(path)
        except BaseException as error:  # noqa: BLE001 (kept for the assertion below)
            outcome.append(error)
        else:
            outcome.append(None)

    reader = threading.Thread(target=load, daemon=True)  # a blocked open never ends
    reader.start()
    reader.join(timeout=5)
    assert outcome, f"load_suite({path}) did not return within 5 s (it opened the file)"
    assert isinstance(outcome[0], EvalError)
    assert str(outcome[0]) == (f"suite file {path} is not a regular file; give a suite JSON file")


def test_a_missing_suite_file_still_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    with pytest.raises(EvalError, match=r"suite file .*nowhere\.json does not exist$"):
        load_suite(missing)


def test_a_regular_suite_file_loads(tmp_path: Path) -> None:
    suite_file = write_synthetic_suite(tmp_path / "suite", size=2)
    assert load_suite(suite_file).tasks

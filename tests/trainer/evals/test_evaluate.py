"""``python -m trainer eval`` on a real checkpoint of tiny zoo policies: the results
file, the spooled points at the checkpoint's step, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.evals.checkpoints import POLICIES, STEPS, trained_run, trainer_eval
from trainer import metrics as m
from trainer.cli import main
from trainer.evals.evaluate import EVAL_SPOOL_DIR, open_checkpoint, pick_policy
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from trainer.spool import read_points

# One worker trains the module's checkpoint (most of a minute on a busy machine); spread
# over two, both would (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("trainer-evals-evaluate")

SIZE = 6


@pytest.fixture(scope="module")
def checkpoint(zoo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trained_run(zoo_dir, tmp_path_factory.mktemp("eval") / "run")


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_suite(tmp_path_factory.mktemp("suite"), seed=1, size=SIZE)


def test_eval_writes_every_task_and_a_rerun_gives_the_same_results(
    zoo_dir: Path, checkpoint: Path, suite_file: Path, tmp_path: Path
) -> None:
    suite = SuiteConfig.from_file(suite_file)
    runs = []
    for attempt in ("first", "second"):
        out = tmp_path / f"{attempt}.json"
        result = trainer_eval(
            zoo_dir, "--suite", suite_file, "--checkpoint", checkpoint, "--policy", POLICIES[1],
            "--out", out, "--batch-size", "4",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(out.read_text()))

    first, second = runs
    assert first == second
    assert (first["suite"], first["policy"], first["step"]) == ("synthetic", POLICIES[1], STEPS)
    assert list(first["tasks"]) == [task.name for task in suite.tasks]
    for task in suite.tasks:
        entry = first["tasks"][task.name]
        assert entry["type"] == task.type
        assert entry["n"] == SIZE
        assert 0.0 <= entry["accuracy"] <= 1.0
        assert ("acc_norm" in entry) == (task.type == "multiple_choice")
    assert 0.0 <= first["tasks"]["larger"]["acc_norm"] <= 1.0

    # Spooled first, in the run's own evaluation spool, at the checkpoint's step.
    run_dir = checkpoint.parent.parent
    points = list(read_points(run_dir / EVAL_SPOOL_DIR))
    keys = {point["key"] for point in points}
    assert len(points) == 2 * len(keys)  # each evaluation spools its points once
    assert {point["step"] for point in points} == {STEPS}
    assert {point["policy"] for point in points} == {POLICIES[1]}
    assert "eval/synthetic/larger/acc_norm" in keys
    for task in suite.tasks:
        accuracy = next(p for p in points if p["key"] == f"eval/synthetic/{task.name}/accuracy")
        assert accuracy["value"] == first["tasks"][task.name]["accuracy"]
        assert f"eval/synthetic/{task.name}/n" in keys
    assert not any(p["key"].startswith("eval/") for p in read_points(run_dir))  # run's spool


def test_the_eval_keys_have_names_on_the_run_page() -> None:
    accuracy = m.describe("eval/synthetic/arith-addition/accuracy")
    assert (accuracy.label, accuracy.group) == (
        "Eval accuracy · synthetic/arith-addition",
        m.REWARDS,
    )
    assert m.describe("eval/synthetic/larger/n").unit == "items"
    assert m.describe("eval/synthetic/larger/acc_norm").label.startswith("Eval accuracy (length")


def test_a_policy_folder_picks_its_policy(checkpoint: Path) -> None:
    opened = open_checkpoint(checkpoint / POLICIES[0])
    assert (opened.directory, opened.step, opened.policies) == (checkpoint, STEPS, POLICIES)
    assert pick_policy(opened, None) == POLICIES[0]


def run_main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    code = main(["eval", *map(str, args)])
    return code, capsys.readouterr().err


def test_an_ambiguous_or_unknown_policy_lists_the_checkpoints_policies(
    checkpoint: Path, suite_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    code, err = run_main(capsys, "--suite", suite_file, "--checkpoint", checkpoint, "--out", out)
    assert code == 2
    assert err == (
        f"error: checkpoint {checkpoint} holds 2 policies; choose one with --policy: "
        "llama-char, gpt2-unigram\n"
    )
    code, err = run_main(
        capsys, "--suite", suite_file, "--checkpoint", checkpoint, "--policy", "qwen", "--out", out
    )
    assert code == 2
    assert "holds no policy 'qwen'; its policies: llama-char, gpt2-unigram" in err
    assert not out.exists()


def test_a_missing_suite_file_is_a_one_line_error(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.json"
    code, err = run_main(
        capsys, "--suite", missing, "--checkpoint", checkpoint, "--out", tmp_path / "o.json"
    )
    assert (code, err) == (2, f"error: suite file {missing} does not exist\n")


def test_a_task_file_that_does_not_parse_names_the_task(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite_file = write_synthetic_suite(tmp_path / "suite", size=2)
    (tmp_path / "suite" / "larger.jsonl").write_text('{"question": "Which?", "choices": [\n')
    code, err = run_main(
        capsys, "--suite", suite_file, "--checkpoint", checkpoint, "--out", tmp_path / "o.json"
    )
    assert code == 2
    assert err.startswith("error: cannot read suite 'synthetic': task 'larger' (multiple_choice)")
    assert "larger.jsonl" in err and err.count("\n") == 1


def test_an_invalid_suite_names_the_field(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite_file = tmp_path / "suite.json"
    suite_file.write_text(json.dumps({"name": "s", "tasks": [{"name": "t", "type": "essay",
                                                              "path": "t.jsonl"}]}))  # fmt: skip
    code, err = run_main(
        capsys, "--suite", suite_file, "--checkpoint", checkpoint, "--out", tmp_path / "o.json"
    )
    assert code == 2
    assert "tasks[0].type" in err and "unknown task type 'essay'" in err


@pytest.mark.parametrize("where", ["missing", "no-state", "outside-a-run"])
def test_a_directory_that_is_not_a_checkpoint_is_refused(
    where: str,
    checkpoint: Path,
    suite_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "step_000002"
    if where == "no-state":
        target = checkpoint.parent  # <run_dir>/checkpoints itself
    elif where == "outside-a-run":
        target.mkdir()
        (target / "state.json").write_text('{"step": 2, "spool_offsets": {}}')
    code, err = run_main(
        capsys, "--suite", suite_file, "--checkpoint", target, "--out", tmp_path / "o.json"
    )
    assert code == 2
    expected = {
        "missing": f"error: checkpoint directory {target} does not exist",
        "no-state": f"error: {target} is not a complete checkpoint (no state.json)",
        "outside-a-run": f"error: {target} is not inside a run directory",
    }[where]
    assert err.startswith(expected) and err.count("\n") == 1


def test_eval_suite_writes_the_synthetic_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(["eval-suite", "synthetic", "--out", str(tmp_path), "--seed", "3", "--size", "4"]) == 0
    )
    suite = SuiteConfig.from_file(tmp_path / "suite.json")
    assert capsys.readouterr().out.strip() == str(tmp_path / "suite.json")
    assert len(suite.tasks) == 6
    assert (tmp_path / "larger.jsonl").read_text().count("\n") == 4

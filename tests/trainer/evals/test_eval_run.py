"""``python -m trainer eval-run`` on a real run of tiny zoo policies (checkpoints at steps
2 and 4): which (policy, step)s it evaluates, the files it writes, the spool, shipping
after each (policy, step), progress lines, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.evals.checkpoints import POLICIES, trained_run, trainer_eval
from tests.trainer.ingest_server import TOKEN, Ingest, IngestState, serve_ingest
from trainer.cli import EXIT_UNSHIPPED, main
from trainer.evals import evaluate as ev
from trainer.evals.synthetic import write_synthetic_suite
from trainer.models import load_causal_lm, load_tokenizer
from trainer.spool import read_points

# One worker builds the module's trained run and its evaluation job (about a minute each
# on a busy machine); spread over two, both would (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("trainer-evals-eval-run")

SIZE = 4
STEPS = (2, 4)


@pytest.fixture(autouse=True)
def zoo_in_the_environment(zoo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process calls (``main``, ``load_policy_model``) find the test zoo as the CLI's
    children do: through ``MRL_ZOO_DIR``, whatever the caller's environment says."""
    monkeypatch.setenv("MRL_ZOO_DIR", str(zoo_dir))


@pytest.fixture(scope="module")
def run_dir(zoo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with complete checkpoints at steps 2 and 4 (tests copy it: each spools)."""
    checkpoint = trained_run(
        zoo_dir, tmp_path_factory.mktemp("eval-run") / "run", steps=4, checkpoint_every=2
    )
    return checkpoint.parent.parent


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_suite(tmp_path_factory.mktemp("suite"), seed=2, size=SIZE)


def fresh_run(run_dir: Path, where: Path) -> Path:
    """A copy of the run, with an empty evaluation spool of its own."""
    copy = where / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(ev.EVAL_SPOOL_DIR))
    return copy


def plan(run_dir: Path, **options: Any) -> list[tuple[str, int]]:
    return [(unit.policy, unit.step) for unit in ev.plan_evaluations(run_dir, **options)[1]]


# --- what is evaluated ---------------------------------------------------------------------
def test_steps_choose_the_checkpoints_and_base_comes_first(run_dir: Path) -> None:
    llama, gpt2 = POLICIES
    assert plan(run_dir) == [(llama, 4), (gpt2, 4)]  # final: the latest complete one
    assert plan(run_dir, steps="all") == [(llama, 2), (llama, 4), (gpt2, 2), (gpt2, 4)]
    assert plan(run_dir, steps="4,2,4", base=True) == [
        (llama, 0), (llama, 2), (llama, 4), (gpt2, 0), (gpt2, 2), (gpt2, 4),
    ]  # fmt: skip
    assert plan(run_dir, steps="none", base=True) == [(llama, 0), (gpt2, 0)]
    # Policies in pool order, whatever the order of --policy.
    assert plan(run_dir, steps="2", policies=[gpt2, llama, gpt2]) == [(llama, 2), (gpt2, 2)]
    assert plan(run_dir, policies=[gpt2], base=True) == [(gpt2, 0), (gpt2, 4)]


def test_an_unknown_step_lists_the_available_ones(run_dir: Path) -> None:
    with pytest.raises(ev.EvalError) as error:
        plan(run_dir, steps="2,3,5")
    assert str(error.value) == (
        "the run has no complete checkpoint at step 3, 5; its checkpoints' steps: 2, 4"
    )


def test_a_checkpoint_being_written_is_not_one(run_dir: Path, tmp_path: Path) -> None:
    run = fresh_run(run_dir, tmp_path)
    (run / "checkpoints" / "step_000004" / "state.json").unlink()
    assert plan(run, steps="all") == [(POLICIES[0], 2), (POLICIES[1], 2)]
    assert plan(run) == [(POLICIES[0], 2), (POLICIES[1], 2)]


def test_a_run_without_checkpoints_evaluates_only_base_models(
    run_dir: Path, tmp_path: Path
) -> None:
    run = fresh_run(run_dir, tmp_path)
    shutil.rmtree(run / "checkpoints")
    assert plan(run, base=True) == [(POLICIES[0], 0), (POLICIES[1], 0)]
    assert plan(run, steps="all", base=True) == [(POLICIES[0], 0), (POLICIES[1], 0)]
    with pytest.raises(ev.EvalError, match=r"has no complete checkpoint .*add --base"):
        plan(run)
    with pytest.raises(ev.EvalError, match="its checkpoints' steps: none"):
        plan(run, steps="2", base=True)


# --- one job, end to end ------------------------------------------------------------------
@dataclass
class Job:
    result: Any
    run: Path
    out: Path
    ingest: IngestState


@pytest.fixture(scope="module")
def job(
    zoo_dir: Path, run_dir: Path, suite_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Job]:
    """``eval-run --steps all --base`` of both policies, shipping to a fake web app."""
    where = tmp_path_factory.mktemp("job")
    run = fresh_run(run_dir, where)
    server = serve_ingest()
    ingest: Ingest = next(server)
    result = trainer_eval(
        zoo_dir, "--run-dir", run, "--suite", suite_file, "--steps", "all", "--base",
        "--out-dir", where / "out", "--ingest-url", ingest.url, "--batch-size", "4",
        env={"MRL_INGEST_TOKEN": TOKEN}, command="eval-run",
    )  # fmt: skip
    yield Job(result, run, where / "out", ingest.state)
    server.close()


UNITS = [(policy, step) for policy in POLICIES for step in (0, *STEPS)]


def test_each_policy_and_step_gets_a_results_file_and_done_lists_them(job: Job) -> None:
    assert job.result.returncode == 0, job.result.stderr[-3000:]
    done = json.loads((job.out / "done.json").read_text())
    assert done == {
        "suite": "synthetic",
        "evaluated": [{"policy": p, "step": s, "file": f"{p}-step{s:06d}.json"} for p, s in UNITS],
    }
    assert sorted(path.name for path in job.out.iterdir()) == sorted(
        ["done.json", *(entry["file"] for entry in done["evaluated"])]
    )
    for policy, step in UNITS:
        document = json.loads((job.out / f"{policy}-step{step:06d}.json").read_text())
        assert (document["suite"], document["policy"], document["step"]) == (
            "synthetic", policy, step,
        )  # fmt: skip
        assert {task["n"] for task in document["tasks"].values()} == {SIZE}


def test_progress_lines_follow_the_order_base_then_checkpoints(job: Job) -> None:
    lines = re.findall(r"^\[eval\] (\d+)/(\d+) (\S+) step (\d+)(.*): 6 tasks in [\d.]+s$",
                       job.result.stdout, re.M)  # fmt: skip
    assert [(int(i), int(n), p, int(s)) for i, n, p, s, _ in lines] == [
        (index + 1, len(UNITS), policy, step) for index, (policy, step) in enumerate(UNITS)
    ]
    assert [tail for *_, tail in lines if tail] == [" (base model)"] * len(POLICIES)
    assert job.result.stdout.count("  synthetic/larger: accuracy ") == len(UNITS)


def test_the_spool_holds_each_policy_and_step_once(job: Job) -> None:
    points = list(read_points(job.run / ev.EVAL_SPOOL_DIR))
    seen = [(p["policy"], p["key"], p["step"]) for p in points]
    assert len(seen) == len(set(seen))
    assert {(policy, step) for policy, _, step in seen} == set(UNITS)
    keys_per_unit = len(points) // len(UNITS)
    assert keys_per_unit == 2 * 6 + 1  # accuracy and n per task, acc_norm for "larger"
    document = json.loads((job.out / f"{POLICIES[1]}-step000002.json").read_text())
    value = next(
        p["value"] for p in points
        if (p["policy"], p["key"], p["step"]) == (POLICIES[1], "eval/synthetic/larger/acc_norm", 2)
    )  # fmt: skip
    assert value == document["tasks"]["larger"]["acc_norm"]


def test_each_policy_and_step_is_shipped_before_the_next_starts(job: Job) -> None:
    batches = job.ingest.ok_batches()
    assert len(batches) >= len(UNITS)
    units_shipped = []
    for batch in batches:
        units = {(point["policy"], point["step"]) for point in batch["points"]}
        assert len(units) == 1  # a batch never waits for the next evaluation
        units_shipped.extend(units - set(units_shipped))
    assert units_shipped == UNITS
    spooled = list(read_points(job.run / ev.EVAL_SPOOL_DIR))
    assert len(job.ingest.points) == len(spooled)
    assert "shipped:" in job.result.stdout and TOKEN not in job.result.stdout + job.result.stderr


def test_base_is_the_untrained_zoo_model_and_a_step_the_checkpoint_alone(
    job: Job, zoo_dir: Path, suite_file: Path
) -> None:
    suite = ev.load_suite(suite_file)
    items = ev.load_suite_items(suite)
    config = ev.open_run(job.run)
    policy = config.pool[1]
    assert policy.model == "zoo:tiny-gpt2-unigram"
    path = zoo_dir / "tiny-gpt2-unigram"

    def evaluated(model: Any, tokenizer: Any, step: int) -> dict[str, Any]:
        results = ev.evaluate_suite(
            model, tokenizer, suite, items, chat_template=policy.chat_template,
            max_new_tokens=policy.max_new_tokens, batch_size=4,
        )  # fmt: skip
        return ev.results_json(suite, policy.name, step, results)

    base = evaluated(load_causal_lm(path).eval(), load_tokenizer(path), 0)
    assert base == json.loads((job.out / f"{policy.name}-step000000.json").read_text())
    # Step 2 was evaluated with step 2's weights loaded over the base model, then step 4's
    # over those: each equals loading its checkpoint alone.
    for step in STEPS:
        checkpoint = ev.open_checkpoint(job.run / "checkpoints" / f"step_{step:06d}")
        alone = evaluated(*ev.load_policy_model(checkpoint, policy.name), step)
        assert alone == json.loads((job.out / f"{policy.name}-step{step:06d}.json").read_text())


# --- the web app away ---------------------------------------------------------------------
def test_results_are_written_but_unshipped_when_the_web_app_is_down(
    run_dir: Path,
    suite_file: Path,
    tmp_path: Path,
    ingest: Ingest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = fresh_run(run_dir, tmp_path)
    ingest.state.down = True
    code = main(["eval-run", "--run-dir", str(run), "--suite", str(suite_file), "--policy",
                 POLICIES[0], "--base", "--out-dir", str(tmp_path / "out"), "--ingest-url",
                 ingest.url, "--token", TOKEN, "--ship-timeout", "0.3"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_UNSHIPPED
    assert err.count("warning: the web app did not take the results within 0.3s") == 1
    assert "error: the web app did not take the results within 0.3s" in err
    assert len(json.loads((tmp_path / "out" / "done.json").read_text())["evaluated"]) == 2
    assert {p["step"] for p in read_points(run / ev.EVAL_SPOOL_DIR)} == {0, 4}
    assert not ingest.state.points


# --- user errors --------------------------------------------------------------------------
def run_main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    code = main(["eval-run", *map(str, args)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-run", "error: run directory {missing} does not exist"),
        ("not-a-run", "error: {tmp} is not a run directory (no config.json)"),
        ("unknown-step", "error: the run has no complete checkpoint at step 3; its "
                         "checkpoints' steps: 2, 4"),
        ("bad-steps", "error: --steps must be final, all, none or a comma list of "
                      "checkpoint steps (e.g. 20,40); got 'last'"),
        ("none-without-base", "error: --steps none chooses no checkpoint; add --base"),
        ("unknown-policy", "error: the run has no policy 'qwen'; its policies: llama-char, "
                           "gpt2-unigram"),
        ("missing-suite", "error: suite file {missing} does not exist"),
        ("no-token", "error: --ingest-url needs a run token (--token, MRL_INGEST_TOKEN or "),
        ("batch-size", "error: --batch-size must be >= 1; got 0"),
        ("out-dir-file", "error: --out-dir {tmp}/taken is a file; give a directory"),
        ("max-new-tokens", "error: cannot evaluate suite 'synthetic' on llama-char: "
                           "max_new_tokens=128 "
                           "leaves no room for a prompt: the model takes 128 positions"),
    ],
)  # fmt: skip
def test_bad_input_is_a_one_line_error(
    case: str,
    expected: str,
    run_dir: Path,
    suite_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MRL_INGEST_TOKEN", raising=False)
    missing = tmp_path / "nowhere"
    (tmp_path / "taken").write_text("")
    args: dict[str, Any] = {"--run-dir": run_dir, "--suite": suite_file,
                            "--out-dir": tmp_path / "out"}  # fmt: skip
    extra: list[str | Path] = []
    if case == "missing-run":
        args["--run-dir"] = missing
    elif case == "not-a-run":
        args["--run-dir"] = tmp_path
    elif case == "missing-suite":
        args["--suite"] = missing
    elif case == "out-dir-file":
        args["--out-dir"] = tmp_path / "taken"
    else:
        extra = {
            "unknown-step": ["--steps", "3"],
            "bad-steps": ["--steps", "last"],
            "none-without-base": ["--steps", "none"],
            "unknown-policy": ["--policy", "llama-char", "--policy", "qwen"],
            "no-token": ["--ingest-url", "http://127.0.0.1:9/api/v1/runs/7/ingest"],
            "batch-size": ["--batch-size", "0"],
            "max-new-tokens": ["--max-new-tokens", "128"],
        }[case]
    code, err = run_main(capsys, *(part for pair in args.items() for part in pair), *extra)
    assert code == 2
    assert err.startswith(expected.format(missing=missing, tmp=tmp_path)), err
    assert err.count("\n") == 1
    assert not (tmp_path / "out" / "done.json").exists()
    assert os.environ.get("MRL_INGEST_TOKEN") is None

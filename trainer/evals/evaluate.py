"""Evaluating a run's policies at its checkpoints on a suite, and spooling the results.

``python -m trainer eval`` (one policy of one checkpoint) and ``python -m trainer
eval-run`` (several policies and checkpoints of a run in one process) in
:mod:`trainer.cli` are plumbing around these functions:

* :func:`open_checkpoint` reads a checkpoint directory that :mod:`trainer.checkpoint`
  wrote (``<run_dir>/checkpoints/step_NNNNNN``, complete once ``state.json`` exists, or
  one policy's folder inside it). The step comes from ``state.json``, never from the
  user; the run directory's ``config.json`` says each policy's base model, tokenizer,
  dtype, chat template and response length.
* :func:`load_base_model` loads a policy's base model and tokenizer from the run
  config; :func:`load_checkpoint_weights` loads a checkpoint's weights over it (again
  and again: ``eval-run`` loads each policy's model once, then each checkpoint in
  turn); :func:`load_policy_model` does both.
* :func:`run_checkpoints`, :func:`select_checkpoints` and :func:`plan_evaluations` say
  what ``eval-run`` evaluates: for each chosen policy in pool order, its base model
  first (with ``--base``), then the chosen checkpoints in ascending step order.
* :func:`load_suite_items` reads every task file of a suite (all problems reported at
  once); :func:`evaluate_suite` scores them with :data:`trainer.evals.scoring.SCORERS`,
  batched. Generative tasks (math, exact match) see the prompt as the policy's rollouts
  and validation do (its chat template); multiple choice scores the plain
  ``"<question>\\nAnswer:"`` context, as lm-eval does without a chat template.
* :func:`eval_points` turns the results into metric points at the checkpoint's step:
  ``eval/<suite>/<task>/accuracy``, ``eval/<suite>/<task>/n`` and, for multiple choice,
  ``eval/<suite>/<task>/acc_norm`` (SPEC 9).

**Step 0 is the base model** (:data:`BASE_STEP`): the run config's model of a policy,
without any checkpoint's weights, is recorded at step 0, before any update (the
trainer's first update is step 1, and its checkpoints are at steps >= 1). Its results
file is ``<policy>-step000000.json`` and its points sit at step 0 on the run's curves.

**The spool** (:data:`EVAL_SPOOL_DIR`). Points go to ``<run_dir>/evals/metrics.jsonl``
through :class:`trainer.spool.Spool` before any network call, then
:class:`trainer.shipper.Shipper` ships that directory with its own cursor
(``<run_dir>/evals/ship_cursor.json``). Not the run's ``metrics.jsonl``: a resumed run
cuts its spool back to its last checkpoint's offsets, which would drop evaluation lines
appended after it, and the run's shipper keeps one cursor that an evaluation running
beside the training job would race. A re-run appends the same (policy, key, step)
points again and ships them; ingestion's idempotency makes that harmless, and what a
failed ship left behind is sent by the next evaluation or by ``python -m trainer ship
--run-dir <run_dir>/evals``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.chat import format_prompt
from trainer.checkpoint import CHECKPOINTS_DIR, STATE_FILE, load_weights, read_state
from trainer.config import ConfigError, PolicyConfig, RunConfig
from trainer.evals.scoring import SCORERS, TaskResult, prompt_budget
from trainer.evals.suite import ChoiceItem, SuiteConfig, load_task_items
from trainer.models import ModelSourceError, load_causal_lm, load_tokenizer
from trainer.run import CONFIG_FILE, policy_sources
from trainer.spool import Point, Spool, make_point
from trainer.tasks.base import Problem

BASE_STEP = 0
"""The step a policy's base model is recorded at (module docstring)."""
STEP_CHOICES = ("final", "all", "none")
"""The named ``--steps`` of ``eval-run`` (besides a comma list of steps)."""
EVAL_SPOOL_DIR = "evals"
"""The evaluation spool's directory inside the run directory (see the module docstring)."""
WEIGHTS_FILE = "model.safetensors"
TOKEN_FILE = ("job", "ingest-token")
"""Where the scheduler writes a run's ingest token (``scheduler.jobs.JobSpec.token_path``)."""


class EvalError(ValueError):
    """A problem the user can fix (a missing file, a directory that is not a
    checkpoint, an unknown policy); the message says which and how."""


# --- the checkpoint -------------------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint of a run: its directory, step, run and policies."""

    directory: Path
    step: int
    run_dir: Path
    config: RunConfig
    policies: tuple[str, ...]
    """The pool's policies whose weights the checkpoint holds, in pool order."""
    chosen: str | None = None
    """The policy whose folder was given instead of the step's directory."""

    def policy_config(self, name: str) -> PolicyConfig:
        return next(policy for policy in self.config.pool if policy.name == name)


def open_checkpoint(path: str | Path) -> Checkpoint:
    """The checkpoint at ``path`` (a ``step_NNNNNN`` directory, or one policy's folder in
    it); :class:`EvalError` says why it is not one."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise EvalError(f"checkpoint directory {path} does not exist")
    chosen = None
    if (path / WEIGHTS_FILE).is_file() and not (path / STATE_FILE).is_file():
        chosen, path = path.name, path.parent  # a policy's folder inside a checkpoint
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise EvalError(
            f"{path} is not a complete checkpoint (no {STATE_FILE}); give a "
            "<run_dir>/checkpoints/step_NNNNNN directory the trainer wrote"
        )
    try:
        step = read_state(state_file).step
    except (ValueError, KeyError, TypeError) as exc:
        raise EvalError(f"{state_file} is unreadable ({exc}); is it a trainer checkpoint?") from exc
    run_dir = path.parent.parent
    config_file = run_dir / CONFIG_FILE
    if path.parent.name != CHECKPOINTS_DIR or not config_file.is_file():
        raise EvalError(
            f"{path} is not inside a run directory (no {config_file}); evaluate a checkpoint "
            "where the trainer wrote it, <run_dir>/checkpoints/step_NNNNNN"
        )
    config = _run_config(config_file)
    policies = tuple(p.name for p in config.pool if (path / p.name / WEIGHTS_FILE).is_file())
    if not policies:
        raise EvalError(f"checkpoint {path} holds no policy weights ({WEIGHTS_FILE})")
    return Checkpoint(path, step, run_dir, config, policies, chosen)


def _run_config(config_file: Path) -> RunConfig:
    try:
        return RunConfig.from_file(config_file)
    except ConfigError as exc:
        raise EvalError(f"the run config {config_file} is invalid: {exc}") from exc


def open_run(run_dir: str | Path) -> RunConfig:
    """The config of the run in ``run_dir``; :class:`EvalError` says why it is not one."""
    run_dir = Path(run_dir).expanduser().resolve()
    if not run_dir.is_dir():
        raise EvalError(f"run directory {run_dir} does not exist")
    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        raise EvalError(
            f"{run_dir} is not a run directory (no {CONFIG_FILE}); give the --run-dir "
            "a `python -m trainer run` wrote"
        )
    return _run_config(config_file)


def run_checkpoints(run_dir: str | Path) -> list[Checkpoint]:
    """The run's complete checkpoints (``checkpoints/step_*/state.json``), by step;
    ones still being written (no ``state.json``) are left out."""
    directory = Path(run_dir).expanduser().resolve() / CHECKPOINTS_DIR
    found = [open_checkpoint(state.parent) for state in directory.glob(f"step_*/{STATE_FILE}")]
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def select_checkpoints(checkpoints: Sequence[Checkpoint], steps: str) -> list[Checkpoint]:
    """The checkpoints ``--steps`` names: ``final`` (the latest, none when there is
    none), ``all``, ``none``, or a comma list of steps that must all exist (else
    :class:`EvalError` listing the available steps). Ascending, each once."""
    spec = steps.strip().lower()
    if spec == "final":
        return list(checkpoints[-1:])
    if spec == "all":
        return list(checkpoints)
    if spec == "none":
        return []
    try:
        wanted = sorted({int(part) for part in spec.split(",")})
    except ValueError:
        raise EvalError(
            f"--steps must be {', '.join(STEP_CHOICES)} or a comma list of checkpoint "
            f"steps (e.g. 20,40); got {steps!r}"
        ) from None
    by_step = {checkpoint.step: checkpoint for checkpoint in checkpoints}
    missing = [step for step in wanted if step not in by_step]
    if missing:
        available = ", ".join(str(step) for step in by_step) or "none"
        raise EvalError(
            f"the run has no complete checkpoint at step {', '.join(map(str, missing))}; "
            f"its checkpoints' steps: {available}"
        )
    return [by_step[step] for step in wanted]


@dataclass(frozen=True)
class Evaluation:
    """One unit of ``eval-run``: a policy at a checkpoint, or its base model."""

    policy: str
    step: int
    checkpoint: Checkpoint | None
    """None: the base model, recorded at :data:`BASE_STEP`."""

    @property
    def file_name(self) -> str:
        """Its results file in the output directory: ``<policy>-step<NNNNNN>.json``."""
        return f"{self.policy}-step{self.step:06d}.json"


def plan_evaluations(
    run_dir: str | Path,
    *,
    steps: str = "final",
    policies: Sequence[str] | None = None,
    base: bool = False,
) -> tuple[RunConfig, list[Evaluation]]:
    """The run's config and what to evaluate of it, in order: policies in pool order
    (``policies``: default all), each with its base model first (``base``), then the
    checkpoints ``steps`` names (:func:`select_checkpoints`) in step order.

    :class:`EvalError` for a directory that is not a run, an unknown step or policy, a
    checkpoint without a chosen policy's weights, or nothing to evaluate."""
    run_dir = Path(run_dir).expanduser().resolve()
    config = open_run(run_dir)
    available = run_checkpoints(run_dir)
    checkpoints = select_checkpoints(available, steps)
    if not checkpoints and not base:
        if available:
            raise EvalError(
                f"--steps {steps} chooses no checkpoint; add --base to evaluate the base "
                "models alone"
            )
        raise EvalError(
            f"{run_dir} has no complete checkpoint ({CHECKPOINTS_DIR}/step_*/{STATE_FILE}); "
            "add --base to evaluate the base models alone"
        )
    pool = [policy.name for policy in config.pool]
    unknown = [name for name in policies or () if name not in pool]
    if unknown:
        raise EvalError(
            f"the run has no policy {', '.join(map(repr, unknown))}; its policies: "
            + ", ".join(pool)
        )
    chosen = [name for name in pool if not policies or name in policies]
    for checkpoint in checkpoints:
        lacking = [name for name in chosen if name not in checkpoint.policies]
        if lacking:
            raise EvalError(
                f"checkpoint {checkpoint.directory} holds no weights of "
                f"{', '.join(map(repr, lacking))}; its policies: {', '.join(checkpoint.policies)}"
            )
    units: list[Checkpoint | None] = [None] if base else []
    units.extend(checkpoints)
    return config, [
        Evaluation(name, BASE_STEP if checkpoint is None else checkpoint.step, checkpoint)
        for name in chosen
        for checkpoint in units
    ]


def pick_policy(checkpoint: Checkpoint, name: str | None) -> str:
    """The policy to evaluate: ``name``, the folder given, or the only one; otherwise
    :class:`EvalError` listing the checkpoint's policies."""
    known = ", ".join(checkpoint.policies)
    wanted = name or checkpoint.chosen
    if wanted is None:
        if len(checkpoint.policies) == 1:
            return checkpoint.policies[0]
        raise EvalError(
            f"checkpoint {checkpoint.directory} holds {len(checkpoint.policies)} policies; "
            f"choose one with --policy: {known}"
        )
    if wanted not in checkpoint.policies:
        raise EvalError(
            f"checkpoint {checkpoint.directory} holds no policy {wanted!r}; its policies: {known}"
        )
    if name and checkpoint.chosen and name != checkpoint.chosen:
        raise EvalError(
            f"--policy {name!r} differs from the checkpoint folder given ({checkpoint.chosen!r})"
        )
    return wanted


def load_base_model(
    config: PolicyConfig, *, zoo_dir: Path | None = None, device: str = "cpu"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a policy's base model (the run config's model,
    tokenizer and dtype), on ``device``, in eval mode."""
    try:
        model_dir, tokenizer_dir = policy_sources(config, zoo_dir)
    except ModelSourceError as exc:
        raise EvalError(f"cannot load {config.name}'s base model: {exc}") from exc
    tokenizer = load_tokenizer(tokenizer_dir)
    model = load_causal_lm(model_dir, config.dtype)
    return model.to(device).eval(), tokenizer


def load_checkpoint_weights(model: Any, checkpoint: Checkpoint, policy: str) -> None:
    """Load ``policy``'s weights at ``checkpoint`` over ``model`` (every tensor of it)."""
    path = checkpoint.directory / policy / WEIGHTS_FILE
    try:
        load_weights(path, model)
    except RuntimeError as exc:
        model_name = checkpoint.policy_config(policy).model
        raise EvalError(f"the checkpoint's weights do not fit {model_name}: {exc}") from exc
    model.eval()


def load_policy_model(
    checkpoint: Checkpoint, policy: str, *, zoo_dir: Path | None = None, device: str = "cpu"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``policy`` at the checkpoint: the run config's base
    model and tokenizer, with the checkpoint's weights loaded over the model."""
    model, tokenizer = load_base_model(
        checkpoint.policy_config(policy), zoo_dir=zoo_dir, device=device
    )
    load_checkpoint_weights(model, checkpoint, policy)
    return model, tokenizer


def check_generation_fits(
    config: PolicyConfig, suite: SuiteConfig, max_new_tokens: int, *, zoo_dir: Path | None
) -> None:
    """:class:`EvalError` when the suite generates and ``max_new_tokens`` leaves no room
    for a prompt in the window of the policy's model (read from its config alone, before
    loading it; :func:`trainer.evals.scoring.prompt_budget`)."""
    if all(task.type == "multiple_choice" for task in suite.tasks):
        return
    from transformers import AutoConfig

    try:
        model_dir, _ = policy_sources(config, zoo_dir)
    except ModelSourceError as exc:
        raise EvalError(f"cannot load {config.name}'s base model: {exc}") from exc
    try:
        model_config = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
        prompt_budget(model_config, max_new_tokens)
    except ValueError as exc:
        raise EvalError(f"cannot evaluate suite {suite.name!r} on {config.name}: {exc}") from exc


# --- the suite ------------------------------------------------------------------------------
TaskItems = list[Problem] | list[ChoiceItem]


def load_suite(path: str | Path) -> SuiteConfig:
    """The suite in ``path`` (relative task paths against its directory); a missing file
    or one that is no regular file (``/dev/zero``, a FIFO, a directory: never opened, as
    reading one may not end) is an :class:`EvalError`, a bad one a :class:`ConfigError`
    naming the fields."""
    path = Path(path)
    if not path.exists():
        raise EvalError(f"suite file {path} does not exist")
    if not path.is_file():
        raise EvalError(f"suite file {path} is not a regular file; give a suite JSON file")
    return SuiteConfig.from_file(path)


def load_suite_items(suite: SuiteConfig) -> dict[str, TaskItems]:
    """Every task's items, by task name; :class:`EvalError` lists every task whose file
    is missing or does not parse."""
    items: dict[str, TaskItems] = {}
    problems: list[str] = []
    for task in suite.tasks:
        try:
            items[task.name] = load_task_items(task)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"task {task.name!r} ({task.type}): {exc}")
    if problems:
        raise EvalError(f"cannot read suite {suite.name!r}: " + "; ".join(problems))
    return items


def evaluate_suite(
    model: Any,
    tokenizer: Any,
    suite: SuiteConfig,
    items: Mapping[str, TaskItems],
    *,
    chat_template: str | None = None,
    max_new_tokens: int = 16,
    batch_size: int = 16,
) -> dict[str, TaskResult]:
    """Each task's :class:`TaskResult`, in suite order (module docstring: prompts)."""
    policy_prompt = functools.partial(format_prompt, tokenizer, chat_template=chat_template)
    results: dict[str, TaskResult] = {}
    for task in suite.tasks:
        scorer = SCORERS[task.type]
        if task.type == "multiple_choice":
            results[task.name] = scorer(model, tokenizer, items[task.name], batch_size=batch_size)
        else:
            results[task.name] = scorer(
                model,
                tokenizer,
                items[task.name],
                format_prompt=policy_prompt,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
            )
    return results


# --- results --------------------------------------------------------------------------------
def results_json(
    suite: SuiteConfig, policy: str, step: int, results: Mapping[str, TaskResult]
) -> dict[str, Any]:
    """The ``--out`` document: ``{"suite", "policy", "step", "tasks": {name: {"type",
    "accuracy", "n"[, "acc_norm"], "truncated"}}}`` (``truncated``: items cut from the
    left to fit the model, :mod:`trainer.evals.scoring`)."""
    tasks: dict[str, dict[str, Any]] = {}
    for task in suite.tasks:
        metrics = results[task.name].metrics
        entry: dict[str, Any] = {
            "type": task.type,
            "accuracy": metrics["accuracy"],
            "n": int(metrics["n"]),
        }
        if task.type == "multiple_choice":
            entry["acc_norm"] = metrics["acc_norm"]
        entry["truncated"] = int(metrics.get("truncated", 0))
        tasks[task.name] = entry
    return {"suite": suite.name, "policy": policy, "step": step, "tasks": tasks}


def task_metrics(suite: str, task: str, metrics: Mapping[str, float]) -> dict[str, float]:
    """One task's metric keys and values (SPEC 9's ``eval/<suite>/<task>/...``)."""
    keyed = {
        f"eval/{suite}/{task}/accuracy": metrics["accuracy"],
        f"eval/{suite}/{task}/n": metrics["n"],
    }
    if "acc_norm" in metrics:
        keyed[f"eval/{suite}/{task}/acc_norm"] = metrics["acc_norm"]
    return keyed


def eval_points(
    suite: SuiteConfig,
    policy: str,
    step: int,
    results: Mapping[str, TaskResult],
    *,
    wall_time: float | None = None,
) -> list[Point]:
    """The results as metric points of ``policy`` at ``step``, validated for the wire."""
    now = time.time() if wall_time is None else wall_time
    return [
        make_point(policy, key, step, value, wall_time=now)
        for task in suite.tasks
        for key, value in task_metrics(suite.name, task.name, results[task.name].metrics).items()
    ]


def spool_points(run_dir: Path, points: Sequence[Point]) -> Path:
    """Append ``points`` to the run's evaluation spool, durably; its directory."""
    directory = Path(run_dir) / EVAL_SPOOL_DIR
    with Spool(directory) as spool:
        spool.append_points(points)
        spool.sync()
    return directory


def run_token(run_dir: Path, given: str | None) -> str | None:
    """The ingest token: ``given`` (flag or environment), else the run's token file."""
    if given:
        return given
    path = Path(run_dir).joinpath(*TOKEN_FILE)
    try:
        return path.read_text().strip() or None
    except OSError:
        return None

"""Write-side operations on labs, experiments and runs. Views and tasks call these.

Run tokens: a run's ingestion token is ``mrl_`` + 43 random URL-safe characters. It is
shown once (returned by :func:`run_token_issue`); only its SHA-256 is stored, and
issuing a new one revokes the old one.
"""

from __future__ import annotations

import copy
import hashlib
import re
import secrets
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from trainer.config import ConfigError, RunConfig
from webapp.core.models import Lab
from webapp.core.services import lab_for_user
from webapp.registry.models import EvalSuite
from webapp.registry.task_data import task_data_problems
from webapp.runs.models import Experiment, Run, RunStateChange, Sweep, Tag

TOKEN_PREFIX = "mrl_"

# Which state may follow which; the scheduler drives these. A run's own status reports
# move it too (running -> completed), also for a run started by hand with its token
# (draft/queued -> running).
TRANSITIONS: dict[str, frozenset[str]] = {
    Run.State.DRAFT: frozenset({Run.State.QUEUED, Run.State.RUNNING, Run.State.CANCELLED}),
    Run.State.QUEUED: frozenset(
        {Run.State.SUBMITTED, Run.State.RUNNING, Run.State.FAILED, Run.State.CANCELLED}
    ),
    Run.State.SUBMITTED: frozenset(
        {Run.State.PENDING, Run.State.RUNNING, Run.State.COMPLETING, Run.State.COMPLETED}
        | {Run.State.FAILED, Run.State.CANCELLED}
    ),
    Run.State.PENDING: frozenset(
        {Run.State.RUNNING, Run.State.COMPLETING, Run.State.COMPLETED}
        | {Run.State.FAILED, Run.State.CANCELLED}
    ),
    Run.State.RUNNING: frozenset(
        {Run.State.PENDING, Run.State.COMPLETING, Run.State.COMPLETED}
        | {Run.State.FAILED, Run.State.CANCELLED}
    ),
    Run.State.COMPLETING: frozenset(
        {Run.State.COMPLETED, Run.State.FAILED, Run.State.CANCELLED, Run.State.PENDING}
    ),
    # A finished run can be resubmitted (resume from its last checkpoint).
    Run.State.COMPLETED: frozenset({Run.State.QUEUED}),
    Run.State.FAILED: frozenset({Run.State.QUEUED}),
    Run.State.CANCELLED: frozenset({Run.State.QUEUED}),
}
_TIMESTAMP_OF_STATE = {
    Run.State.QUEUED: "queued_at",
    Run.State.SUBMITTED: "submitted_at",
    Run.State.RUNNING: "started_at",
    Run.State.COMPLETED: "finished_at",
    Run.State.FAILED: "finished_at",
    Run.State.CANCELLED: "finished_at",
}


class TransitionError(ValueError):
    """A state change the state machine does not allow."""


# --- labs ----------------------------------------------------------------------------
def tags_resolve(lab: Lab, names: Iterable[str]) -> list[Tag]:
    return [Tag.objects.get_or_create(lab=lab, name=name)[0] for name in names if name]


# --- experiments ---------------------------------------------------------------------
def experiment_create(
    *,
    owner: AbstractBaseUser,
    config: dict[str, Any],
    seeds: list[int],
    resources: dict[str, Any] | None = None,
    description: str = "",
    notes: str = "",
    tags: Iterable[str] = (),
    lab: Lab | None = None,
    cloned_from: Experiment | None = None,
    auto_eval_suite: EvalSuite | None = None,
) -> Experiment:
    """Store a validated experiment. ``config`` must pass ``RunConfig.from_dict``."""
    run_config = RunConfig.from_dict(config)  # raises ConfigError
    lab = lab or lab_for_user(owner)
    with transaction.atomic():
        experiment = Experiment.objects.create(
            lab=lab,
            owner=owner,
            name=run_config.name,
            description=description,
            regime=run_config.regime,
            off_policy=run_config.off_policy,
            config=run_config.to_dict(),
            seeds=list(seeds),
            resources=dict(resources or {}),
            notes=notes,
            cloned_from=cloned_from,
            auto_eval_suite=auto_eval_suite,
        )
        experiment.tags.set(tags_resolve(lab, tags))
    return experiment


def experiment_update(
    experiment: Experiment,
    *,
    config: dict[str, Any],
    seeds: list[int],
    resources: dict[str, Any] | None = None,
    description: str | None = None,
    notes: str | None = None,
    tags: Iterable[str] | None = None,
) -> Experiment:
    run_config = RunConfig.from_dict(config)
    experiment.name = run_config.name
    experiment.regime = run_config.regime
    experiment.off_policy = run_config.off_policy
    experiment.config = run_config.to_dict()
    experiment.seeds = list(seeds)
    if resources is not None:
        experiment.resources = dict(resources)
    if description is not None:
        experiment.description = description
    if notes is not None:
        experiment.notes = notes
    with transaction.atomic():
        experiment.save()
        if tags is not None:
            experiment.tags.set(tags_resolve(experiment.lab, tags))
    return experiment


def experiment_clone(experiment: Experiment, *, owner: AbstractBaseUser) -> Experiment:
    """A new draft experiment with the same pool, regime and settings, owned by ``owner``."""
    config = copy.deepcopy(experiment.config)
    config["name"] = copy_name(experiment.name)
    return experiment_create(
        owner=owner,
        config=config,
        seeds=list(experiment.seeds),
        resources=copy.deepcopy(experiment.resources),
        description=experiment.description,
        tags=[tag.name for tag in experiment.tags.all()],
        lab=experiment.lab,
        cloned_from=experiment,
        auto_eval_suite=experiment.auto_eval_suite,
    )


def experiment_auto_eval_set(experiment: Experiment, suite: EvalSuite | None) -> None:
    """Evaluate each run of ``experiment`` on ``suite`` when it completes (None: don't);
    beat's ``evaluations_sync`` queues the evaluations (:mod:`scheduler.evaluations`)."""
    experiment.auto_eval_suite = suite
    experiment.save(update_fields=["auto_eval_suite", "updated_at"])


def copy_name(name: str) -> str:
    """The name of a clone of ``name`` (still a valid, <= 64-character name)."""
    stem = name[: 64 - len("-copy")]
    return f"{stem}-copy"


# --- sweeps --------------------------------------------------------------------------
MAX_SWEEP_RUNS = 64


class SweepError(ValueError):
    """A sweep that cannot be built; ``field`` names the form field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def config_set(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``config`` with the dotted ``path`` (e.g. ``grpo.kl_coef``) set; a
    missing section is created (a regime's section, absent from the configs of other
    regimes: ``sgt.lambda_sgt`` swept over a standalone source)."""
    result = copy.deepcopy(config)
    *parents, leaf = path.split(".")
    node = result
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return result


def sweep_cell_name(sweep_name: str, regime: str, path: str, value: Any) -> str:
    """``<sweep>-<regime>[-<leaf><value>]``, cut to a valid 64-character name."""
    name = f"{sweep_name}-{regime}"
    if path:
        text = re.sub(r"[^A-Za-z0-9_.-]", "", f"{path.rsplit('.', 1)[-1]}{value}")
        name += f"-{text}"
    return name[:64]


def sweep_create(
    *,
    owner: AbstractBaseUser,
    source: Experiment,
    name: str,
    regimes: list[str],
    seeds: list[int],
    param_path: str = "",
    param_values: list[Any] | None = None,
    description: str = "",
) -> Sweep:
    """One experiment per (regime x parameter value) over ``source``'s pool and settings,
    each with every seed (``scheduler.launch.sweep_launch`` launches them). Every cell's
    config is validated before anything is stored: a bad cell raises :class:`SweepError`
    (or ``ConfigError``) and stores nothing. The task's data paths, copied from
    ``source``, are checked again (the files may have gone, or the experiment was saved
    before the checks)."""
    source_config = source.config if isinstance(source.config, dict) else {}
    problems = task_data_problems(source_config.get("task"))
    if problems:
        raise ConfigError(
            {
                path: f"{message} (the sweep copies experiment {source.name}'s task: edit "
                "that experiment first)"
                for path, message in problems.items()
            }
        )
    values: list[Any] = list(param_values or []) if param_path else [None]
    if param_path and not values:
        raise SweepError("param_values", "give at least one value for the swept parameter")
    total = len(regimes) * len(values) * len(seeds)
    if total > MAX_SWEEP_RUNS:
        raise SweepError("seeds", f"the grid has {total} runs; at most {MAX_SWEEP_RUNS} per sweep")
    cells = []
    for regime in regimes:
        for value in values:
            config = copy.deepcopy(source.config)
            config["regime"] = regime
            if param_path:
                try:
                    config = config_set(config, param_path, value)
                except (KeyError, TypeError) as exc:
                    raise SweepError("param_path", f"no config field {param_path!r}") from exc
            config["name"] = sweep_cell_name(name, regime, param_path, value)
            cells.append(RunConfig.from_dict(config).to_dict())  # raises ConfigError
    with transaction.atomic():
        sweep = Sweep.objects.create(
            lab=source.lab,
            owner=owner,
            name=name,
            description=description,
            regimes=list(regimes),
            seeds=list(seeds),
            param_path=param_path,
            param_values=values if param_path else [],
            source=source,
        )
        for config in cells:
            experiment = experiment_create(
                owner=owner,
                config=config,
                seeds=seeds,
                resources=copy.deepcopy(source.resources),
                description=f"Sweep {name}: {description}".strip(": "),
                lab=source.lab,
                tags=["sweep", name],
                auto_eval_suite=source.auto_eval_suite,
            )
            experiment.sweep = sweep
            experiment.save(update_fields=["sweep"])
    return sweep


# --- runs ----------------------------------------------------------------------------
def run_config_for_seed(experiment: Experiment, seed: int, launch: int = 1) -> dict[str, Any]:
    """The exact trainer JSON of one run: the experiment's config with this seed, named
    for the seed and (from the second on) for which launch of that seed it is."""
    config = copy.deepcopy(experiment.config)
    config["seed"] = seed
    config["name"] = run_name(experiment.name, seed, launch)
    return RunConfig.from_dict(config).to_dict()


def run_name(experiment_name: str, seed: int, launch: int = 1) -> str:
    """``<experiment>-s<seed>`` for a seed's first run, ``<experiment>-s<seed>-launch<n>``
    for its n-th (a relaunch), cut to a valid 64-character name."""
    suffix = f"-s{seed}" + (f"-launch{launch}" if launch > 1 else "")
    return experiment_name[: 64 - len(suffix)] + suffix


def runs_create(experiment: Experiment, *, state: str = Run.State.DRAFT) -> list[Run]:
    """One run per seed of ``experiment``, in ``state`` (draft, or queued to launch). A
    relaunch's runs get names of their own (:func:`run_name`): the n-th run of a seed is
    its n-th launch, and a name already taken moves on to the next number."""
    now = timezone.now()
    runs = []
    with transaction.atomic():
        # Locks the experiment's row: two launches at once number their runs in turn.
        Experiment.objects.select_for_update().filter(pk=experiment.pk).first()
        taken = set(experiment.runs.values_list("name", flat=True))
        per_seed = Counter(experiment.runs.values_list("seed", flat=True))
        for seed in experiment.seeds:
            launch = per_seed[seed] + 1
            while run_name(experiment.name, seed, launch) in taken:
                launch += 1
            config = run_config_for_seed(experiment, seed, launch)
            taken.add(config["name"])
            per_seed[seed] = launch
            runs.append(
                Run.objects.create(
                    experiment=experiment,
                    name=config["name"],
                    seed=seed,
                    regime=experiment.regime,
                    off_policy=experiment.off_policy,
                    config=config,
                    state=state,
                    queued_at=now if state == Run.State.QUEUED else None,
                    backend=str(experiment.resources.get("backend", "")),
                )
            )
            RunStateChange.objects.create(run=runs[-1], state=state, at=now)
    return runs


def run_transition(run: Run, new_state: str, **facts: Any) -> bool:
    """Move ``run`` to ``new_state`` if its current state allows it; set ``facts`` too.

    Conditional on the state read (``UPDATE ... WHERE state = old``), so two workers racing
    on the same run cannot both move it. Returns False when the run's state changed
    underneath (the caller lost the race); raises :class:`TransitionError` when the state
    machine forbids the move.
    """
    old_state = run.state
    if new_state == old_state:
        updated = Run.objects.filter(pk=run.pk, state=old_state).update(
            updated_at=timezone.now(), **facts
        )
        _refresh(run, facts)
        return updated == 1
    if new_state not in TRANSITIONS.get(old_state, frozenset()):
        raise TransitionError(f"a {old_state} run cannot become {new_state}")
    now = timezone.now()
    changes: dict[str, Any] = {"state": new_state, "updated_at": now, **facts}
    timestamp = _TIMESTAMP_OF_STATE.get(new_state)
    if timestamp and timestamp not in facts:
        changes[timestamp] = now
    if new_state == Run.State.QUEUED:  # resubmission: a fresh lifecycle
        changes.update(finished_at=None, exit_code=None, failure_reason="")
    with transaction.atomic():
        updated = Run.objects.filter(pk=run.pk, state=old_state).update(**changes)
        if updated:
            note = str(facts.get("failure_reason") or facts.get("status_message") or "")
            RunStateChange.objects.create(run=run, state=new_state, at=now, note=note[:500])
    if updated:
        _refresh(run, changes)
    return updated == 1


def _refresh(run: Run, changes: dict[str, Any]) -> None:
    for name, value in changes.items():
        setattr(run, name, value)


# --- run tokens ----------------------------------------------------------------------
def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def run_token_issue(run: Run) -> str:
    """A new ingestion token for ``run`` (the old one stops working). Shown once."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    Run.objects.filter(pk=run.pk).update(
        token_hash=token_hash(token), token_created_at=timezone.now()
    )
    run.token_hash = token_hash(token)
    return token


def run_token_revoke(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(token_hash="", token_created_at=None)
    run.token_hash = ""


def run_for_token(token: str) -> Run | None:
    """The run whose token this is, or None (no, or a revoked, token)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    return Run.objects.filter(token_hash=token_hash(token)).first()

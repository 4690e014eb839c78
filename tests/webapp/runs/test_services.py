"""Services: experiments, runs and their state machine, run tokens."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied

from scheduler.launch import experiment_launch
from tests.conftest import pool_config
from trainer.config import ConfigError, RunConfig
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db


def test_experiment_create_stores_the_exact_trainer_json(alice: User) -> None:
    config = pool_config()
    experiment = services.experiment_create(owner=alice, config=config, seeds=[0, 1], tags=["a"])
    assert experiment.config == RunConfig.from_dict(config).to_dict()
    assert experiment.regime == "sgt" and experiment.name == "sgt-trio"
    assert experiment.lab == alice.lab_memberships.get().lab
    assert [tag.name for tag in experiment.tags.all()] == ["a"]


def test_experiment_create_rejects_an_invalid_config(alice: User) -> None:
    with pytest.raises(ConfigError) as error:
        services.experiment_create(owner=alice, config=pool_config(regime="nope"), seeds=[0])
    assert "regime" in error.value.errors
    assert not Experiment.objects.exists()


def test_a_user_outside_every_lab_cannot_create(db: None) -> None:
    loner = User.objects.create_user("loner")
    with pytest.raises(PermissionDenied, match="not a member of any lab"):
        services.experiment_create(owner=loner, config=pool_config(), seeds=[0])


def test_runs_get_one_exact_config_per_seed(make_experiment: Callable[..., Experiment]) -> None:
    experiment = make_experiment(seeds=(3, 7))
    runs = experiment_launch(experiment)
    assert [(run.seed, run.state) for run in runs] == [(3, "queued"), (7, "queued")]
    for run in runs:
        assert run.config["seed"] == run.seed
        assert run.config["name"] == run.name == f"sgt-trio-s{run.seed}"
        assert RunConfig.from_dict(run.config).to_dict() == run.config
        assert run.queued_at is not None


def test_clone_is_a_new_draft_of_the_cloner(
    make_experiment: Callable[..., Experiment], bob: User
) -> None:
    original = make_experiment()
    experiment_launch(original)
    clone = services.experiment_clone(original, owner=bob)
    assert clone.pk != original.pk and clone.owner == bob and clone.cloned_from == original
    assert clone.name == "sgt-trio-copy"
    assert clone.config["pool"] == original.config["pool"]
    assert clone.runs.count() == 0


def test_transitions_follow_the_state_machine(make_experiment: Callable[..., Experiment]) -> None:
    run = experiment_launch(make_experiment(seeds=(0,)))[0]
    assert services.run_transition(run, Run.State.SUBMITTED, slurm_job_id="42")
    assert services.run_transition(run, Run.State.RUNNING, node="vm")
    assert services.run_transition(run, Run.State.COMPLETED, exit_code=0)
    run.refresh_from_db()
    assert (run.state, run.slurm_job_id, run.node, run.exit_code) == ("completed", "42", "vm", 0)
    assert run.submitted_at and run.started_at and run.finished_at
    with pytest.raises(services.TransitionError, match="a completed run cannot become running"):
        services.run_transition(run, Run.State.RUNNING)
    # A resubmission starts a fresh lifecycle.
    assert services.run_transition(run, Run.State.QUEUED)
    run.refresh_from_db()
    assert run.finished_at is None and run.exit_code is None


def test_a_transition_loses_to_a_concurrent_one(make_experiment: Callable[..., Experiment]) -> None:
    run = experiment_launch(make_experiment(seeds=(0,)))[0]
    stale = Run.objects.get(pk=run.pk)
    assert services.run_transition(run, Run.State.SUBMITTED)
    # ``stale`` still believes the run is queued: its conditional update matches nothing.
    assert not services.run_transition(stale, Run.State.SUBMITTED)
    assert Run.objects.filter(state=Run.State.SUBMITTED).count() == 1


def test_tokens_are_hashed_replaceable_and_revocable(
    make_experiment: Callable[..., Experiment],
) -> None:
    run = experiment_launch(make_experiment(seeds=(0,)))[0]
    token = services.run_token_issue(run)
    run.refresh_from_db()
    assert token.startswith("mrl_") and len(token) > 40
    assert token not in run.token_hash and run.token_hash == services.token_hash(token)
    assert services.run_for_token(token) == run
    newer = services.run_token_issue(run)
    assert services.run_for_token(token) is None
    assert services.run_for_token(newer) == run
    services.run_token_revoke(run)
    assert services.run_for_token(newer) is None
    assert services.run_for_token("") is None
    assert services.run_for_token("mrl_" + "x" * 500) is None

"""What the lab ran: experiments (the form's result), their runs, sweeps and tags.

- :class:`Experiment`: a policy pool + regime + hyperparameters + seeds + resources. Its
  ``config`` is the exact trainer JSON (``trainer.config.RunConfig``) minus the seed.
- :class:`Run`: one experiment x one seed (x one regime for sweeps); its ``config`` is the
  exact JSON the job reads. Carries the state machine and the Slurm facts.
- :class:`RunStateChange`: the run's timeline.
- :class:`Sweep`: a grid launched from one form.

The tables keep the names they had in the ``experiments`` app (``experiments_*``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from trainer.declarations import REGIME_NAME_MAX_LENGTH
from webapp.core.models import NAME_VALIDATOR, Lab, LabOwned
from webapp.registry.models import EvalSuite


class Tag(models.Model):
    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=48, validators=[NAME_VALIDATOR])

    class Meta:
        db_table = "experiments_tag"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["lab", "name"], name="tag_unique_name")]

    def __str__(self) -> str:
        return self.name


class Sweep(LabOwned, models.Model):
    """A grid launched from one form: regimes x seeds (x one hyperparameter's values)
    over the same pool; one experiment per grid cell, one run per seed."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="sweeps")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sweeps"
    )
    name = models.CharField(max_length=48, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    regimes = models.JSONField(help_text="Sharing regimes of the grid")
    seeds = models.JSONField(help_text="Seeds of every cell")
    param_path = models.CharField(
        max_length=64, blank=True, help_text="Optional dotted config path swept, e.g. grpo.kl_coef"
    )
    param_values = models.JSONField(default=list, blank=True)
    source = models.ForeignKey(
        "Experiment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "experiments_sweep"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("compare:sweep_detail", args=[self.pk])


class Experiment(LabOwned, models.Model):
    """A pool, a regime, hyperparameters, seeds and resources: the form's result."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="experiments")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments"
    )
    name = models.CharField(max_length=64, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    regime = models.CharField(max_length=REGIME_NAME_MAX_LENGTH, db_index=True)
    off_policy = models.CharField(max_length=16, default="none")
    config = models.JSONField(help_text="Trainer JSON (trainer.config.RunConfig); seed varies")
    seeds = models.JSONField(default=list, help_text="One run per seed")
    resources = models.JSONField(
        default=dict, help_text="backend, partition, gpus, cpus_per_gpu, mem_gb, time_limit..."
    )
    tags = models.ManyToManyField(
        Tag, blank=True, related_name="experiments", db_table="experiments_experiment_tags"
    )
    notes = models.TextField(blank=True)
    auto_eval_suite = models.ForeignKey(
        EvalSuite,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="auto_experiments",
        help_text="Evaluate each run's base models and final checkpoint on this suite when "
        "the run completes",
    )
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    sweep = models.ForeignKey(
        Sweep, null=True, blank=True, on_delete=models.CASCADE, related_name="experiments"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "experiments_experiment"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("dashboard:experiment_detail", args=[self.pk])

    @property
    def policy_names(self) -> list[str]:
        return [policy.get("name", "?") for policy in self.config.get("pool", [])]


class Run(models.Model):
    """One experiment x one seed: one Slurm job (or one local process group)."""

    class State(models.TextChoices):
        DRAFT = "draft"
        QUEUED = "queued"
        SUBMITTED = "submitted"
        PENDING = "pending"
        RUNNING = "running"
        COMPLETING = "completing"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    TERMINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=64, validators=[NAME_VALIDATOR])
    seed = models.IntegerField()
    regime = models.CharField(max_length=REGIME_NAME_MAX_LENGTH, db_index=True)
    off_policy = models.CharField(max_length=16, default="none")
    config = models.JSONField(help_text="The exact trainer JSON the job reads")
    state = models.CharField(
        max_length=16, choices=State.choices, default=State.DRAFT, db_index=True
    )
    status_message = models.CharField(max_length=500, blank=True)
    last_step = models.IntegerField(null=True, blank=True)
    series_packed = models.BooleanField(
        default=False,
        help_text="every series of this finished run has its SeriesPack (a hint for "
        "the beat's packing sweep; ingestion clears it when it writes new points)",
    )
    backend = models.CharField(max_length=16, blank=True, help_text="local or slurm")
    slurm_job_id = models.CharField(max_length=32, blank=True, db_index=True)
    node = models.CharField(max_length=255, blank=True)
    worker_nodes = models.JSONField(
        default=dict,
        blank=True,
        help_text="policy -> the node its worker ran on (the workers' own records in the "
        "run directory, read by the status sync)",
    )
    exit_code = models.IntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    run_dir = models.CharField(max_length=1000, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    token_created_at = models.DateTimeField(null=True, blank=True)
    tags = models.ManyToManyField(
        Tag, blank=True, related_name="runs", db_table="experiments_run_tags"
    )
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    pace_step = models.IntegerField(
        null=True,
        blank=True,
        help_text="the first trained step this job reported (ingestion sets it): the list "
        "pages' step rate counts from it, so the start-up step leaves the ETA out",
    )
    pace_at = models.DateTimeField(
        null=True, blank=True, help_text="when ingestion stored pace_step"
    )

    class Meta:
        db_table = "experiments_run"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    def get_absolute_url(self) -> str:
        return reverse("dashboard:run_detail", args=[self.pk])

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

    @property
    def access_lab_id(self) -> int:
        """The lab whose members see this run: its experiment's."""
        return self.experiment.lab_id

    @property
    def access_owner_id(self) -> int:
        """Who changes this run: its experiment's owner."""
        return self.experiment.owner_id

    @property
    def policy_names(self) -> list[str]:
        return [policy.get("name", "?") for policy in self.config.get("pool", [])]

    @property
    def worker_nodes_text(self) -> str:
        """Where each policy ran, in pool order: ``"a on node1, b on node2"``; ``""``
        before any worker has said."""
        nodes = self.worker_nodes or {}
        return ", ".join(f"{name} on {nodes[name]}" for name in self.policy_names if name in nodes)


class RunStateChange(models.Model):
    """One step of a run's life: the state it entered and when (the run page's timeline)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="state_changes")
    state = models.CharField(max_length=16, choices=Run.State.choices)
    at = models.DateTimeField()
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        db_table = "experiments_runstatechange"
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.run_id} -> {self.state} at {self.at:%H:%M:%S}"

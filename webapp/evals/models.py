"""Evaluation jobs: a suite on checkpoints of a run (and its base models); the results
are the run's ``eval/<suite>/<task>/...`` metric series.

The table keeps the name it had in the ``experiments`` app (``experiments_evaluation``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.registry.models import EvalSuite
from webapp.runs.models import Run


class Evaluation(models.Model):
    """One evaluation job: a suite on chosen checkpoints of a run, and optionally the
    pool's base models (recorded at step 0). It runs on the run's backend like a training
    job (:mod:`scheduler.evaluations`); its results arrive through the ingestion API as the
    run's ``eval/...`` series, so they are stored like every other metric."""

    class State(models.TextChoices):
        QUEUED = "queued"
        SUBMITTED = "submitted"
        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    TERMINAL_STATES = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="evaluations")
    suite = models.ForeignKey(
        EvalSuite, null=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    suite_config = models.JSONField(help_text="The suite as it was when the job was queued")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="evaluations"
    )
    steps = models.CharField(
        max_length=200, default="final", help_text="final | all | N[,N...] (checkpoints)"
    )
    include_base = models.BooleanField(default=True, help_text="also the base models, at step 0")
    automatic = models.BooleanField(default=False, help_text="queued by the run's completion")
    state = models.CharField(
        max_length=16, choices=State.choices, default=State.QUEUED, db_index=True
    )
    backend = models.CharField(max_length=16, blank=True)
    job_id = models.CharField(max_length=32, blank=True)
    node = models.CharField(max_length=255, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "experiments_evaluation"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of run {self.run_id} on {self.suite_name}"

    @property
    def suite_name(self) -> str:
        return str(self.suite_config.get("name", "?"))

    @property
    def access_lab_id(self) -> int:
        """The lab whose members see this evaluation: its run's."""
        return self.run.experiment.lab_id

    @property
    def access_owner_id(self) -> int:
        """Who changes this evaluation: its own owner (who launched it)."""
        return self.owner_id

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

"""The lab's registry: the models it can put in a pool and the evaluation suites it
evaluates on.

- :class:`ModelEntry`: a tiny-zoo id or a local HF directory.
- :class:`EvalSuite`: an evaluation suite (local task files,
  :class:`trainer.evals.suite.SuiteConfig`).
- :class:`TaskFileCheck`: the worker's check of one task file (a large file is read by
  the worker, never by a request).

The tables keep the names they had in the ``experiments`` app (``experiments_*``): the
models moved in issue 32 without moving a row (``db_table``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from webapp.core.models import NAME_VALIDATOR, Lab, LabOwned


class ModelEntry(LabOwned, models.Model):
    """A model the lab can put in a pool: a tiny-zoo id or a local HF directory."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="models")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="model_entries"
    )
    name = models.CharField(max_length=64, validators=[NAME_VALIDATOR])
    source = models.CharField(
        max_length=500, help_text="'zoo:<id>' or an absolute path to a local HF model directory"
    )
    tokenizer = models.CharField(
        max_length=500, blank=True, help_text="Local tokenizer directory; blank: the model's"
    )
    family = models.CharField(max_length=64, blank=True, help_text="e.g. llama, qwen2, gpt2")
    parameter_count = models.BigIntegerField(
        null=True, blank=True, help_text="Parameters; MWRA places policies by it"
    )
    chat_template = models.TextField(blank=True, help_text="Jinja; blank: the tokenizer's own")
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "experiments_modelentry"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["lab", "name"], name="model_entry_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class EvalSuite(LabOwned, models.Model):
    """An evaluation suite of the lab: a named list of local task files, each with a type
    (the JSON of :class:`trainer.evals.suite.SuiteConfig`, task paths absolute). Its name
    is the ``<suite>`` of the ``eval/<suite>/<task>/accuracy`` metric keys."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="eval_suites")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="eval_suites"
    )
    name = models.CharField(max_length=64, validators=[NAME_VALIDATOR])
    description = models.TextField(blank=True)
    tasks = models.JSONField(help_text='[{"name", "type", "path", "limit"}], paths absolute')
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "experiments_evalsuite"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["lab", "name"], name="eval_suite_unique_name")
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("registry:suite_detail", args=[self.pk])

    @property
    def config(self) -> dict[str, object]:
        """The suite as the trainer reads it (``--suite`` JSON)."""
        return {"name": self.name, "tasks": self.tasks}


class TaskFileCheck(models.Model):
    """What reading an evaluation task file found, for one version of it: the check's
    cache, shared by the web processes and the worker (:mod:`webapp.experiments.
    suite_checks`). A file larger than the in-request limit is read by the worker; its
    row waits ``pending`` until then. A new version (size or mtime) replaces the row's."""

    class State(models.TextChoices):
        PENDING = "pending"
        DONE = "done"

    path = models.CharField(max_length=1000, help_text="The file's real path")
    type = models.CharField(max_length=32, help_text="The task type it was read as")
    size = models.BigIntegerField()
    mtime_ns = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    items = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Why the file cannot be used; blank: fine")
    requested_at = models.DateTimeField(default=timezone.now)
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "experiments_taskfilecheck"
        constraints = [
            models.UniqueConstraint(fields=["path", "type"], name="task_file_check_unique")
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.type}): {self.state}"

"""The lab's data: who is in the lab, which models it has, what it ran and what came back.

- :class:`Lab` / :class:`LabMembership`: everyone in a lab sees everything of that lab;
  only an object's owner (or staff) changes it.
- :class:`ModelEntry`: the lab's model registry (a zoo id or a local HF directory).
- :class:`Experiment`: a policy pool + regime + hyperparameters + seeds + resources. Its
  ``config`` is the exact trainer JSON (``trainer.config.RunConfig``) minus the seed.
- :class:`Run`: one experiment x one seed (x one regime for sweeps); its ``config`` is the
  exact JSON the job reads. Carries the state machine and the Slurm facts.
- :class:`MetricSeries` / :class:`MetricPoint`: one series per (run, policy, key), one
  point per step, keyed so that ingestion is idempotent (SPEC 8.1).
- :class:`SeriesPack`: a finished series' points packed into two byte strings, a read
  copy for comparisons (:mod:`webapp.experiments.series_packs`).
- :class:`TransferEvent`: the peer-transfer log (SPEC 4.5).
- :class:`EvalSuite`: the lab's evaluation suites (local task files,
  :class:`trainer.evals.suite.SuiteConfig`).
- :class:`Evaluation`: one evaluation job: a suite on checkpoints of a run (and its base
  models); its results are the run's ``eval/<suite>/<task>/...`` metric series.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone

from trainer import wire
from trainer.declarations import REGIME_NAME_MAX_LENGTH
from trainer.wire import event_kind_choices

NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
    "Use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit.",
)


class Lab(models.Model):
    """A research group sharing one view of all its experiments."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="LabMembership", related_name="labs"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class LabMembership(models.Model):
    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_memberships"
    )
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lab", "user"], name="membership_unique_lab_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.lab}"


class Tag(models.Model):
    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=48, validators=[NAME_VALIDATOR])

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["lab", "name"], name="tag_unique_name")]

    def __str__(self) -> str:
        return self.name


class ModelEntry(models.Model):
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
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["lab", "name"], name="model_entry_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class Sweep(models.Model):
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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiments:sweep_detail", args=[self.pk])


class Experiment(models.Model):
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
    tags = models.ManyToManyField(Tag, blank=True, related_name="experiments")
    notes = models.TextField(blank=True)
    auto_eval_suite = models.ForeignKey(
        "EvalSuite",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiments:experiment_detail", args=[self.pk])

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
    tags = models.ManyToManyField(Tag, blank=True, related_name="runs")
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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    def get_absolute_url(self) -> str:
        return reverse("experiments:run_detail", args=[self.pk])

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

    @property
    def policy_names(self) -> list[str]:
        return [policy.get("name", "?") for policy in self.config.get("pool", [])]

    @property
    def worker_nodes_text(self) -> str:
        """Where each policy ran, in pool order: ``"a on node1, b on node2"``; ``""``
        before any worker has said."""
        nodes = self.worker_nodes or {}
        return ", ".join(f"{name} on {nodes[name]}" for name in self.policy_names if name in nodes)


class SavedComparison(models.Model):
    """A comparison worth coming back to: its query (run selection + view settings) under
    a stable URL the whole lab can open. Selections by filter (e.g. all SGT runs of a
    pool) pick up new runs as they arrive."""

    lab = models.ForeignKey(Lab, on_delete=models.CASCADE, related_name="comparisons")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="comparisons"
    )
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=32, unique=True)
    query = models.TextField(help_text="The compare page's query string")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiments:comparison_saved", args=[self.slug])


class RunStateChange(models.Model):
    """One step of a run's life: the state it entered and when (the run page's timeline)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="state_changes")
    state = models.CharField(max_length=16, choices=Run.State.choices)
    at = models.DateTimeField()
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.run_id} -> {self.state} at {self.at:%H:%M:%S}"


class MetricSeries(models.Model):
    """One curve: (run, policy, key). Policy ``_pool`` holds pool-level metrics."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="series")
    policy = models.CharField(max_length=wire.MAX_POLICY_NAME)
    key = models.CharField(max_length=wire.MAX_KEY)
    rolled_through = models.IntegerField(
        default=-1,
        db_default=-1,  # ingestion creates series in SQL
        help_text="every SeriesRollup block of this series that ends at or before this "
        "step is current (-1: none); the rollup sweep raises it, ingestion lowers it "
        "when a point lands at or below it (webapp.experiments.series_rollups)",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "policy", "key"], name="series_unique_run_policy_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.policy}/{self.key}"


class MetricPoint(models.Model):
    """One value of a series at a step; (series, step) is the primary key.

    ``value`` is a float8; PostgreSQL stores NaN and +-Infinity natively. (SQLite, the
    demo's database, turns NaN into NULL; readers treat NULL as NaN.)
    """

    pk = models.CompositePrimaryKey("series_id", "step")
    # The primary key (series_id, step) already indexes series_id.
    series = models.ForeignKey(
        MetricSeries, on_delete=models.CASCADE, related_name="points", db_index=False
    )
    step = models.IntegerField()
    value = models.FloatField(null=True)
    wall_time = models.FloatField(null=True)

    def __str__(self) -> str:
        return f"{self.series_id}@{self.step}={self.value}"


class SeriesPack(models.Model):
    """A copy of one series' points as two byte strings: big-endian int4 steps and float8
    values (NaN for a NULL), aligned, not necessarily in step order. Built by beat's
    ``series_pack`` task for the series of finished runs; ingestion deletes a run's packs in the
    transaction that writes new points to it (:mod:`webapp.experiments.series_packs`).
    On PostgreSQL both columns are stored out of line and uncompressed (migration 0003).
    """

    series = models.OneToOneField(
        MetricSeries, on_delete=models.CASCADE, primary_key=True, related_name="pack"
    )
    steps = models.BinaryField()
    values = models.BinaryField()

    def __str__(self) -> str:
        return f"pack of {self.series_id} ({len(self.steps) // 4} points)"


class SeriesRollup(models.Model):
    """Summary of one block of a series' steps, at one of several block sizes: the
    points' count, their lowest and highest (value, step) in PostgreSQL's float8 order
    (NaN highest, ties to the lower step) and their sum (NaN or an infinity propagates).
    Level ``L`` covers the steps ``[block * size, (block + 1) * size)`` with ``size =
    ROLLUP_SIZES[L]`` (64, 256, ..., 4**7 * 64; :mod:`webapp.api.downsample`). The level-0
    blocks (64 steps) also keep their points, as a pack does (big-endian int4 steps and
    float8 values, in step order), for reads that need every point.

    A block is current for its steps up to its series' ``rolled_through`` (the 64-step
    block holding that step may be partial: it has the points up to it); rows
    beyond it are stale and no reader looks at them. Built by the rollup sweep
    (:mod:`webapp.experiments.series_rollups`); the raw points stay the source of truth.
    A block with no points has no row.
    """

    pk = models.CompositePrimaryKey("series_id", "level", "block")
    series = models.ForeignKey(
        MetricSeries, on_delete=models.CASCADE, related_name="rollups", db_index=False
    )
    level = models.SmallIntegerField()
    block = models.IntegerField()
    n_points = models.IntegerField()
    low_value = models.FloatField()
    low_step = models.IntegerField()
    high_value = models.FloatField()
    high_step = models.IntegerField()
    value_sum = models.FloatField()
    steps = models.BinaryField(null=True)
    values = models.BinaryField(null=True)

    def __str__(self) -> str:
        return f"rollup {self.series_id}/{self.level}/{self.block} ({self.n_points} points)"


class TransferEvent(models.Model):
    """Experience crossing from one policy to another (SPEC 4.5). ``kind`` is an event kind
    of a registered sharing regime (the wire contract's, :mod:`trainer.wire`); its choices
    are read at each use, so a regime registered later counts too."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="transfer_events")
    step = models.IntegerField()
    source = models.CharField(max_length=wire.MAX_POLICY_NAME)
    target = models.CharField(max_length=wire.MAX_POLICY_NAME)
    kind = models.CharField(max_length=REGIME_NAME_MAX_LENGTH, choices=event_kind_choices)
    prompt_id = models.CharField(max_length=wire.MAX_KEY, blank=True)
    count = models.IntegerField(default=1)
    weight = models.FloatField(null=True, blank=True)
    samples = models.JSONField(
        null=True,
        blank=True,
        help_text="What crossed: [{text, tokens?, reward?, truncated}], bounded by the "
        "ingestion API; null for events of trainers that did not ship it",
    )

    class Meta:
        ordering = ["step", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "source", "target", "kind", "prompt_id"],
                name="transfer_event_unique",
            )
        ]
        indexes = [models.Index(fields=["run", "step"], name="transfer_event_run_step")]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.step} {self.source}->{self.target} {self.kind}"


class EvalSuite(models.Model):
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
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["lab", "name"], name="eval_suite_unique_name")
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("experiments:suite_detail", args=[self.pk])

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
        constraints = [
            models.UniqueConstraint(fields=["path", "type"], name="task_file_check_unique")
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.type}): {self.state}"


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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of run {self.run_id} on {self.suite_name}"

    @property
    def suite_name(self) -> str:
        return str(self.suite_config.get("name", "?"))

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

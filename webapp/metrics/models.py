"""What came back from the runs: curves and the peer-transfer log.

- :class:`MetricSeries` / :class:`MetricPoint`: one series per (run, policy, key), one
  point per step, keyed so that ingestion is idempotent (SPEC 8.1).
- :class:`SeriesPack`: a finished series' points packed into two byte strings, a read
  copy for comparisons (:mod:`webapp.metrics.series_packs`).
- :class:`SeriesRollup`: per-block summaries for downsampled reads.
- :class:`TransferEvent`: the peer-transfer log (SPEC 4.5).

The tables keep the names they had in the ``experiments`` app (``experiments_*``).
"""

from __future__ import annotations

from django.db import models

from trainer import wire
from trainer.declarations import REGIME_NAME_MAX_LENGTH
from trainer.wire import event_kind_choices
from webapp.runs.models import Run


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
        "when a point lands at or below it (webapp.metrics.series_rollups)",
    )
    # The series' lowest and highest stored step, kept by ingestion in the transaction
    # that stores the points (webapp.metrics.ingest), so that a comparison's step range
    # reads one row a series instead of probing the points' index twice (issue 35: 4,000
    # probes, 28-108 ms cold at lab scale). NULL: not known (no points yet, or points
    # written other than by ingestion); readers then look at the points.
    first_step = models.IntegerField(null=True, blank=True, db_default=None)
    last_step = models.IntegerField(null=True, blank=True, db_default=None)

    class Meta:
        db_table = "experiments_metricseries"
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
    # The primary key (series_id, step) already indexes series_id. No foreign-key
    # constraint in the database: checking it at commit was the largest part of an
    # ingestion batch (issue 35). Instead ingestion holds its run's row FOR KEY SHARE and
    # a run's delete takes it FOR UPDATE before deleting anything (webapp.metrics.deletion),
    # so a batch and a delete never interleave; Django's collector deletes the points
    # (on_delete=CASCADE). A raw SQL delete of series must delete their points itself.
    series = models.ForeignKey(
        MetricSeries,
        on_delete=models.CASCADE,
        related_name="points",
        db_index=False,
        db_constraint=False,
    )
    step = models.IntegerField()
    value = models.FloatField(null=True)
    wall_time = models.FloatField(null=True)

    class Meta:
        db_table = "experiments_metricpoint"

    def __str__(self) -> str:
        return f"{self.series_id}@{self.step}={self.value}"


class SeriesPack(models.Model):
    """A copy of one series' points as two byte strings: big-endian int4 steps and float8
    values (NaN for a NULL), aligned, not necessarily in step order. Built by beat's
    ``series_pack`` task for the series of finished runs; ingestion deletes a run's packs in the
    transaction that writes new points to it (:mod:`webapp.metrics.series_packs`).
    On PostgreSQL both columns are stored out of line and uncompressed (migration 0003).
    """

    series = models.OneToOneField(
        MetricSeries, on_delete=models.CASCADE, primary_key=True, related_name="pack"
    )
    steps = models.BinaryField()
    values = models.BinaryField()

    class Meta:
        db_table = "experiments_seriespack"

    def __str__(self) -> str:
        return f"pack of {self.series_id} ({len(self.steps) // 4} points)"


class SeriesRollup(models.Model):
    """Summary of one block of a series' steps, at one of several block sizes: the
    points' count, their lowest and highest (value, step) in PostgreSQL's float8 order
    (NaN highest, ties to the lower step) and their sum (NaN or an infinity propagates).
    Level ``L`` covers the steps ``[block * size, (block + 1) * size)`` with ``size =
    ROLLUP_SIZES[L]`` (64, 256, ..., 4**7 * 64; :mod:`webapp.metrics.downsample`). The level-0
    blocks (64 steps) also keep their points, as a pack does (big-endian int4 steps and
    float8 values, in step order), for reads that need every point.

    A block is current for its steps up to its series' ``rolled_through`` (the 64-step
    block holding that step may be partial: it has the points up to it); rows
    beyond it are stale and no reader looks at them. Built by the rollup sweep
    (:mod:`webapp.metrics.series_rollups`); the raw points stay the source of truth
    until retention drops an old finished run's (:mod:`webapp.metrics.retention`).
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

    class Meta:
        db_table = "experiments_seriesrollup"

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
        db_table = "experiments_transferevent"
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

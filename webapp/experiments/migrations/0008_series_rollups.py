"""Series rollups (issue 23): per-block summaries of each series at block sizes 64, 256,
..., 4**7 * 64 steps, the 64-step blocks with their points, and each series' watermark
``rolled_through`` (webapp/experiments/series_rollups.py).

Every run is marked not packed, so that the beat's sweep rolls up the runs that exist
(it rolls up the runs not packed) and then marks them packed again (their packs are
kept: only the mark is rebuilt).
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def _unmark_packed(apps: Any, schema_editor: Any) -> None:
    apps.get_model("experiments", "Run").objects.update(series_packed=False)


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0007_run_worker_nodes"),
    ]

    operations = [
        migrations.AddField(
            model_name="metricseries",
            name="rolled_through",
            field=models.IntegerField(
                default=-1,
                db_default=-1,
                help_text="every SeriesRollup block of this series that ends at or before this step is current (-1: none); the rollup sweep raises it, ingestion lowers it when a point lands at or below it (webapp.experiments.series_rollups)",
            ),
        ),
        migrations.CreateModel(
            name="SeriesRollup",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "series_id",
                        "level",
                        "block",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("level", models.SmallIntegerField()),
                ("block", models.IntegerField()),
                ("n_points", models.IntegerField()),
                ("low_value", models.FloatField()),
                ("low_step", models.IntegerField()),
                ("high_value", models.FloatField()),
                ("high_step", models.IntegerField()),
                ("value_sum", models.FloatField()),
                ("steps", models.BinaryField(null=True)),
                ("values", models.BinaryField(null=True)),
                (
                    "series",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="rollups",
                        to="experiments.metricseries",
                    ),
                ),
            ],
        ),
        migrations.RunPython(_unmark_packed, reverse_code=migrations.RunPython.noop),
    ]

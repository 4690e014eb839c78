"""Packed copies of finished series (:class:`SeriesPack`), read by comparisons, and the
run's ``series_packed`` hint for the beat's packing sweep.

On PostgreSQL the two byte strings are stored out of line (TOAST) without compression:
random float8 values do not compress, and reading them back needs no decompression.
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

TABLE = "experiments_seriespack"


def _storage(kind: str) -> Any:
    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute(
            f"ALTER TABLE {TABLE} ALTER COLUMN steps SET STORAGE {kind}, "
            f'ALTER COLUMN "values" SET STORAGE {kind}'
        )

    return apply


class Migration(migrations.Migration):
    dependencies = [("experiments", "0002_metricpoint_covering_primary_key")]

    operations = [
        migrations.CreateModel(
            name="SeriesPack",
            fields=[
                (
                    "series",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="pack",
                        serialize=False,
                        to="experiments.metricseries",
                    ),
                ),
                ("steps", models.BinaryField()),
                ("values", models.BinaryField()),
            ],
        ),
        migrations.RunPython(
            _storage("EXTERNAL"), reverse_code=migrations.RunPython.noop, elidable=False
        ),
        migrations.AddField(
            model_name="run",
            name="series_packed",
            field=models.BooleanField(
                default=False,
                help_text="every series of this finished run has its SeriesPack (a hint for "
                "the beat's packing sweep; ingestion clears it when it writes new points)",
            ),
        ),
    ]

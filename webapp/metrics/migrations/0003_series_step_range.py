"""MetricSeries.first_step / last_step: each series' lowest and highest stored step (issue 35).

A comparison's step range read them from the points' primary key, two index probes a
series (4,000 for 50 runs x 8 metrics x 5 policies: 28-108 ms, cold when the drawn runs'
pages are not in shared buffers). Ingestion now keeps them in the transaction that stores
the points (:mod:`webapp.metrics.ingest`); this fills them from the points already
stored, with two index probes a series once (min and max over the primary key's range,
in SQL that PostgreSQL and SQLite both run). Adding a nullable column without a default
rewrites nothing on PostgreSQL.
"""

from django.db import migrations, models

_BACKFILL_SQL = """
    UPDATE experiments_metricseries SET
        first_step = (SELECT min(p.step) FROM experiments_metricpoint p
                      WHERE p.series_id = experiments_metricseries.id),
        last_step = (SELECT max(p.step) FROM experiments_metricpoint p
                     WHERE p.series_id = experiments_metricseries.id)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0002_point_series_no_db_constraint"),
    ]

    operations = [
        migrations.AddField(
            model_name="metricseries",
            name="first_step",
            field=models.IntegerField(blank=True, db_default=None, null=True),
        ),
        migrations.AddField(
            model_name="metricseries",
            name="last_step",
            field=models.IntegerField(blank=True, db_default=None, null=True),
        ),
        migrations.RunSQL(_BACKFILL_SQL, reverse_sql=migrations.RunSQL.noop, elidable=True),
    ]

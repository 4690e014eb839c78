"""The points' primary key covers ``value``: series reads are index-only scans."""

from __future__ import annotations

import pytest
from django.db import connection

from webapp.metrics.batch import parse_batch
from webapp.metrics.ingest import metrics_ingest
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def test_the_primary_key_is_series_and_step_and_includes_value() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index "
            "WHERE indrelid = 'experiments_metricpoint'::regclass AND indisprimary"
        )
        (definition,) = cursor.fetchone()
    assert "(series_id, step) INCLUDE (value)" in definition


def test_a_series_read_is_an_index_only_scan_and_replays_still_conflict(run: Run) -> None:
    body = (
        b'{"points": ['
        + b",".join(
            b'{"policy": "llama", "key": "val/reward@1", "step": %d, "value": 0.5}' % step
            for step in range(1, 201)
        )
        + b"]}"
    )
    assert metrics_ingest(run=run, batch=parse_batch(body)).points_accepted == 200
    # A replay meets the primary key: nothing new, nothing changed.
    assert metrics_ingest(run=run, batch=parse_batch(body)).points_accepted == 0
    series = MetricSeries.objects.get(run=run)
    assert MetricPoint.objects.filter(series=series).count() == 200
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(
            "EXPLAIN SELECT step, value FROM experiments_metricpoint "
            "WHERE series_id = %s AND step > 10 ORDER BY step",
            [series.pk],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan using experiments_metricpoint_pkey" in plan, plan

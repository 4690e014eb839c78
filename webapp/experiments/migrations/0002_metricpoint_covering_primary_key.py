"""The points' primary key carries ``value`` (PostgreSQL ``INCLUDE``), so that reading
a series is an index-only scan.

Ingestion writes a run's points step by step, every series at each step, so one
series' 1,000 points lie on about 700 different heap pages; its index entries are
adjacent. With ``value`` in the index, a 50-run comparison (500,000 points) reads about
4,000 index pages instead of about 370,000 heap and index pages (``bench/scale.py``,
``EXPLAIN (ANALYZE, BUFFERS)``). The key columns stay (series_id, step), so ``ON
CONFLICT DO NOTHING`` and every lookup work as before. Other databases keep the plain
key (the model does not change).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLE = "experiments_metricpoint"
CONSTRAINT = "experiments_metricpoint_pkey"


def _primary_key(include: str) -> Any:
    def apply(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        schema_editor.execute(
            f"ALTER TABLE {TABLE} DROP CONSTRAINT {CONSTRAINT}, "
            f"ADD CONSTRAINT {CONSTRAINT} PRIMARY KEY (series_id, step){include}"
        )

    return apply


class Migration(migrations.Migration):
    dependencies = [("experiments", "0001_initial")]

    operations = [
        migrations.RunPython(
            _primary_key(" INCLUDE (value)"), reverse_code=_primary_key(""), elidable=False
        )
    ]

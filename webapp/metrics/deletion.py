"""Deleting a run takes its row ``FOR UPDATE`` first, so no ingestion batch is half-way.

The points have no foreign key in the database (issue 35: checking it at commit was the
largest part of a 10,000-point batch), so PostgreSQL neither cascades a delete to them nor
refuses one that would orphan them. Django's collector deletes a run's points itself
(``on_delete=CASCADE``: the points first, by their series' ids, then the series, then the
run), whichever way the run goes: ``Run.delete()``, an experiment's, a sweep's or a
lab's delete, the admin's.

What the collector cannot see is a batch in flight: its points are inserted, not yet
committed, when the collector deletes the points it sees, and they would survive the
series' delete. So each run's ``pre_delete`` (sent by the collector inside its
transaction, before it deletes anything) locks the run's row ``FOR UPDATE``; ingestion
holds the same row ``FOR KEY SHARE`` from before it looks at the series to its commit
(:func:`webapp.metrics.ingest._run_lock`). A delete that comes second waits for the
batch, then (each statement reading what is committed) deletes its points too; a batch
that comes second waits for the delete and finds no run (a 401 on its retry).

Left to the database's remaining foreign keys: a batch that creates a series between the
collector's look and this lock makes the delete fail at commit (the series' key to the
run), whole, leaving no orphans; deleting it again succeeds. No product path deletes a
series or points on their own; one that does must take the run's row the same way.
"""

from __future__ import annotations

from typing import Any

from django.db import connections

from webapp.runs.models import Run


def run_delete_lock(sender: type[Run], instance: Run, using: str, **kwargs: Any) -> None:
    """``pre_delete`` of :class:`Run`: lock its row ``FOR UPDATE`` in the collector's
    transaction, waiting for any ingestion batch that holds it (PostgreSQL only: SQLite has
    one writer at a time)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    table = connection.ops.quote_name(Run._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE", [instance.pk])

"""``manage.py drop_packed_points [--dry-run] [--older-than-days N] [--max-runs M]``: drop
the raw points of finished runs that are packed and rolled up (issue 35).

Every page and export then reads those series from their packs
(:mod:`webapp.metrics.retention`); each run keeps its clock series and its evaluations raw.
``--older-than-days`` defaults to ``MRL_RAW_POINT_RETENTION_DAYS``; with neither, nothing
is dropped. ``--dry-run`` counts what would go and deletes nothing. Prints one line a run
and a total.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.metrics import retention


class Command(BaseCommand):
    help = (
        "Drop the raw points of finished runs whose series are packed and rolled up "
        "(pages and exports read the packs); each run keeps its clock and evaluations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than-days",
            type=float,
            default=None,
            help="only runs finished more than this many days ago "
            "(default: MRL_RAW_POINT_RETENTION_DAYS)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be dropped; drop nothing"
        )
        parser.add_argument("--max-runs", type=int, default=None, help="at most this many runs")

    def handle(
        self,
        *args: Any,
        older_than_days: float | None,
        dry_run: bool,
        max_runs: int | None,
        **options: Any,
    ) -> None:
        days = older_than_days
        if days is None:
            days = settings.RAW_POINT_RETENTION_DAYS
        if days is None or days < 0:
            raise CommandError(
                "retention is off: give --older-than-days N or set MRL_RAW_POINT_RETENTION_DAYS"
            )
        if not retention.retention_enabled():
            raise CommandError("raw points are dropped on PostgreSQL only (packs live there)")
        done = retention.drop_packed_points(days, dry_run=dry_run, max_runs=max_runs)
        verb = "would drop" if dry_run else "dropped"
        for run in done:
            self.stdout.write(
                f"run {run.run_id}: {verb} {run.points_dropped} points of "
                f"{run.series_dropped} series ({run.series_kept} kept raw)"
            )
        points = sum(run.points_dropped for run in done)
        self.stdout.write(f"{verb} {points} raw points of {len(done)} runs")

"""Rolling up and packing runs' series for reads: the service behind beat's
``series_pack`` task (:data:`scheduler.dispatch.SERIES_PACK`), on its own tick, apart
from the status sync. Each tick first rolls up the runs not packed yet (running ones
too: :mod:`webapp.metrics.series_rollups`), then packs a few finished ones."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError

from webapp.metrics import retention, series_packs, series_rollups

log = logging.getLogger(__name__)


def pack_finished_runs() -> int:
    """Pack the series of a few finished runs that are not all packed yet
    (``PACK_RUNS_PER_SYNC``; :func:`webapp.metrics.series_packs.packs_sweep`), so
    that comparisons read packs. The number of runs packed."""
    return _read_cache_sweep(
        "packing finished runs' series",
        lambda: series_packs.packs_sweep(settings.PACK_RUNS_PER_SYNC),
        "packed %d series of %d finished runs",
    )


def roll_up_runs() -> int:
    """Roll up the series of the runs not packed yet (``ROLLUP_RUNS_PER_SYNC``;
    :func:`webapp.metrics.series_rollups.rollups_sweep`), so that long series and
    comparisons of running or just-finished runs read block summaries. The number of
    runs rolled up."""
    return _read_cache_sweep(
        "rolling up runs' series",
        lambda: series_rollups.rollups_sweep(settings.ROLLUP_RUNS_PER_SYNC),
        "rolled up %d blocks of %d runs",
    )


RETENTION_RUNS_PER_PASS = 50
"""Beat's hourly retention pass drops the raw points of at most this many runs (a run of
8 million points is one DELETE of a few tens of seconds)."""


def drop_old_points() -> int:
    """Drop the raw points of the runs finished more than ``RAW_POINT_RETENTION_DAYS``
    ago whose series are packed and rolled up (:mod:`webapp.metrics.retention`); nothing
    while it is unset. The number of runs whose points were dropped."""
    days = settings.RAW_POINT_RETENTION_DAYS
    if days is None:
        return 0
    try:
        done = retention.drop_packed_points(days, max_runs=RETENTION_RUNS_PER_PASS)
    except DatabaseError as exc:
        log.warning("dropping old runs' raw points failed: %s", exc)
        return 0
    if done:
        points = sum(run.points_dropped for run in done)
        log.info("dropped %d raw points of %d runs", points, len(done))
    return len(done)


def _read_cache_sweep(what: str, sweep: Callable[[], tuple[int, int]], done: str) -> int:
    """Run one sweep of a read cache: (runs, items) -> runs. A failure is logged and
    the next tick tries again; readers read the points meanwhile."""
    try:
        runs, items = sweep()
    except DatabaseError as exc:
        log.warning("%s failed: %s", what, exc)
        return 0
    if items:
        log.info(done, items, runs)
    return runs

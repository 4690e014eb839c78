"""Rolling up and packing runs' series for reads: the service behind beat's
``series_pack`` task (:data:`scheduler.dispatch.SERIES_PACK`), on its own tick, apart
from the status sync. Each tick first rolls up the runs not packed yet (running ones
too: :mod:`webapp.experiments.series_rollups`), then packs a few finished ones."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError

from webapp.experiments import series_packs, series_rollups

log = logging.getLogger(__name__)


def pack_finished_runs() -> int:
    """Pack the series of a few finished runs that are not all packed yet
    (``PACK_RUNS_PER_SYNC``; :func:`webapp.experiments.series_packs.packs_sweep`), so
    that comparisons read packs. The number of runs packed."""
    return _read_cache_sweep(
        "packing finished runs' series",
        lambda: series_packs.packs_sweep(settings.PACK_RUNS_PER_SYNC),
        "packed %d series of %d finished runs",
    )


def roll_up_runs() -> int:
    """Roll up the series of the runs not packed yet (``ROLLUP_RUNS_PER_SYNC``;
    :func:`webapp.experiments.series_rollups.rollups_sweep`), so that long series and
    comparisons of running or just-finished runs read block summaries. The number of
    runs rolled up."""
    return _read_cache_sweep(
        "rolling up runs' series",
        lambda: series_rollups.rollups_sweep(settings.ROLLUP_RUNS_PER_SYNC),
        "rolled up %d blocks of %d runs",
    )


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

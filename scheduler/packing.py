"""Rolling up and packing runs' series for reads: the service behind beat's
``series_pack`` task (:data:`scheduler.dispatch.SERIES_PACK`), on its own tick, apart
from the status sync. Each tick first rolls up the runs not packed yet (running ones
too: :mod:`webapp.experiments.series_rollups`), then packs a few finished ones."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError

from webapp.experiments import series_packs, series_rollups

log = logging.getLogger(__name__)


def pack_finished_runs() -> int:
    """Pack the series of a few finished runs that are not all packed yet
    (``PACK_RUNS_PER_SYNC``; :func:`webapp.experiments.series_packs.packs_sweep`), so
    that comparisons read packs. A read cache: a failure is logged, the next tick tries
    again, and comparisons read the points meanwhile. The number of runs packed."""
    try:
        runs, series = series_packs.packs_sweep(settings.PACK_RUNS_PER_SYNC)
    except DatabaseError as exc:
        log.warning("packing finished runs' series failed: %s", exc)
        return 0
    if runs:
        log.info("packed %d series of %d finished runs", series, runs)
    return runs


def roll_up_runs() -> int:
    """Roll up the series of the runs not packed yet (``ROLLUP_RUNS_PER_SYNC``;
    :func:`webapp.experiments.series_rollups.rollups_sweep`), so that long series and
    comparisons of running or just-finished runs read block summaries. A read cache: a
    failure is logged, the next tick tries again, readers read the points meanwhile.
    The number of runs rolled up."""
    try:
        runs, blocks = series_rollups.rollups_sweep(settings.ROLLUP_RUNS_PER_SYNC)
    except DatabaseError as exc:
        log.warning("rolling up runs' series failed: %s", exc)
        return 0
    if blocks:
        log.info("rolled up %d runs (%d blocks)", runs, blocks)
    return runs

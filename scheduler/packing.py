"""Packing finished runs' series for comparisons: the service behind beat's
``series_pack`` task (:data:`scheduler.dispatch.SERIES_PACK`), on its own tick, apart
from the status sync."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError

from webapp.experiments import series_packs

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

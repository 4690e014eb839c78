from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """The history of the tables before issue 32: the migrations that created them.

    Every model moved to its area (core, registry, runs, metrics, evals, compare) and kept
    its table (``experiments_*``); migration 0012 hands them over without moving a row.
    The app holds no model and stays installed so that its migrations keep running."""

    name = "webapp.experiments"
    label = "experiments"
    verbose_name = "Experiments (history)"

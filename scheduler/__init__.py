"""Celery app and tasks that submit runs (Slurm or local) and track them.

``celery -A scheduler worker`` finds the app here.
"""

from scheduler.celery import app

__all__ = ["app"]

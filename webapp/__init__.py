"""The Mutual RL Lab web app (Django project).

Importing the Celery app here makes ``shared_task`` bind to it whenever Django starts.
"""

from scheduler.celery import app as celery_app

__all__ = ["celery_app"]

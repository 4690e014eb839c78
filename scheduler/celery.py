"""The Celery application, configured from Django settings (``CELERY_*``)."""

import os

from celery import Celery

import scheduler.embedded_broker as embedded_broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

embedded_broker.register()  # the demo's broker URL, mrl-sqlite+sqlite:///...
app = Celery("mutual_rl_lab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["scheduler"])

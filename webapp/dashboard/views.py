"""The dashboard: the researcher's landing page."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.core.selectors import heartbeat_latest, service_is_online


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """Experiments and runs (none until the web-app issue adds them) and system status."""
    context = {
        "experiments": [],
        "system": {
            "database": connection.vendor,
            "broker": settings.CELERY_BROKER_URL.split("://", 1)[0],
            "executor": settings.EXECUTOR,
            "worker_online": service_is_online(service="celery-worker"),
            "worker_last_seen": heartbeat_latest(service="celery-worker"),
        },
    }
    return render(request, "dashboard/index.html", context)

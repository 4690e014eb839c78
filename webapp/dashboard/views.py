"""The dashboard: the researcher's landing page."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.core.demo_status import demo_status
from webapp.core.selectors import heartbeat_latest, service_is_online
from webapp.runs.permissions import visible_experiments, visible_runs


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The lab's latest experiments and runs, and whether the system is healthy."""
    context = {
        "demo": demo_status(),
        "experiments": visible_experiments(request.user).select_related("owner")[:10],
        "runs": visible_runs(request.user).select_related("experiment")[:10],
        "system": {
            "database": connection.vendor,
            "broker": settings.CELERY_BROKER_URL.split("://", 1)[0],
            "executor": settings.EXECUTOR,
            "worker_online": service_is_online(service="celery-worker"),
            "worker_last_seen": heartbeat_latest(service="celery-worker"),
        },
    }
    return render(request, "dashboard/index.html", context)

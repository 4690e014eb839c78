"""Health probe for load balancers and the compose healthcheck."""

from django.db import connection
from django.http import HttpRequest, JsonResponse


def healthz(request: HttpRequest) -> JsonResponse:
    """200 with the database vendor when the database answers, 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means "unhealthy"
        return JsonResponse({"ok": False, "error": type(exc).__name__}, status=503)
    return JsonResponse({"ok": True, "database": connection.vendor})

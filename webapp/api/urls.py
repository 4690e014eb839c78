"""The JSON API under /api/v1/ (ingestion per SPEC 8.1, and the read API)."""

from django.urls import path

from webapp.api import schema, views

app_name = "api"
urlpatterns = [
    path("runs/<int:run_id>/ingest", views.ingest, name="ingest"),
    path("runs/<int:run_id>/series", views.series, name="series"),
    path("runs/<int:run_id>/keys", views.keys, name="keys"),
    path("runs/<int:run_id>/events", views.events, name="events"),
    path("runs/<int:run_id>/events/summary", views.events_summary, name="events_summary"),
    path("runs/<int:run_id>/events/<int:event_id>", views.event_detail, name="event_detail"),
    path("runs/<int:run_id>/status", views.status, name="status"),
    path("worker", views.worker, name="worker"),
    path("schema", schema.schema, name="schema"),
]

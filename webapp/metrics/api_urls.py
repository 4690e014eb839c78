"""The JSON API under /api/v1/ (ingestion per SPEC 8.1, the run page's reads, and the
runs API for code): the URL namespace ``api``."""

from django.urls import path

from webapp.metrics import views, views_runs
from webapp.metrics import views_schema as schema

app_name = "api"
urlpatterns = [
    path("runs", views_runs.runs, name="runs"),
    path("runs/<int:run_id>/history", views_runs.history, name="history"),
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

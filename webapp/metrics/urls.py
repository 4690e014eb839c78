"""A run's curves as files (the run page's CSV links)."""

from django.urls import path

from webapp.metrics import views_csv

app_name = "metrics"
urlpatterns = [
    path("runs/<int:pk>/curves.csv", views_csv.run_curves_csv, name="run_curves_csv"),
    path("runs/<int:pk>/metric.csv", views_csv.run_metric_csv, name="run_metric_csv"),
]

"""Evaluations: an experiment's automatic suite, a run's evaluations, one evaluation's
cancel and log."""

from django.urls import path

from webapp.evals import views

app_name = "evals"
urlpatterns = [
    path(
        "experiments/<int:pk>/auto-eval/", views.experiment_auto_eval, name="experiment_auto_eval"
    ),
    path("runs/<int:pk>/evaluate/", views.run_evaluate, name="run_evaluate"),
    path("runs/<int:pk>/evaluations/", views.run_evaluations, name="run_evaluations"),
    path("evaluations/<int:pk>/cancel/", views.evaluation_cancel, name="evaluation_cancel"),
    path("evaluations/<int:pk>/log/", views.evaluation_log, name="evaluation_log"),
]

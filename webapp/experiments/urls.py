"""Pages: experiments, runs, the model registry."""

from django.urls import path

from webapp.experiments import (
    views_compare,
    views_compose,
    views_csv,
    views_evals,
    views_pages,
    views_suites,
    views_zoo,
)

app_name = "experiments"
urlpatterns = [
    # experiments
    path("experiments/", views_pages.experiment_list, name="experiment_list"),
    path("experiments/new/", views_compose.experiment_create, name="experiment_create"),
    path("experiments/<int:pk>/", views_pages.experiment_detail, name="experiment_detail"),
    path("experiments/<int:pk>/edit/", views_compose.experiment_edit, name="experiment_edit"),
    path("experiments/<int:pk>/clone/", views_pages.experiment_clone, name="experiment_clone"),
    path("experiments/<int:pk>/launch/", views_pages.experiment_launch, name="experiment_launch"),
    path("experiments/<int:pk>/delete/", views_pages.experiment_delete, name="experiment_delete"),
    # runs
    path("runs/", views_pages.run_list, name="run_list"),
    path("runs/<int:pk>/", views_pages.run_detail, name="run_detail"),
    path("runs/<int:pk>/token/", views_pages.run_token, name="run_token"),
    path("runs/<int:pk>/cancel/", views_pages.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/resubmit/", views_pages.run_resubmit, name="run_resubmit"),
    path("runs/<int:pk>/log/", views_pages.run_log, name="run_log"),
    path("runs/<int:pk>/annotate/", views_pages.run_annotate, name="run_annotate"),
    path("runs/<int:pk>/curves.csv", views_csv.run_curves_csv, name="run_curves_csv"),
    path("runs/<int:pk>/metric.csv", views_csv.run_metric_csv, name="run_metric_csv"),
    # evaluations of a run
    path(
        "experiments/<int:pk>/auto-eval/",
        views_evals.experiment_auto_eval,
        name="experiment_auto_eval",
    ),
    path("runs/<int:pk>/evaluate/", views_evals.run_evaluate, name="run_evaluate"),
    path("runs/<int:pk>/evaluations/", views_evals.run_evaluations, name="run_evaluations"),
    path("evaluations/<int:pk>/cancel/", views_evals.evaluation_cancel, name="evaluation_cancel"),
    path("evaluations/<int:pk>/log/", views_evals.evaluation_log, name="evaluation_log"),
    # sweeps and comparisons
    path("experiments/<int:pk>/sweep/", views_compare.sweep_create, name="sweep_create"),
    path("sweeps/", views_compare.sweep_list, name="sweep_list"),
    path("sweeps/<int:pk>/", views_compare.sweep_detail, name="sweep_detail"),
    path("compare/", views_compare.compare, name="compare"),
    path("compare/save/", views_compare.comparison_save, name="comparison_save"),
    path("compare/saved/", views_compare.comparison_list, name="comparison_list"),
    path("compare/saved/<slug:slug>/", views_compare.comparison_saved, name="comparison_saved"),
    # model registry
    path("models/", views_compose.model_list, name="model_list"),
    path("models/new/", views_compose.model_create, name="model_create"),
    path("models/<int:pk>/edit/", views_compose.model_edit, name="model_edit"),
    path("models/<int:pk>/delete/", views_compose.model_delete, name="model_delete"),
    # building a zoo recipe (the compose page's button)
    path("zoo/build/", views_zoo.zoo_build, name="zoo_build"),
    # evaluation suites
    path("suites/", views_suites.suite_list, name="suite_list"),
    path("suites/new/", views_suites.suite_create, name="suite_create"),
    path("suites/<int:pk>/", views_suites.suite_detail, name="suite_detail"),
    path("suites/<int:pk>/edit/", views_suites.suite_edit, name="suite_edit"),
    path("suites/<int:pk>/delete/", views_suites.suite_delete, name="suite_delete"),
]

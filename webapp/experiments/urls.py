"""Pages: experiments, runs, the model registry."""

from django.urls import path

from webapp.experiments import views_compare, views_compose, views_csv, views_pages

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
]

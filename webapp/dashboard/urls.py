"""The pages a researcher works in: home, experiments (list, compose, detail, launch) and
runs (list, the run page and its actions)."""

from django.urls import path

from webapp.dashboard import views, views_compose, views_pages

app_name = "dashboard"
urlpatterns = [
    path("", views.index, name="index"),
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
]

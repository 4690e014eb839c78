"""The registry: models (and building a zoo recipe, the compose page's button) and
evaluation suites."""

from django.urls import path

from webapp.registry import views_models, views_suites, views_zoo

app_name = "registry"
urlpatterns = [
    path("models/", views_models.model_list, name="model_list"),
    path("models/new/", views_models.model_create, name="model_create"),
    path("models/<int:pk>/edit/", views_models.model_edit, name="model_edit"),
    path("models/<int:pk>/delete/", views_models.model_delete, name="model_delete"),
    path("zoo/build/", views_zoo.zoo_build, name="zoo_build"),
    path("suites/", views_suites.suite_list, name="suite_list"),
    path("suites/new/", views_suites.suite_create, name="suite_create"),
    path("suites/<int:pk>/", views_suites.suite_detail, name="suite_detail"),
    path("suites/<int:pk>/edit/", views_suites.suite_edit, name="suite_edit"),
    path("suites/<int:pk>/delete/", views_suites.suite_delete, name="suite_delete"),
]

"""Comparisons: the compare page, saved comparisons and sweeps (pages), comparison data
(JSON, under /api/v1/) and exports (files); mounted at the root."""

from django.urls import path

from webapp.compare import views, views_pages

app_name = "compare"
urlpatterns = [
    # pages
    path("experiments/<int:pk>/sweep/", views_pages.sweep_create, name="sweep_create"),
    path("sweeps/", views_pages.sweep_list, name="sweep_list"),
    path("sweeps/<int:pk>/", views_pages.sweep_detail, name="sweep_detail"),
    path("compare/", views_pages.compare, name="page"),
    path("compare/save/", views_pages.comparison_save, name="comparison_save"),
    path("compare/saved/", views_pages.comparison_list, name="comparison_list"),
    path("compare/saved/<slug:slug>/", views_pages.comparison_saved, name="comparison_saved"),
    # data and exports
    path("api/v1/compare", views.data, name="data"),
    path("api/v1/compare/summary", views.summary, name="summary"),
    path("api/v1/compare/bars", views.bars, name="bars"),
    path("api/v1/compare/saved/<str:ref>", views.saved_data, name="saved_data"),
    path("compare/export.<str:fmt>", views.export_file, name="export"),
    path("compare/table.<str:fmt>", views.table_file, name="table"),
    path("compare/bars.<str:fmt>", views.bars_file, name="bars_file"),
]

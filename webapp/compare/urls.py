"""Comparison data (JSON, under /api/v1/) and exports (files); mounted at the root."""

from django.urls import path

from webapp.compare import views

app_name = "compare"
urlpatterns = [
    path("api/v1/compare", views.data, name="data"),
    path("api/v1/compare/summary", views.summary, name="summary"),
    path("api/v1/compare/bars", views.bars, name="bars"),
    path("compare/export.<str:fmt>", views.export_file, name="export"),
    path("compare/table.<str:fmt>", views.table_file, name="table"),
    path("compare/bars.<str:fmt>", views.bars_file, name="bars_file"),
]

from django.contrib import admin

from webapp.core.models import Lab, LabMembership
from webapp.registry.models import ModelEntry
from webapp.runs.models import Experiment, Run, Tag


class MembershipInline(admin.TabularInline):
    model = LabMembership
    extra = 1


@admin.register(Lab)
class LabAdmin(admin.ModelAdmin):
    inlines = [MembershipInline]
    list_display = ["name", "created_at"]


@admin.register(ModelEntry)
class ModelEntryAdmin(admin.ModelAdmin):
    list_display = ["name", "lab", "source", "family", "parameter_count", "owner"]
    list_filter = ["lab", "family"]


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "lab", "owner", "regime", "off_policy", "created_at"]
    list_filter = ["lab", "regime", "off_policy"]
    search_fields = ["name"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["name", "experiment", "seed", "state", "last_step", "slurm_job_id"]
    list_filter = ["state", "regime", "backend"]
    search_fields = ["name", "slurm_job_id"]
    exclude = ["token_hash"]


admin.site.register(Tag)

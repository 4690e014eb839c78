from django.contrib import admin

from webapp.core.models import ServiceHeartbeat


@admin.register(ServiceHeartbeat)
class ServiceHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("service", "hostname", "pid", "seen_at")

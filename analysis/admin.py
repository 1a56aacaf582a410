from django.contrib import admin

from annotation.admin import ViewOnlyAdmin

from .models import ExportLog, Job


@admin.register(ExportLog)
class ExportLogAdmin(ViewOnlyAdmin):
    list_display = ["created_at", "user", "study", "channel", "what", "rows"]
    list_filter = ["channel", "what"]
    search_fields = ["user__username", "study__name"]


@admin.register(Job)
class JobAdmin(ViewOnlyAdmin):
    """Background jobs, for finding out why one failed; people cancel theirs on its page."""

    list_display = ["created_at", "kind", "owner", "study", "state", "fraction", "error"]
    list_filter = ["kind", "state"]
    search_fields = ["owner__username", "study__name"]
    list_select_related = ["owner", "study"]

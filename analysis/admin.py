from django.contrib import admin

from annotation.admin import ViewOnlyAdmin

from .models import ExportLog


@admin.register(ExportLog)
class ExportLogAdmin(ViewOnlyAdmin):
    list_display = ["created_at", "user", "study", "channel", "what", "rows"]
    list_filter = ["channel", "what"]
    search_fields = ["user__username", "study__name"]
